package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
)

// benchMemMBEnv sizes BenchmarkMoveMemory's shard group, in MiB on disk.
const benchMemMBEnv = "SHARDMOVER_BENCH_MEM_MB"

// BenchmarkMoveMemory measures the mover's own memory while it moves one
// large shard group: a compat sandbox with one worker holding the github
// tables in 4 shard groups, one group loaded to SHARDMOVER_BENCH_MEM_MB MiB
// on disk (1024 by default; pg_total_relation_size of its shard tables,
// indexes included) straight into its shard tables with INSERT ... SELECT
// generate_series (rows of about 1 kB, every one in its shard's hash range),
// then a second worker added and the group moved to it by `shardmover move`
// run as a child process, while 2 routed ledger clients write lightly
// (a 5 ms pause between statements) to every group, the moving one included.
//
//	SHARDMOVER_BENCH_MEM_MB=1024 go test ./e2e -run '^$' -bench BenchmarkMoveMemory -benchtime=1x -timeout 30m
//
// Metrics: peak_rss_MB (the child's ru_maxrss, in MiB: the move command's
// own peak resident memory from start to exit; the target is under 150),
// group_MB (the group's size on disk before the move, as loaded), moved_MB
// (the move's bytes_total in the journal: the group's size as the mover
// measured it, which `shardmover move` prints), copied_MB (the bytes its
// copy streamed, bytes_copied) and wall_s (the child's run, from exec to
// exit). Every MB is a MiB. After each move the group is on the target with every
// loaded row (row counts equal the source's before the move) and the
// workload's ledger checks out; neither check is timed.
func BenchmarkMoveMemory(b *testing.B) {
	groupMB := int64(1024)
	if v := benchEnv(benchMemMBEnv); v > 0 {
		groupMB = v
	}
	bin := buildBinary(b)
	for i := 0; i < b.N; i++ {
		moveMemoryOnce(b, bin, groupMB)
	}
}

// bulkRowsSQL inserts the github_events rows of generate_series($1, $2)
// whose user_id hashes into [$3, $4]: user_id is g % 100000 + 1, event_id g
// (below workload.WorkloadEventBase, so the ledger never reads them), and a
// payload of 640 bytes of hex that does not reach TOAST's threshold.
const bulkRowsSQL = `INSERT INTO %s (event_id, event_type, event_public, repo_id, payload, repo, user_id, org, created_at)
SELECT g, (ARRAY['PushEvent','IssuesEvent','WatchEvent','CreateEvent'])[1 + g %% 4], g %% 7 <> 0, g %% 100000,
	jsonb_build_object('rev', 0, 'size', g %% 20, 'body', repeat(md5(g::text), 20)),
	jsonb_build_object('id', g %% 100000, 'name', 'repo-' || g %% 100000),
	u, NULL, timestamp '2026-01-01' + g * interval '1 second'
FROM (SELECT g, g %% 100000 + 1 AS u FROM generate_series($1::bigint, $2::bigint) g) s
WHERE hashint8(u) BETWEEN $3 AND $4`

const bulkUsersSQL = `INSERT INTO %s (user_id, login, display_login, url, avatar_url, gravatar_id, created_at)
SELECT u, 'user' || u, 'user' || u, 'https://api.github.com/users/user' || u, 'https://avatars.githubusercontent.com/u/' || u, '',
	timestamp '2020-01-01' + u * interval '1 minute'
FROM generate_series(1, 100000) u
WHERE hashint8(u) BETWEEN $1 AND $2`

func moveMemoryOnce(b *testing.B, bin string, groupMB int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	sb, cat := sandboxtest.NewCompat(b, 1)
	require.NoError(b, workload.Setup(ctx, cat, 4))
	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(b, err)
	require.NotEmpty(b, cl.Groups)
	group := cl.Groups[0]
	shards := map[string]metadata.Shard{}
	for _, id := range group.ShardIDs {
		for _, s := range cl.Shards {
			if s.ID == id {
				shards[s.Table] = s
			}
		}
	}
	events, users := shards[workload.EventsTable], shards[workload.UsersTable]
	require.NotZero(b, events.ID, "group %s has a github_events shard", group.Key())
	source, ok := cl.NodeByGroup(group.GroupID)
	require.True(b, ok)
	src, err := cat.ConnectNode(ctx, source.Host, source.Port)
	require.NoError(b, err)
	defer src.Close(context.Background())

	// Load the group to groupMB on disk: a small batch first, then batches
	// sized from the bytes the ones before took per generated number.
	_, err = src.Exec(ctx, fmt.Sprintf(bulkUsersSQL, users.Ident().Sanitize()), users.Min, users.Max)
	require.NoError(b, err)
	sizeOf := func() int64 {
		var n int64
		require.NoError(b, src.QueryRow(ctx, "SELECT pg_total_relation_size($1::regclass) + pg_total_relation_size($2::regclass)",
			events.Ident().Sanitize(), users.Ident().Sanitize()).Scan(&n))
		return n
	}
	want := groupMB << 20
	loadStart := time.Now()
	next, size := int64(1), sizeOf()
	for size < want {
		n := int64(1 << 16)
		if next > 1 {
			perNumber := float64(size) / float64(next-1)
			n = min(max(int64(float64(want-size)/perNumber)+1, 10000), 4<<20)
		}
		_, err := src.Exec(ctx, fmt.Sprintf(bulkRowsSQL, events.Ident().Sanitize()), next, next+n-1, events.Min, events.Max)
		require.NoError(b, err)
		next += n
		size = sizeOf()
	}
	_, err = src.Exec(ctx, "CHECKPOINT")
	require.NoError(b, err)
	before := groupCounts(b, ctx, src, events, users)
	b.Logf("loaded shard group %s: %d MiB on disk, %d events and %d users in %s",
		group.Key(), size>>20, before[0], before[1], time.Since(loadStart).Round(time.Second))

	n, err := sb.AddNode(ctx)
	require.NoError(b, err)
	target, err := cat.AddNode(ctx, n.Host, n.Port, metadata.DefaultAddNodeOptions())
	require.NoError(b, err)

	r, err := workload.NewRouter(ctx, cat, 4)
	require.NoError(b, err)
	defer r.Close()
	opts := workload.DefaultRunOptions()
	opts.Clients, opts.Users, opts.Pause, opts.Duration = 2, 1000, 5*time.Millisecond, time.Hour
	opts.RunID, err = workload.NextRunID(ctx, r)
	require.NoError(b, err)
	bg := workload.Start(ctx, r, opts)
	time.Sleep(500 * time.Millisecond)

	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "move", "--shard", strconv.FormatInt(events.ID, 10), "--to", target.Addr(),
		"--coordinator", sb.Coordinator().DSN())
	cmd.Env = append(os.Environ(), "SHARDMOVER_COORDINATOR=")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	wall := time.Since(start)
	run, werr := bg.Stop()
	require.NoError(b, err, "shardmover move: %s%s", stdout.String(), stderr.String())
	require.NoError(b, werr)
	rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB on Linux

	moves, err := cat.Moves(ctx, metadata.MoveFilter{})
	require.NoError(b, err)
	require.Len(b, moves, 1)
	require.Equal(b, "done", string(moves[0].Phase), "move %d: %s", moves[0].ID, moves[0].Error)
	cl, err = cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(b, err)
	for _, g := range cl.Groups {
		if g.Key() == group.Key() {
			require.Equal(b, target.GroupID, g.GroupID, "group %s is on the target", g.Key())
		}
	}
	dst, err := cat.ConnectNode(ctx, target.Host, target.Port)
	require.NoError(b, err)
	defer dst.Close(context.Background())
	require.Equal(b, before, groupCounts(b, ctx, dst, events, users), "loaded events and users on the target")
	v, err := workload.Check(ctx, r, run.Ledger)
	require.NoError(b, err)
	require.True(b, v.OK(), "ledger: %v", v.Violations)
	b.Logf("shardmover move: %s; the workload acknowledged %d writes during it (%d retried after the cutover)",
		bytes.TrimSpace(stdout.Bytes()), run.Ops(), run.Retries)

	b.ReportMetric(float64(rss)/1024, "peak_rss_MB")
	b.ReportMetric(float64(size)/(1<<20), "group_MB")
	b.ReportMetric(float64(moves[0].BytesTotal)/(1<<20), "moved_MB")
	b.ReportMetric(float64(moves[0].BytesCopied)/(1<<20), "copied_MB")
	b.ReportMetric(wall.Seconds(), "wall_s")
}

// groupCounts counts the loaded events (not the workload's) and the users
// of the group's shards on the node conn reaches.
func groupCounts(b *testing.B, ctx context.Context, conn *pgx.Conn, events, users metadata.Shard) [2]int64 {
	b.Helper()
	var c [2]int64
	require.NoError(b, conn.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+events.Ident().Sanitize()+" WHERE event_id < $1), (SELECT count(*) FROM "+
		users.Ident().Sanitize()+")", workload.WorkloadEventBase).Scan(&c[0], &c[1]))
	return c
}
