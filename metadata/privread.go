package metadata

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ReadTablesPrivileges reads only the owner and the privileges in effect
// (TableDDL.Owner and Grants, exactly as ReadTablesDDL reads them) of
// tables, in the order given, in one batch: what PrivilegeStatements needs
// of a move's freshly created target, without the columns, constraints
// and indexes. A table that does not exist is refused as ReadTableDDL
// refuses it.
func ReadTablesPrivileges(ctx context.Context, conn interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, tables []pgx.Identifier) ([]TableDDL, error) {
	if len(tables) == 0 {
		return nil, nil
	}
	schemas, names, displays, err := splitTables(tables)
	if err != nil {
		return nil, err
	}
	out := make([]TableDDL, len(tables))
	found := make([]bool, len(tables))
	for i := range out {
		out[i].Grants = []Grant{}
	}
	b := &pgx.Batch{}
	b.Queue(`WITH t AS (`+tablesSQL+`)
		SELECT t.i, pg_catalog.pg_get_userbyid(c.relowner)::text
		FROM t JOIN pg_catalog.pg_class c ON c.oid = t.oid
		ORDER BY t.i`, schemas, names)
	b.Queue(tablesGrantsSQL, schemas, names)
	err = func() error {
		res := conn.SendBatch(ctx, b)
		defer res.Close()
		rows, err := res.Query()
		if err != nil {
			return err
		}
		var pos int32
		var owner string
		if _, err := pgx.ForEachRow(rows, []any{&pos, &owner}, func() error {
			if pos < 1 || int(pos) > len(tables) {
				return fmt.Errorf("catalog query returned table position %d of %d", pos, len(tables))
			}
			out[pos-1].Owner, found[pos-1] = owner, true
			return nil
		}); err != nil {
			return err
		}
		rows, err = res.Query()
		if err != nil {
			return fmt.Errorf("read privileges: %w", err)
		}
		var g Grant
		if _, err := pgx.ForEachRow(rows, []any{&pos, &g.Column, &g.Grantee, &g.Privilege, &g.Grantable}, func() error {
			if pos < 1 || int(pos) > len(tables) {
				return fmt.Errorf("catalog query returned table position %d of %d", pos, len(tables))
			}
			out[pos-1].Grants = append(out[pos-1].Grants, g)
			return nil
		}); err != nil {
			return fmt.Errorf("read privileges: %w", err)
		}
		return res.Close()
	}()
	if err != nil {
		return nil, fmt.Errorf("read the privileges of %s: %w", strings.Join(displays, ", "), err)
	}
	for i := range tables {
		if !found[i] {
			return nil, invalidf("table %s does not exist", displays[i])
		}
	}
	return out, nil
}
