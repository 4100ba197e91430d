package verify

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/shardmover/shardmover/internal/ratelimit"
	"github.com/shardmover/shardmover/metadata"
)

// TableResult is the comparison of one table between a source and a target
// read by CompareTx.
type TableResult struct {
	// Table is the schema-qualified name, for people.
	Table string `json:"table"`
	// Source and Target are the two sides (Node is left to the caller).
	Source *Side `json:"source,omitempty"`
	Target *Side `json:"target,omitempty"`
	Match  bool  `json:"match"`
	// Differing lists the first differing keys as the target sees them:
	// "changed", "missing" (only the source has the row) or "added" (only
	// the target has it).
	Differing []KeyDiff `json:"differing_keys,omitempty"`
	// Note says why no keys are listed for a difference, or that a table
	// is missing on one side.
	Note string `json:"note,omitempty"`
}

// Describe is one sentence on a difference: the table, both counts and
// checksums, and the first differing keys.
func (t TableResult) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s differs", t.Table)
	if t.Source != nil && t.Target != nil {
		fmt.Fprintf(&b, ": %d rows with checksum %s on the source, %d rows with checksum %s on the target",
			t.Source.Rows, t.Source.Checksum, t.Target.Rows, t.Target.Checksum)
	}
	if len(t.Differing) > 0 {
		var ks []string
		for _, d := range t.Differing {
			ks = append(ks, fmt.Sprintf("(%s) %s", d.Key, keyWhat(d.What)))
		}
		fmt.Fprintf(&b, "; first differing keys: %s", strings.Join(ks, ", "))
	}
	if t.Note != "" {
		fmt.Fprintf(&b, "; %s", t.Note)
	}
	return b.String()
}

func keyWhat(w string) string {
	switch w {
	case "missing":
		return "missing on the target"
	case "added":
		return "only on the target"
	}
	return "changed on the target"
}

// CompareTx compares tables between two open transactions, one on each
// side, by row count and order-independent checksum, listing the first
// differing primary keys of a table that differs (see the package
// documentation). Each transaction must be REPEATABLE READ and already hold
// its snapshot, so that what it reads is the one point the caller chose
// (for a move: the source's exported snapshot at a consistent point and the
// target read while the applier is held there). CompareTx fixes the text
// settings with SET LOCAL in both and leaves both open; it only reads.
// Only opts' throttle, MaxKeys and BatchPages are used. A table missing on
// a side is a difference.
func CompareTx(ctx context.Context, src, tgt pgx.Tx, tables []pgx.Identifier, opts Options) ([]TableResult, error) {
	if opts.BytesPerSecond < 0 || opts.RowsPerSecond < 0 || opts.MaxKeys < 0 {
		return nil, metadata.Invalidf("the throttle and the number of keys to list must not be negative")
	}
	if opts.MaxKeys == 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	for _, tx := range []pgx.Tx{src, tgt} {
		for _, s := range sessionSettings {
			if _, err := tx.Exec(ctx, s); err != nil {
				return nil, err
			}
		}
	}
	r := &reader{opts: opts, bytes: ratelimit.New(opts.BytesPerSecond), rows: ratelimit.New(opts.RowsPerSecond)}
	var out []TableResult
	for _, t := range tables {
		res := TableResult{Table: metadata.DisplayQualifiedName(metadata.QualifiedName(t))}
		ssum, sfound, err := r.checksumTx(ctx, src, t)
		if err != nil {
			return nil, fmt.Errorf("checksum %s on the source: %w", res.Table, err)
		}
		tsum, tfound, err := r.checksumTx(ctx, tgt, t)
		if err != nil {
			return nil, fmt.Errorf("checksum %s on the target: %w", res.Table, err)
		}
		if sfound {
			res.Source = &Side{Table: res.Table, Rows: ssum.rows, Checksum: ssum.String()}
		}
		if tfound {
			res.Target = &Side{Table: res.Table, Rows: tsum.rows, Checksum: tsum.String()}
		}
		switch {
		case !sfound && !tfound:
			res.Note = "it exists on neither side"
		case !sfound:
			res.Note = "it does not exist on the source"
		case !tfound:
			res.Note = "it does not exist on the target"
		case ssum == tsum:
			res.Match = true
		default:
			key, err := primaryKey(ctx, src, t)
			if err != nil {
				return nil, fmt.Errorf("read the primary key of %s: %w", res.Table, err)
			}
			if len(key) == 0 {
				res.Note = noKeyNote
				break
			}
			res.Differing, res.Note, err = r.differingKeysTx(ctx, tgt, t, src, t, key)
			if err != nil {
				return nil, fmt.Errorf("find differing keys of %s: %w", res.Table, err)
			}
		}
		out = append(out, res)
	}
	return out, nil
}
