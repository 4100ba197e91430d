package pgbench_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/pgbench"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
)

// TestCitusRun builds the layout on a Citus cluster, runs pgbench through
// the coordinator and the worker for a second and stops it with SIGALRM:
// both processes end as -T ends them, with a summary, and every
// transaction each counted is in its logs and in pgbench_history once.
func TestCitusRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, _ := sandboxtest.NewCitus(t, 1)
	bin := filepath.Join(sb.BinDir, "pgbench")
	_, err := os.Stat(bin)
	require.NoError(t, err, "pgbench ships with the PostgreSQL server packages")
	coord := sb.Coordinator()
	require.NoError(t, pgbench.InitCitus(ctx, bin, coord.DSN(), 1, 4))
	conn, err := pgx.Connect(ctx, coord.DSN())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var shards, colocations int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT colocationid) FROM pg_dist_shard JOIN pg_dist_partition USING (logicalrelid)
		WHERE partmethod = 'h'`).Scan(&shards, &colocations))
	assert.Equal(t, 8, shards, "accounts and history in 4 shards each")
	assert.Equal(t, 1, colocations)

	dir := t.TempDir()
	script, err := pgbench.WriteScript(dir)
	require.NoError(t, err)
	var procs []*pgbench.Proc
	for _, n := range sb.Nodes {
		p, err := pgbench.Start(ctx, pgbench.Options{Bin: bin, DSN: n.DSN(), Name: n.Name, Mode: "prepared", Clients: 2, Scale: 1, Script: script, LogDir: dir})
		require.NoError(t, err)
		t.Cleanup(p.Kill)
		procs = append(procs, p)
	}
	time.Sleep(time.Second)
	var processed int64
	for _, p := range procs {
		require.NoError(t, p.Stop(time.Minute))
		res := p.Wait()
		require.NoError(t, res.Err, res.Output)
		s := pgbench.ParseSummary(res.Output)
		assert.Empty(t, s.Problems)
		assert.Zero(t, s.Failed)
		assert.Positive(t, s.Processed, res.Output)
		txns, err := p.Transactions()
		require.NoError(t, err)
		assert.Len(t, txns, int(s.Processed))
		for _, x := range txns {
			assert.Equal(t, p.Name(), x.Node)
		}
		processed += s.Processed
	}
	b, err := pgbench.CheckBalances(ctx, conn)
	require.NoError(t, err)
	assert.Equal(t, pgbench.Balances{History: processed}, b)
}

func TestStartRefuses(t *testing.T) {
	good := pgbench.Options{Bin: "pgbench", DSN: "host=x", Name: "coordinator", Mode: "prepared", Clients: 2, Scale: 1, Script: "s.sql", LogDir: "/tmp"}
	for name, change := range map[string]func(o *pgbench.Options){
		"mode":    func(o *pgbench.Options) { o.Mode = "prepare" },
		"clients": func(o *pgbench.Options) { o.Clients = 0 },
		"scale":   func(o *pgbench.Options) { o.Scale = 0 },
		"name":    func(o *pgbench.Options) { o.Name = "" },
	} {
		o := good
		change(&o)
		_, err := pgbench.Start(context.Background(), o)
		assert.Error(t, err, name)
	}
}
