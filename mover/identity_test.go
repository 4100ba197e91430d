package mover_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// TestIdentityFinishedAfterADeathAtTheDecision: a move target's identity
// columns are BY DEFAULT while the applier writes explicit values, and the
// cutover sets them to the source's kind in a target transaction that
// commits right after the decision. A mover killed between the decision and
// that commit leaves them unfinished; the cleanup phase of the next run must
// finish them (the source's kind, sequence past every value the table
// holds), or the application's next insert would reuse an id. A BY DEFAULT
// column has the kind it must end with already.
func TestIdentityFinishedAfterADeathAtTheDecision(t *testing.T) {
	for _, kind := range []string{"ALWAYS", "BY DEFAULT"} {
		t.Run(kind, func(t *testing.T) {
			identityAfterDeath(t, kind, nil)
		})
	}
}

// TestIdentityFinishedWhenTheOldTableIsGone: the same death, and then the
// old shard dropped by hand before the next run: its cleanup cannot read
// the source's kind any more. It must still finish the move (not stay in
// cleanup, holding its slot), with the sequence past every id the target
// holds; the column keeps BY DEFAULT (the log says how to set it).
func TestIdentityFinishedWhenTheOldTableIsGone(t *testing.T) {
	identityAfterDeath(t, "ALWAYS", func(ctx context.Context, src *pgx.Conn, old string) {
		// The settlement of the next run would commit the prepared fence;
		// here it is committed by hand, and the old shard dropped.
		var gid string
		require.NoError(t, src.QueryRow(ctx, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'shardmover%'").Scan(&gid))
		_, err := src.Exec(ctx, "COMMIT PREPARED '"+gid+"'")
		require.NoError(t, err)
		_, err = src.Exec(ctx, "DROP TABLE "+old)
		require.NoError(t, err)
	})
}

// idName is the identity column of identityAfterDeath's table, idCol the
// same quoted.
const (
	idName = `I"d'); DROP TABLE items; --`
	idCol  = `"I""d'); DROP TABLE items; --"`
)

// identityAfterDeath moves a shard of a table with an identity column of
// kind, kills the mover between the decision and the target's commit, runs
// gone (when set) on the source with the old shard's name, then resumes the
// move and checks the target's identity column.
func identityAfterDeath(t *testing.T, kind string, gone func(ctx context.Context, src *pgx.Conn, old string)) {
	sb, cat := sandboxtest.NewCompat(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	coord, err := cat.ConnectNode(ctx, sb.Coordinator().Host, sb.Coordinator().Port)
	require.NoError(t, err)
	defer coord.Close(ctx)
	// The identity column's name is hostile: every statement that finishes
	// it must quote it.
	_, err = coord.Exec(ctx, "CREATE TABLE items (tenant bigint NOT NULL, "+idCol+" bigint GENERATED "+kind+" AS IDENTITY, note text, PRIMARY KEY (tenant, "+idCol+"))")
	require.NoError(t, err)
	_, err = cat.CreateDistributedTable(ctx, metadata.DistributeOptions{Table: "items", Column: "tenant", ShardCount: 2})
	require.NoError(t, err)
	n, err := sb.AddNode(ctx)
	require.NoError(t, err)
	target, err := cat.AddNode(ctx, n.Host, n.Port, metadata.DefaultAddNodeOptions())
	require.NoError(t, err)

	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	var group metadata.ShardGroup
	for _, g := range cl.Groups {
		if len(g.ShardIDs) == 1 && g.GroupID != target.GroupID {
			group = g
		}
	}
	require.NotEmpty(t, group.ShardIDs)
	shard := group.ShardIDs[0]
	var ident, old string
	for _, s := range cl.Shards {
		if s.ID == shard {
			ident = s.Ident().Sanitize()
			old = pgx.Identifier{s.Ident()[0], metadata.FencedName(s.Ident()[1], 1)}.Sanitize()
		}
	}
	src, ok := cl.NodeByGroup(group.GroupID)
	require.True(t, ok)
	sconn, err := cat.ConnectNode(ctx, src.Host, src.Port)
	require.NoError(t, err)
	defer sconn.Close(ctx)
	_, err = sconn.Exec(ctx, "INSERT INTO "+ident+" (tenant, note) SELECT 1, 'row ' || g FROM generate_series(1, 50) g")
	require.NoError(t, err)

	cfg := testConfig(t)
	cfg.AfterPhase = func(_ int64, p mover.Phase) error {
		if p != mover.Indexing {
			return nil
		}
		// Rows inserted while catching up: the source's sequence moves past
		// what the copy saw, and the applier carries them with their ids.
		_, err := sconn.Exec(context.Background(), "INSERT INTO "+ident+" (tenant, note) SELECT 1, 'late' FROM generate_series(1, 5)")
		return err
	}
	cfg.CutoverStep = func(_ int64, step string) error {
		if step == "decided" {
			return errors.New("die between the decision and the target's commit")
		}
		return nil
	}
	eng := mover.New(cfg, cat)
	m := scheduleMove(t, eng, shard, target)
	require.Equal(t, int64(1), m.ID, "the old shard's fenced name assumes move 1")
	err = eng.Run(ctx, m.ID)
	require.ErrorIs(t, err, mover.ErrKilled)

	tconn, err := cat.ConnectNode(ctx, target.Host, target.Port)
	require.NoError(t, err)
	defer tconn.Close(ctx)
	var got string
	require.NoError(t, tconn.QueryRow(ctx, "SELECT attidentity::text FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2", ident, idName).Scan(&got))
	assert.Equal(t, "d", got, "the kill left the identity unfinished (BY DEFAULT on the target until the cutover's commit)")
	if gone != nil {
		gone(ctx, sconn, old)
	}

	require.NoError(t, mover.New(testConfig(t), cat).Run(ctx, m.ID))
	require.NoError(t, tconn.QueryRow(ctx, "SELECT attidentity::text FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2", ident, idName).Scan(&got))
	want := map[string]string{"ALWAYS": "a", "BY DEFAULT": "d"}[kind]
	if gone != nil {
		want = "d" // the source's kind could not be read
	}
	assert.Equal(t, want, got, "the kind, GENERATED %s on the source", kind)
	var maxID, next int64
	require.NoError(t, tconn.QueryRow(ctx, "SELECT max("+idCol+") FROM "+ident).Scan(&maxID))
	require.Equal(t, int64(55), maxID)
	require.NoError(t, tconn.QueryRow(ctx, "INSERT INTO "+ident+" (tenant, note) VALUES (1, 'after') RETURNING "+idCol).Scan(&next))
	assert.Greater(t, next, maxID, "the next identity value is past every id the table holds")
}
