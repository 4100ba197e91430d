package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	"github.com/shardmover/shardmover/scheduler"
)

// loadedCluster starts workers, registers the first holders of them, loads
// the github data into shards shards on those, then registers the rest.
func loadedCluster(t *testing.T, workers, holders, shards int) (*sandbox.Cluster, string, *metadata.Catalog) {
	t.Helper()
	c := sandboxtest.New(t, workers)
	coord := c.Coordinator().DSN()
	for _, w := range c.Workers()[:holders] {
		_, msg, code := run(t, "node", "add", w.Addr(), "--coordinator", coord)
		require.Equal(t, 0, code, msg)
	}
	_, msg, code := run(t, "sandbox", "load", "--coordinator", coord, "--users", "200", "--events", "3000", "--shards", strconv.Itoa(shards))
	require.Equal(t, 0, code, msg)
	for _, w := range c.Workers()[holders:] {
		_, msg, code := run(t, "node", "add", w.Addr(), "--coordinator", coord)
		require.Equal(t, 0, code, msg)
	}
	cat, err := metadata.Open(context.Background(), metadata.Config{Coordinator: coord})
	require.NoError(t, err)
	t.Cleanup(cat.Close)
	return c, coord, cat
}

// groupsOn maps each node address to the shard groups it holds, each
// named by its first shard id, in id order.
func groupsOn(t *testing.T, coord string) (map[string][]int64, metadata.Status) {
	t.Helper()
	out, msg, code := run(t, "status", "-o", "json", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	var st metadata.Status
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	addr := map[int32]string{}
	for _, n := range st.Nodes {
		addr[n.ID] = n.Addr
	}
	on := map[string][]int64{}
	for _, g := range st.ShardGroups {
		on[addr[g.NodeID]] = append(on[addr[g.NodeID]], g.ShardIDs[0])
	}
	return on, st
}

type shownJob struct {
	Job   metadata.Job `json:"job"`
	Moves []struct {
		metadata.Move
		History []metadata.MoveLog `json:"history"`
	} `json:"moves"`
}

func showJob(t *testing.T, coord string, id int64) shownJob {
	t.Helper()
	out, msg, code := run(t, "jobs", "show", strconv.FormatInt(id, 10), "-o", "json", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	var j shownJob
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	return j
}

func listJobs(t *testing.T, coord string) map[int64]metadata.Job {
	t.Helper()
	out, msg, code := run(t, "jobs", "list", "-o", "json", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	var jobs []metadata.Job
	require.NoError(t, json.Unmarshal([]byte(out), &jobs))
	byID := map[int64]metadata.Job{}
	for _, j := range jobs {
		byID[j.ID] = j
	}
	return byID
}

func newestJob(t *testing.T, coord string) int64 {
	t.Helper()
	var newest int64
	for id := range listJobs(t, coord) {
		newest = max(newest, id)
	}
	return newest
}

// schedule records a job of moves without running it, as a crashed or
// interrupted command leaves one.
func schedule(t *testing.T, cat *metadata.Catalog, moves map[int64]string) int64 {
	t.Helper()
	ctx := context.Background()
	var reqs []mover.Request
	for shard, to := range moves {
		n, err := cat.NodeByAddr(ctx, to)
		require.NoError(t, err)
		reqs = append(reqs, mover.Request{ShardID: shard, Target: n})
	}
	eng := mover.New(mover.DefaultConfig(), cat)
	specs, err := eng.Resolve(ctx, reqs)
	require.NoError(t, err)
	job, _, err := eng.Schedule(ctx, "rebalance", specs)
	require.NoError(t, err)
	return job.ID
}

// span is when a move ran, from its journal: its first phase change to
// its last.
func span(t *testing.T, h []metadata.MoveLog) (time.Time, time.Time) {
	t.Helper()
	require.NotEmpty(t, h)
	require.Equal(t, "done", h[len(h)-1].To, "the move ended done: %v", h)
	return h[0].At, h[len(h)-1].At
}

// copySpan is when a move held its copy stream, from its journal: from
// entering copying (its slot was made just before) to entering
// catching_up.
func copySpan(t *testing.T, h []metadata.MoveLog) (time.Time, time.Time) {
	t.Helper()
	var from, to time.Time
	for _, l := range h {
		switch l.To {
		case "copying":
			from = l.At
		case "catching_up":
			if to.IsZero() {
				to = l.At
			}
		}
	}
	require.False(t, from.IsZero() || to.IsZero(), "the move copied and caught up: %v", h)
	return from, to
}

// assertOverlap checks a job of two done moves: whether they ran at the
// same time as a whole (one started before the other ended), and whether
// they copied at the same time.
func assertOverlap(t *testing.T, coord string, job int64, whole, copies bool) {
	t.Helper()
	j := showJob(t, coord, job)
	require.Len(t, j.Moves, 2)
	assert.Equal(t, "done", string(j.Job.State))
	aStart, aEnd := span(t, j.Moves[0].History)
	bStart, bEnd := span(t, j.Moves[1].History)
	assert.Equal(t, whole, aStart.Before(bEnd) && bStart.Before(aEnd),
		"job %d: moves ran at once (want %v): [%s, %s] and [%s, %s]", job, whole, aStart, aEnd, bStart, bEnd)
	aStart, aEnd = copySpan(t, j.Moves[0].History)
	bStart, bEnd = copySpan(t, j.Moves[1].History)
	assert.Equal(t, copies, aStart.Before(bEnd) && bStart.Before(aEnd),
		"job %d: moves copied at once (want %v): [%s, %s] and [%s, %s]", job, copies, aStart, aEnd, bStart, bEnd)
}

// TestMoveAndResumeHonourLimits: `move` and `jobs resume` run a job's
// moves within --concurrency, --per-node and --overlap, as rebalance does.
// By default the limits count whole moves: two moves that may not run at
// once run one after the other. With --overlap they count copy streams:
// two moves that may not copy at once copy one after the other, and still
// overlap as a whole (the second prepares while the first copies). Two
// moves that may run (or copy) at once overlap in the journal's copying
// phases.
func TestMoveAndResumeHonourLimits(t *testing.T) {
	c, coord, cat := loadedCluster(t, 4, 2, 4)
	w := c.Workers()
	on, _ := groupsOn(t, coord)
	a, b := on[w[0].Addr()], on[w[1].Addr()]
	require.Len(t, a, 2)
	require.Len(t, b, 2)
	id := func(v int64) string { return strconv.FormatInt(v, 10) }

	// Two groups to one target: --per-node 1 keeps them apart though
	// --concurrency allows two; with --overlap only their copies.
	out, msg, code := run(t, "move", "--shard", id(a[0]), "--shard", id(b[0]), "--to", w[2].Addr(), "--concurrency", "2", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.Equal(t, 2, strings.Count(out, "moved shard group"), out)
	assertOverlap(t, coord, newestJob(t, coord), false, false)
	// Back where they were (their old copies go first), then again with
	// --overlap.
	_, msg, code = run(t, "cleanup", "--keep-old-for", "0s", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	back := schedule(t, cat, map[int64]string{a[0]: w[0].Addr(), b[0]: w[1].Addr()})
	_, msg, code = run(t, "jobs", "resume", id(back), "--concurrency", "2", "--per-node", "2", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	_, msg, code = run(t, "cleanup", "--keep-old-for", "0s", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	out, msg, code = run(t, "move", "--shard", id(a[0]), "--shard", id(b[0]), "--to", w[2].Addr(), "--concurrency", "2", "--overlap", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.Equal(t, 2, strings.Count(out, "moved shard group"), out)
	assertOverlap(t, coord, newestJob(t, coord), true, false)

	// With --per-node 2 they run at once.
	// A shared bandwidth limit keeps each copy long enough to overlap the
	// other's whatever the machine's speed.
	out, msg, code = run(t, "move", "--shard", id(a[1]), "--shard", id(b[1]), "--to", w[3].Addr(), "--concurrency", "2", "--per-node", "2", "--throttle", "256KB/s", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.Equal(t, 2, strings.Count(out, "moved shard group"), out)
	assertOverlap(t, coord, newestJob(t, coord), true, true)

	// Jobs of two moves on disjoint node pairs: one at a time by default,
	// at once with --concurrency 2. The groups go back where they were:
	// their old copies go first.
	_, msg, code = run(t, "cleanup", "--keep-old-for", "0s", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	serial := schedule(t, cat, map[int64]string{a[0]: w[0].Addr(), a[1]: w[1].Addr()})
	out, msg, code = run(t, "jobs", "resume", id(serial), "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.Equal(t, 2, strings.Count(out, ": done\n"), out)
	assertOverlap(t, coord, serial, false, false)

	parallel := schedule(t, cat, map[int64]string{b[0]: w[1].Addr(), b[1]: w[0].Addr()})
	out, msg, code = run(t, "jobs", "resume", id(parallel), "--concurrency", "2", "--throttle", "256KB/s", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.Equal(t, 2, strings.Count(out, ": done\n"), out)
	assertOverlap(t, coord, parallel, true, true)

	for _, args := range [][]string{
		{"move", "--shard", id(a[0]), "--to", w[2].Addr(), "--concurrency", "0"},
		{"move", "--shard", id(a[0]), "--to", w[2].Addr(), "--per-node", "0"},
		{"jobs", "resume", id(serial), "--concurrency", "0"},
		{"jobs", "resume", id(serial), "--per-node", "0"},
		{"move", "--shard", id(a[0]), "--to", w[2].Addr(), "--groups-per-stream", "0"},
		{"jobs", "resume", id(serial), "--groups-per-stream", "0"},
	} {
		_, msg, code := run(t, append(args, "--coordinator", coord)...)
		assert.Equal(t, 2, code, "%v: %s", args, msg)
		assert.Contains(t, msg, "must be at least 1", args)
	}

	// With --groups-per-stream 2, two groups from one node to another ride
	// one stream: the second is carried by the first, and jobs show says so.
	// (a[1] and b[0] are both on the second worker now; their old copies go
	// first.)
	_, msg, code = run(t, "cleanup", "--keep-old-for", "0s", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	out, msg, code = run(t, "move", "--shard", id(a[1]), "--shard", id(b[0]), "--to", w[2].Addr(), "--groups-per-stream", "2", "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.Equal(t, 2, strings.Count(out, "moved shard group"), out)
	streamed := newestJob(t, coord)
	j := showJob(t, coord, streamed)
	require.Len(t, j.Moves, 2)
	assert.Equal(t, "done", string(j.Job.State))
	assert.Zero(t, j.Moves[0].CarriedBy)
	assert.Equal(t, j.Moves[0].ID, j.Moves[1].CarriedBy, "the second move rode the first's stream")
	out, msg, code = run(t, "jobs", "show", id(streamed), "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	assert.Contains(t, out, "STREAM", out)
}

// TestJobStatesAgree: one rule names a job's state (mover.JobState), and
// the CLI's `jobs list`, `jobs show` and the daemon's /status all show it,
// whichever command ended the job.
func TestJobStatesAgree(t *testing.T) {
	c, coord, cat := loadedCluster(t, 3, 2, 6)
	ctx := context.Background()
	w := c.Workers()
	on, st := groupsOn(t, coord)
	g := append(append([]int64{}, on[w[0].Addr()]...), on[w[1].Addr()]...)
	require.Len(t, g, 6)
	id := func(v int64) string { return strconv.FormatInt(v, 10) }
	target := w[2].Addr()

	type result struct {
		job  int64
		want string
	}
	cases := []struct {
		name string
		want string
		run  func(t *testing.T) int64
	}{
		{"done: move", "done", func(t *testing.T) int64 {
			_, msg, code := run(t, "move", "--shard", id(g[0]), "--to", target, "--coordinator", coord)
			require.Equal(t, 0, code, msg)
			return newestJob(t, coord)
		}},
		{"failed: resume, preflight finds the table on the target", "failed", func(t *testing.T) int64 {
			job := schedule(t, cat, map[int64]string{g[1]: target})
			moves, err := cat.Moves(ctx, metadata.MoveFilter{JobID: job})
			require.NoError(t, err)
			conn, err := pgx.Connect(ctx, w[2].DSN())
			require.NoError(t, err)
			defer conn.Close(ctx)
			name, err := metadata.ParseQualifiedName(moves[0].ShardTables[0])
			require.NoError(t, err)
			_, err = conn.Exec(ctx, "CREATE TABLE "+name.Sanitize()+" (x int)")
			require.NoError(t, err)
			out, msg, code := run(t, "jobs", "resume", id(job), "--coordinator", coord)
			assert.NotEqual(t, 0, code, out)
			assert.Contains(t, msg, "already exists on the target")
			assert.Contains(t, out, fmt.Sprintf("move %d: failed", moves[0].ID))
			return job
		}},
		{"cancelled: jobs cancel", "cancelled", func(t *testing.T) int64 {
			job := schedule(t, cat, map[int64]string{g[2]: target})
			out, msg, code := run(t, "jobs", "cancel", id(job), "--coordinator", coord)
			require.Equal(t, 0, code, msg)
			assert.Contains(t, out, ": cancelled")
			return job
		}},
		{"done and cancelled: jobs cancel after one move is done", "cancelled", func(t *testing.T) int64 {
			job := schedule(t, cat, map[int64]string{g[3]: target, g[4]: target})
			moves, err := cat.Moves(ctx, metadata.MoveFilter{JobID: job})
			require.NoError(t, err)
			require.NoError(t, mover.New(mover.DefaultConfig(), cat).Run(ctx, moves[0].ID))
			out, msg, code := run(t, "jobs", "cancel", id(job), "--coordinator", coord)
			require.Equal(t, 0, code, msg)
			assert.Equal(t, fmt.Sprintf("move %d: cancelled\n", moves[1].ID), out)
			return job
		}},
		{"cancelled: a move cancelled from elsewhere", "cancelled", func(t *testing.T) int64 {
			// Throttled to take seconds in its copy, so that the cancel
			// lands before the decision.
			var bytes int64
			for _, sg := range st.ShardGroups {
				if sg.ShardIDs[0] == g[5] {
					bytes = sg.Bytes
				}
			}
			rate := max(bytes/4, 4096)
			type ended struct {
				msg  string
				code int
			}
			done := make(chan ended, 1)
			go func() {
				_, msg, code := run(t, "move", "--shard", id(g[5]), "--to", target, "--throttle", strconv.FormatInt(rate, 10), "--coordinator", coord)
				done <- ended{msg, code}
			}()
			var m metadata.Move
			deadline := time.Now().Add(time.Minute)
			for m.Phase != "copying" {
				require.True(t, time.Now().Before(deadline), "the move reaches copying")
				time.Sleep(20 * time.Millisecond)
				active, err := cat.Moves(ctx, metadata.MoveFilter{ActiveOnly: true})
				require.NoError(t, err)
				if len(active) == 1 {
					m = active[0]
				}
			}
			out, msg, code := run(t, "jobs", "cancel", id(m.JobID), "--coordinator", coord)
			require.Equal(t, 0, code, msg)
			assert.Contains(t, out, fmt.Sprintf("move %d: ", m.ID))
			e := <-done
			assert.Equal(t, 1, e.code, e.msg)
			assert.Contains(t, e.msg, "the source still serves the group")
			return m.JobID
		}},
	}
	var results []result
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			results = append(results, result{tc.run(t), tc.want})
		})
	}
	require.Len(t, results, len(cases))

	// The rule, the CLI's list and show.
	listed := listJobs(t, coord)
	for _, r := range results {
		j := showJob(t, coord, r.job)
		var res mover.JobResult
		for _, m := range j.Moves {
			switch m.Phase {
			case "done":
				res.Done++
			case "failed":
				res.Failed++
			case "cancelled":
				res.Cancelled++
			default:
				res.Unfinished++
			}
		}
		assert.Equal(t, r.want, mover.JobState(res), "job %d: the rule, from its moves %+v", r.job, res)
		assert.Equal(t, r.want, string(j.Job.State), "job %d: jobs show", r.job)
		assert.Equal(t, r.want, string(listed[r.job].State), "job %d: jobs list", r.job)
	}

	// The daemon's /status. A high threshold and a long settle keep it from
	// planning anything of its own.
	cfg := scheduler.DefaultDaemonConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Settle = time.Hour
	threshold := 0.99
	cfg.Plan.Threshold = &threshold
	cfg.Mover = mover.DefaultConfig()
	d, err := scheduler.NewDaemon(cfg, cat)
	require.NoError(t, err)
	dctx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- d.Start(dctx) }()
	defer func() { stop(); require.NoError(t, <-stopped) }()
	var status struct {
		Jobs []metadata.Job `json:"jobs"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + d.Addr() + "/status")
		if err == nil && resp.StatusCode == http.StatusOK {
			err = json.NewDecoder(resp.Body).Decode(&status)
			resp.Body.Close()
			require.NoError(t, err)
			break
		}
		if resp != nil {
			resp.Body.Close()
		}
		require.True(t, time.Now().Before(deadline), "/status answers: %v", err)
		time.Sleep(100 * time.Millisecond)
	}
	served := map[int64]string{}
	for _, j := range status.Jobs {
		served[j.ID] = string(j.State)
	}
	for _, r := range results {
		assert.Equal(t, r.want, served[r.job], "job %d: the daemon's /status", r.job)
	}
}
