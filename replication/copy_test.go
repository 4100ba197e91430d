package replication_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/replication"
)

// TestCopyEqualsSnapshotUnderLoad: while writers change the table, a copy
// in concurrent ctid ranges holds exactly the rows of the exported snapshot
// (read back through the same snapshot), and TruncateTarget makes a copy
// re-runnable.
func TestCopyEqualsSnapshotUnderLoad(t *testing.T) {
	e := newEnv(t)
	e.both(`CREATE TABLE load (id bigint PRIMARY KEY, v bigint NOT NULL, payload text NOT NULL)`)
	const writers, initial = 3, 20000
	e.exec(e.src, `INSERT INTO load SELECT g, 0, 'init-' || g || repeat('x', 80) FROM generate_series(1, $1) g`, initial)
	l := &ledger{rows: map[int64]string{}}
	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	var wg sync.WaitGroup
	var ops atomic.Int64
	for w := 0; w < writers; w++ {
		conn := e.connect(e.srcDSN)
		wg.Add(1)
		go func(w int) { defer wg.Done(); writeLoad(ctx, t, conn, w, writers, initial, l, &ops) }(w)
	}
	// Slot creation waits for a running-transactions record; a checkpoint
	// logs one, so the test need not wait for the background writer's.
	cp := e.connect(e.srcDSN)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			cp.Exec(context.Background(), "CHECKPOINT")
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	verify := e.connect(e.srcDSN)
	bg := context.Background()
	for i := 0; i < 3; i++ {
		snap, err := replication.CreateSlot(bg, e.srcDSN, "shardmover_copy")
		require.NoError(t, err)
		tx, err := verify.BeginTx(bg, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		require.NoError(t, err)
		_, err = tx.Exec(bg, "SET TRANSACTION SNAPSHOT '"+snap.Name+"'")
		require.NoError(t, err)
		var want string
		require.NoError(t, tx.QueryRow(bg, "SELECT count(*) || ':' || md5(string_agg(x::text, '|' ORDER BY id)) FROM load x").Scan(&want))
		require.NoError(t, tx.Rollback(bg))

		opts := replication.DefaultCopyOptions()
		opts.SourceDSN, opts.TargetDSN, opts.Snapshot, opts.Tables = e.srcDSN, e.tgtDSN, snap.Name, []pgx.Identifier{{"public", "load"}}
		opts.RangesPerTable, opts.MinRangeBytes, opts.Workers, opts.TruncateTarget = 4, 256<<10, 3, true
		if i == 1 {
			// Adaptive, and held to about a sixth of the table per
			// second, so that it runs long enough to add a stream (and
			// drop it again: a shared limit makes the second one pay
			// nothing), while the other workers wait idle.
			var size int64
			require.NoError(t, verify.QueryRow(bg, "SELECT pg_table_size('load')").Scan(&size))
			opts.Adaptive, opts.BytesPerSecond = true, max(size/6, 64<<10)
		}
		res, err := replication.Copy(bg, opts)
		require.NoError(t, err)
		require.NoError(t, snap.Release(bg))
		assert.Equal(t, 4, res.Tables[0].Ranges)
		t.Logf("copy %d: %d bytes in %s, at most %d streams", i, res.Bytes, res.Elapsed.Round(time.Millisecond), res.Streams)
		if opts.Adaptive && res.Elapsed > 2500*time.Millisecond {
			assert.GreaterOrEqual(t, res.Streams, 2, "an adaptive copy of %s tried a second stream", res.Elapsed)
		}
		assert.Equal(t, want, e.digest(e.connect(e.tgtDSN), "load", "id"), "copy %d equals its snapshot", i)
		require.NoError(t, replication.DropSlot(bg, e.src, "shardmover_copy"))
	}
	stopLoad()
	wg.Wait()
}
