package mover

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/metadata"
)

// sameTable names a referenced table on the target as on the source: a
// moved group's tables keep their names, and a reference table's shard
// has the same name on every node.
func sameTable(id pgx.Identifier) pgx.Identifier { return id }

// finishObjects makes sure, after the decision, that the target's tables
// have the source's trigger states, row-level security and foreign keys,
// then validates the foreign keys the source has validated (the cutover
// added them NOT VALID: validating scans the table but blocks no write).
//
// The cutover sets the first three in its target transaction, which
// commits right after the decision. When this run did not see that commit
// (a restart, a commit that failed), they are set again from the old
// tables on the source: the fenced copies on compat, the old shards under
// their own names on Citus until Citus's deferred cleanup drops them. An
// old table already gone leaves an error in the log naming what could not
// be checked; the move does not stay in cleanup, holding its slot, for it.
// A foreign key that does not validate (rows the source never had, which
// cannot be) is logged as an error and stays NOT VALID.
func (r *run) finishObjects(ctx context.Context, m metadata.Move) (err error) {
	validate := r.validate
	if !r.targetFinished {
		src, dst, err := r.connectBoth(ctx)
		if err != nil {
			return err
		}
		defer r.releaseBoth(src, dst, &err)
		tables := shardIdents(m)
		gots, err := metadata.ReadTablesDDL(ctx, dst, tables)
		if err != nil {
			return fmt.Errorf("read the definition of %s on the target: %w", names(tables), err)
		}
		olds, fenced := make([]pgx.Identifier, len(tables)), map[string]pgx.Identifier{}
		for i, t := range tables {
			olds[i] = t
			if !r.citus() {
				olds[i] = pgx.Identifier{t[0], movedName(t[1], m.ID)}
				fenced[olds[i].Sanitize()] = t
			}
		}
		ref := func(id pgx.Identifier) pgx.Identifier {
			if t, ok := fenced[id.Sanitize()]; ok {
				return t
			}
			return id
		}
		validate = nil
		for i, t := range tables {
			var exists bool
			if err := src.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1) IS NOT NULL", olds[i].Sanitize()).Scan(&exists); err != nil {
				return fmt.Errorf("look for %s on the source: %w", olds[i].Sanitize(), err)
			}
			if !exists {
				if len(gots[i].Triggers) > 0 || len(gots[i].Policies) > 0 {
					r.log.Error("the old table is gone from the source, so the states of the target's triggers and its row-level security could not be checked after the decision; compare them with the distributed table's",
						zap.String("table", t.Sanitize()))
				}
				continue
			}
			old, err := metadata.ReadTableDDL(ctx, src, olds[i])
			if err != nil {
				return fmt.Errorf("read the definition of %s on the source: %w", olds[i].Sanitize(), err)
			}
			have := map[string]bool{}
			for _, fk := range gots[i].ForeignKeys {
				have[fk.Name] = true
			}
			if err := metadata.RunDDL(ctx, dst, old.CutoverStatements(t, ref, func(name string) bool { return have[name] })...); err != nil {
				return fmt.Errorf("set the triggers, row-level security and foreign keys of %s on the target as on the source: %w", t.Sanitize(), err)
			}
			validate = append(validate, old.ValidateStatements(t)...)
		}
	}
	dst, err := r.e.session(ctx, r.target)
	if err != nil {
		return err
	}
	defer r.e.release(r.target, dst, &err)
	for _, stmt := range validate {
		if verr := metadata.RunDDL(ctx, dst, stmt); verr != nil {
			r.log.Error("a foreign key of a moved table does not validate on the target; it stays NOT VALID", zap.String("statement", stmt), zap.Error(verr))
		}
	}
	r.validate = nil
	return nil
}
