package mover_test

import (
	"context"
	"errors"
	"testing"
	"time"

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
// finish them (kind ALWAYS, sequence past every value the table holds), or
// the application's next insert would reuse an id.
func TestIdentityFinishedAfterADeathAtTheDecision(t *testing.T) {
	sb, cat := sandboxtest.NewCompat(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	coord, err := cat.ConnectNode(ctx, sb.Coordinator().Host, sb.Coordinator().Port)
	require.NoError(t, err)
	defer coord.Close(ctx)
	_, err = coord.Exec(ctx, "CREATE TABLE items (tenant bigint NOT NULL, id bigint GENERATED ALWAYS AS IDENTITY, note text, PRIMARY KEY (tenant, id))")
	require.NoError(t, err)
	_, err = cat.CreateDistributedTable(ctx, metadata.DistributeOptions{Table: "items", Column: "tenant", ShardCount: 2})
	require.NoError(t, err)
	n, err := sb.AddNode(ctx)
	require.NoError(t, err)
	target, err := cat.AddNode(ctx, n.Host, n.Port, metadata.DefaultAddNodeOptions())
	require.NoError(t, err)

	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	shard := cl.Groups[0].ShardIDs[0]
	var ident string
	for _, s := range cl.Shards {
		if s.ID == shard {
			ident = s.Ident().Sanitize()
		}
	}
	src, ok := cl.NodeByGroup(cl.Groups[0].GroupID)
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
	err = eng.Run(ctx, m.ID)
	require.ErrorIs(t, err, mover.ErrKilled)

	tconn, err := cat.ConnectNode(ctx, target.Host, target.Port)
	require.NoError(t, err)
	defer tconn.Close(ctx)
	var kind string
	require.NoError(t, tconn.QueryRow(ctx, "SELECT attidentity::text FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'id'", ident).Scan(&kind))
	assert.Equal(t, "d", kind, "the kill left the identity unfinished (else the test tests nothing)")

	require.NoError(t, mover.New(testConfig(t), cat).Run(ctx, m.ID))
	require.NoError(t, tconn.QueryRow(ctx, "SELECT attidentity::text FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'id'", ident).Scan(&kind))
	assert.Equal(t, "a", kind, "GENERATED ALWAYS again, as on the source")
	var maxID, next int64
	require.NoError(t, tconn.QueryRow(ctx, "SELECT max(id) FROM "+ident).Scan(&maxID))
	require.NoError(t, tconn.QueryRow(ctx, "INSERT INTO "+ident+" (tenant, note) VALUES (1, 'after') RETURNING id").Scan(&next))
	assert.Greater(t, next, maxID, "the next identity value is past every id the table holds")
}
