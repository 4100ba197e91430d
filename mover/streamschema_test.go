package mover_test

import (
	"context"
	"math/rand"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	verifypkg "github.com/shardmover/shardmover/verify"
)

// TestStreamHostileSchema moves two shard groups of the matrix's hostile
// tables (names with dots, quotes, spaces and non-ASCII letters, a name
// long enough for the fenced name's hashed form, an index named like an
// SQL statement, char(n), varchar(n), bit(n), numeric(p,s), timestamp(p)
// and arrays of them, a domain, an enum, a composite, identity and
// generated columns, REPLICA IDENTITY FULL with duplicate rows) in one
// stream, with inserts, updates and deletes made on the source while the
// stream catches up (the grouped apply carries them). Afterwards each
// group's new copy must equal its fenced old copy row for row (verify
// --group), and no node's victim table may be touched.
func TestStreamHostileSchema(t *testing.T) {
	ctx := context.Background()
	sb, cat := sandboxtest.NewCompat(t, 2)
	conns := map[int32]*pgx.Conn{}
	connect := func(n metadata.Node) {
		c, err := cat.ConnectNode(ctx, n.Host, n.Port)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close(context.Background()) })
		conns[n.GroupID] = c
	}
	nodes, err := cat.Nodes(ctx)
	require.NoError(t, err)
	for _, n := range nodes {
		connect(n)
		mxExec(t, ctx, conns[n.GroupID], mxDDL(mxSchema, n.IsCoordinator())...)
		mxExec(t, ctx, conns[n.GroupID], "CREATE TABLE victim (x int)", "INSERT INTO victim VALUES (42)")
	}
	t1 := metadata.QualifiedName(pgx.Identifier{mxSchema, mxT1})
	t2 := metadata.QualifiedName(pgx.Identifier{mxSchema, mxT2})
	_, err = cat.CreateDistributedTable(ctx, metadata.DistributeOptions{Table: t1, Column: "id", ShardCount: 4})
	require.NoError(t, err)
	_, err = cat.CreateDistributedTable(ctx, metadata.DistributeOptions{Table: t2, Column: "id"})
	require.NoError(t, err)
	sn, err := sb.AddNode(ctx)
	require.NoError(t, err)
	target, err := cat.AddNode(ctx, sn.Host, sn.Port, metadata.DefaultAddNodeOptions())
	require.NoError(t, err)
	connect(target)
	mxExec(t, ctx, conns[target.GroupID], mxDDL(mxSchema, false)...)
	mxExec(t, ctx, conns[target.GroupID], "CREATE TABLE victim (x int)", "INSERT INTO victim VALUES (42)")

	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	tab1, err := cl.Table(t1)
	require.NoError(t, err)
	tab2, err := cl.Table(t2)
	require.NoError(t, err)
	shards1, shards2 := cl.TableShards(tab1), cl.TableShards(tab2)
	require.Len(t, shards1, 4)
	require.Len(t, shards2, 4)
	ids := &mxIDs{cl: cl, table: tab1}
	r := rand.New(rand.NewSource(11))
	place := func(i int) int32 {
		p, ok := cl.PlacementOf(shards1[i].ID)
		require.True(t, ok)
		return p.GroupID
	}
	byIndex := map[int][]int64{}
	for i := range shards1 {
		tx, err := conns[place(i)].Begin(ctx)
		require.NoError(t, err)
		for k := 0; k < 60; k++ {
			id := ids.take(i)
			byIndex[i] = append(byIndex[i], id)
			_, err := insertT1(ctx, tx, shards1[i].Ident().Sanitize(), id, r)
			require.NoError(t, err)
			require.NoError(t, insertT2(ctx, tx, shards2[i].Ident().Sanitize(), id, r))
			if k%4 == 0 { // equal rows: REPLICA IDENTITY FULL must change one of them
				require.NoError(t, insertT2(ctx, tx, shards2[i].Ident().Sanitize(), id, rand.New(rand.NewSource(1))))
				require.NoError(t, insertT2(ctx, tx, shards2[i].Ident().Sanitize(), id, rand.New(rand.NewSource(1))))
			}
		}
		require.NoError(t, tx.Commit(ctx))
	}
	// Two groups on one source: the stream.
	source := place(0)
	var moving []int
	for i := range shards1 {
		if place(i) == source {
			moving = append(moving, i)
		}
	}
	require.GreaterOrEqual(t, len(moving), 2)
	moving = moving[:2]

	// While the stream catches up: changes in small and large transactions.
	changed := false
	cfg := testConfig(t)
	cfg.AfterPhase = func(_ int64, p mover.Phase) error {
		if p != mover.Indexing || changed {
			return nil
		}
		changed = true
		src := conns[source]
		for _, i := range moving {
			s1, s2 := shards1[i].Ident().Sanitize(), shards2[i].Ident().Sanitize()
			tx, err := src.Begin(ctx)
			if err != nil {
				return err
			}
			for k := 0; k < 20; k++ {
				id := ids.take(i)
				if _, err := insertT1(ctx, tx, s1, id, r); err != nil {
					return err
				}
				if err := insertT2(ctx, tx, s2, id, r); err != nil {
					return err
				}
			}
			if err := tx.Commit(ctx); err != nil {
				return err
			}
			for k, id := range byIndex[i][:30] {
				stmts := []string{
					`UPDATE ` + s1 + ` SET ` + qi(mxV5) + ` = $2, ` + qi(mxN62) + ` = $3::numeric, ` + qi(mxC10) + ` = $4, b4 = B'1010', ts0 = '2025-05-05 05:05:05.678', u = u + 1000 WHERE id = $1`,
					`UPDATE ` + s2 + ` SET c10 = $2, n = $3::numeric WHERE ctid = (SELECT ctid FROM ` + s2 + ` WHERE id = $1 LIMIT 1)`,
				}
				args := [][]any{{id, mxV5Val(r), mxN62Val(r), mxC10Val(r)}, {id, mxC10Val(r), mxN62Val(r)}}
				if k%7 == 0 {
					stmts = []string{`DELETE FROM ` + s1 + ` WHERE id = $1`, `DELETE FROM ` + s2 + ` WHERE ctid = (SELECT ctid FROM ` + s2 + ` WHERE id = $1 LIMIT 1)`}
					args = [][]any{{id}, {id}}
				}
				for j, st := range stmts {
					if _, err := src.Exec(ctx, st, args[j]...); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	eng := mover.New(cfg, cat)
	var reqs []mover.Request
	for _, i := range moving {
		reqs = append(reqs, mover.Request{ShardID: shards1[i].ID, Target: target})
	}
	specs, err := eng.Resolve(ctx, reqs)
	require.NoError(t, err)
	job, moves, err := eng.Schedule(ctx, "rebalance", specs)
	require.NoError(t, err)
	res, err := eng.RunJob(ctx, job.ID, streamLimits)
	require.NoError(t, err)
	require.True(t, changed, "the changes were made during catch-up")
	assert.Equal(t, mover.JobResult{Done: 2}, res)

	for _, m := range moves {
		got, err := cat.Move(ctx, m.ID)
		require.NoError(t, err)
		assert.Equal(t, moves[0].ID, got.StreamID(), "move %d rode the first's stream", m.ID)
		rep, err := verifypkg.Run(ctx, cat, verifypkg.Options{Group: &verifypkg.GroupKey{ColocationID: m.ColocationID, Index: m.ShardIndex}})
		require.NoError(t, err)
		require.Len(t, rep.Shards, 2)
		for _, sr := range rep.Shards {
			assert.True(t, sr.Compared, "shard %d compared with its old copy: %s", sr.ShardID, sr.Message)
			assert.True(t, sr.Match, "shard %d equals its fenced old copy: %s %v", sr.ShardID, sr.Message, sr.Differing)
		}
	}
	for g, c := range conns {
		var x int
		assert.NoError(t, c.QueryRow(ctx, "SELECT x FROM victim").Scan(&x), "victim on group %d", g)
		assert.Equal(t, 42, x)
	}
}
