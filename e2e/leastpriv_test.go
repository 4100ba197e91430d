package e2e

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
	"github.com/shardmover/shardmover/scheduler"
)

// moverRoleName is the role TestLeastPrivilegeMoveAndRebalance runs as.
const moverRoleName = "shardmover_mover"

// TestLeastPrivilegeMoveAndRebalance runs a move and a rebalance under the
// ledger workload with shardmover connected as the role of
// docs/privileges.md (sandbox.CreateMoverRole: no superuser, exactly the
// documented grants, password authentication), and requires the same
// outcome as a superuser's run: ledger intact, moves done, placements
// flipped, no replication artifact left. It also requires that no session of
// the mover was a superuser's and that nothing the mover did was refused for
// lack of privilege, not even a check it can do without (those log a
// warning with SQLSTATE 42501): a change that makes the mover need a
// privilege the document does not grant fails here.
func TestLeastPrivilegeMoveAndRebalance(t *testing.T) {
	runLeastPrivilege(t, false)
}

// TestLeastPrivilegeCitus is TestLeastPrivilegeMoveAndRebalance on a Citus
// cluster (without the drain, which Citus does with its own functions), with
// a reference table the new node lacks, so that the move's setup copies it
// as the role. Loopback stays trusted there: Citus's nodes connect to each
// other without passwords.
func TestLeastPrivilegeCitus(t *testing.T) {
	sandboxtest.RequireCitus(t)
	runLeastPrivilege(t, true)
}

func runLeastPrivilege(t *testing.T, citus bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// The administrator's view: superuser, sets up the cluster and the data.
	var sb *sandbox.Cluster
	var adm *metadata.Catalog
	if citus {
		sb, adm = sandboxtest.NewCitus(t, 2)
	} else {
		sb, adm = sandboxtest.NewCompat(t, 2)
	}
	require.NoError(t, workload.Setup(ctx, adm, 8))
	r, err := workload.NewRouter(ctx, adm, 8)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	loadOpts := workload.LoadOptions{Seed: 5, Users: 1500, Events: 12000}
	_, err = workload.Load(ctx, r, loadOpts)
	require.NoError(t, err)
	if citus {
		for _, stmt := range []string{
			`CREATE TABLE countries (code text PRIMARY KEY, name text NOT NULL)`,
			`SELECT create_reference_table('countries')`,
			`INSERT INTO countries VALUES ('de', 'Germany'), ('fr', 'France')`,
		} {
			_, err := adm.Pool().Exec(ctx, stmt)
			require.NoError(t, err, stmt)
		}
	}
	n, err := sb.AddNode(ctx)
	require.NoError(t, err)
	var target metadata.Node
	if citus {
		require.NoError(t, r.Refresh(ctx))
		target, err = adm.NodeByAddr(ctx, n.Addr())
	} else {
		target, err = adm.AddNode(ctx, n.Host, n.Port, metadata.DefaultAddNodeOptions())
	}
	require.NoError(t, err)

	role, err := sb.CreateMoverRole(ctx, moverRoleName, "pw-'"+fmt.Sprint(time.Now().UnixNano()))
	require.NoError(t, err)
	if !citus {
		// The role's password is required (scram): a wrong one is refused.
		wrong := sandbox.MoverRole{User: role.User, Password: "wrong"}
		_, err = pgx.Connect(ctx, wrong.DSN(sb.Coordinator()))
		require.Error(t, err, "the sandbox must require the mover role's password")
	}

	// The mover's view: the role's credentials only.
	cat, err := metadata.Open(ctx, metadata.Config{Coordinator: role.DSN(sb.Coordinator())})
	require.NoError(t, err)
	t.Cleanup(cat.Close)
	var user string
	var super bool
	require.NoError(t, cat.Pool().QueryRow(ctx,
		"SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&user, &super))
	require.Equal(t, moverRoleName, user)
	require.False(t, super, "the mover's role must not be a superuser")

	core, logs := observer.New(zapcore.WarnLevel)
	log := zaptest.NewLogger(t).WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return zapcore.NewTee(c, core) }))
	cfg := mover.DefaultConfig()
	cfg.Logger = log

	seen := watchSessions(ctx, t, sb)

	opts := workload.DefaultRunOptions()
	opts.Clients, opts.Users, opts.Duration = 6, loadOpts.Users, time.Hour
	opts.Pause = workload.TestPause
	bg := workload.Start(ctx, r, opts)
	time.Sleep(300 * time.Millisecond)

	// One move, as `shardmover move` does it, killed with its fence
	// prepared: a new mover, as the role, settles what the first one
	// prepared (only the role that prepared a transaction, or a superuser,
	// may finish it) and completes the move.
	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{})
	require.NoError(t, err)
	first, second := cl.Groups[0], cl.Groups[1]
	schedule := func(eng *mover.Engine, g metadata.ShardGroup) int64 {
		specs, err := eng.Resolve(ctx, []mover.Request{{ShardID: g.ShardIDs[0], Target: target}})
		require.NoError(t, err)
		require.NoError(t, eng.Preflight(ctx, specs[0]))
		_, moves, err := eng.Schedule(ctx, "move", specs)
		require.NoError(t, err)
		return moves[0].ID
	}
	killed := cfg
	killed.CutoverStep = func(_ int64, step string) error {
		if step == "prepared" {
			return errors.New("kill")
		}
		return nil
	}
	id := schedule(mover.New(killed, cat), first)
	require.ErrorIs(t, mover.New(killed, cat).Run(ctx, id), mover.ErrKilled)
	eng := mover.New(cfg, cat)
	require.NoError(t, eng.Recover(ctx))
	require.NoError(t, eng.Run(ctx, id))
	m, err := cat.Move(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "done", string(m.Phase), "the move as the mover role: %s", m.Error)

	// A move cancelled after its copy: rolled back as the role, the group
	// stays on its source.
	cancelled := cfg
	cancelled.AfterPhase = func(id int64, p mover.Phase) error {
		if p == mover.Indexing {
			_, err := cat.RequestCancel(ctx, id)
			return err
		}
		return nil
	}
	id = schedule(eng, second)
	require.Error(t, mover.New(cancelled, cat).Run(ctx, id))
	m, err = cat.Move(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "cancelled", string(m.Phase), "the cancelled move: %s", m.Error)

	// A rebalance, as `shardmover rebalance` does it.
	runner := scheduler.NewRunner(cat, cfg, nil)
	out, err := runner.Run(ctx, scheduler.JobRequest{Kind: "rebalance",
		Plan:   scheduler.PlanOptions{Strategy: "by_shard_count", MaxPerNode: 1, MaxMoves: 100},
		Limits: mover.Limits{Concurrency: 2, PerNode: 1}})
	require.NoError(t, err)
	require.NotNil(t, out.Job, "the rebalance must plan moves onto the new node: %+v", out.Plan)
	assert.Positive(t, out.Result.Done)
	assert.Zero(t, out.Result.Failed+out.Result.Cancelled+out.Result.Unfinished, "rebalance result %+v", out.Result)
	t.Logf("rebalance: %d moves done", out.Result.Done)

	// A drain of the first worker, as `shardmover drain` does it (it also
	// sets the node's shouldhaveshards; on Citus that is Citus's function).
	drained := sb.Workers()[0]
	if !citus {
		out, err = runner.Drain(ctx, drained.Addr(), scheduler.PlanOptions{Strategy: "by_shard_count", MaxPerNode: 1, MaxMoves: 100},
			mover.Limits{Concurrency: 2, PerNode: 1})
		require.NoError(t, err)
		require.NotNil(t, out.Job, "the drain must plan moves off %s: %+v", drained.Addr(), out.Plan)
		assert.Positive(t, out.Result.Done)
		assert.Zero(t, out.Result.Failed+out.Result.Cancelled+out.Result.Unfinished, "drain result %+v", out.Result)
		t.Logf("drain: %d moves done", out.Result.Done)
	}

	time.Sleep(300 * time.Millisecond)
	run, err := bg.Stop()
	require.NoError(t, err)
	_, err = eng.Sweep(ctx, mover.SweepOptions{KeepOldFor: 0})
	require.NoError(t, err)
	sessions := seen()

	// The ledger: nothing lost or twice, read through the placements.
	v, err := workload.Check(ctx, r, run.Ledger)
	require.NoError(t, err)
	assert.True(t, v.OK(), "ledger violations: %v", v.Violations)
	assert.Positive(t, v.Acknowledged)
	for code := range run.Errors {
		assert.Equal(t, "context", code, "unexpected workload errors: %v; first ones: %v", run.Errors, run.Details)
	}

	// Every move done and its group on its target.
	all, err := cat.Moves(ctx, metadata.MoveFilter{})
	require.NoError(t, err)
	require.Greater(t, len(all), 2)
	after, err := adm.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	groupOf := map[string]int32{}
	for _, g := range after.Groups {
		groupOf[g.Key()] = g.GroupID
	}
	perShard := map[int64]int{}
	for _, p := range after.Placements {
		perShard[p.ShardID]++
	}
	for _, s := range after.Shards {
		assert.Equal(t, 1, perShard[s.ID], "shard %d has exactly one placement", s.ID)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].ID < all[j].ID })
	last := map[string]metadata.Move{}
	for i, mv := range all {
		want := "done"
		if i == 1 {
			want = "cancelled"
		}
		assert.Equal(t, want, string(mv.Phase), "move %d: %s", mv.ID, mv.Error)
		last[fmt.Sprintf("%d:%d", mv.ColocationID, mv.ShardIndex)] = mv
	}
	for key, mv := range last {
		if string(mv.Phase) == "cancelled" {
			assert.Equal(t, mv.SourceGroup, groupOf[key], "move %d (cancelled): group %s must stay on its source", mv.ID, key)
			continue
		}
		assert.Equal(t, mv.TargetGroup, groupOf[key], "move %d: group %s must be placed on its target", mv.ID, key)
	}
	assert.Equal(t, target.GroupID, groupOf[first.Key()])
	if !citus {
		drainedNode, err := adm.NodeByAddr(ctx, drained.Addr())
		require.NoError(t, err)
		assert.False(t, drainedNode.ShouldHaveShards, "the drained node must not take shards")
		for key, g := range groupOf {
			assert.NotEqual(t, drainedNode.GroupID, g, "group %s is still on the drained node", key)
		}
	} else {
		// Every metadata node routes as the coordinator does, and Citus's
		// cleanup, run by the role, drops the old shards.
		coord, err := cat.ConnectNode(ctx, sb.Coordinator().Host, sb.Coordinator().Port)
		require.NoError(t, err)
		want, err := metadata.NodePlacements(ctx, coord)
		coord.Close(ctx)
		require.NoError(t, err)
		for _, w := range sb.Workers() {
			conn, err := cat.ConnectNode(ctx, w.Host, w.Port)
			require.NoError(t, err)
			got, err := metadata.NodePlacements(ctx, conn)
			conn.Close(ctx)
			require.NoError(t, err)
			assert.Equal(t, want, got, "pg_dist_placement on %s must equal the coordinator's", w.Addr())
		}
		var refs int
		require.NoError(t, adm.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_dist_placement p JOIN pg_dist_shard s USING (shardid)
			WHERE s.logicalrelid = 'countries'::regclass AND p.groupid = $1`, target.GroupID).Scan(&refs))
		assert.Equal(t, 1, refs, "the move's setup must have copied the reference table to the new node as the role")
		var pending []string
		for try := 0; try < 10; try++ {
			require.NoError(t, cat.CleanupCitusOrphans(ctx))
			pending, err = cat.CitusCleanupPending(ctx)
			require.NoError(t, err)
			if len(pending) == 0 {
				break
			}
			time.Sleep(time.Second)
		}
		assert.Empty(t, pending, "Citus's cleanup must have dropped every old shard")
	}

	// Nothing left behind, read as the superuser (who sees everything).
	for _, node := range sb.Nodes {
		conn, err := pgx.Connect(ctx, node.DSN())
		require.NoError(t, err)
		assert.Zero(t, leftovers(t, ctx, conn), "leftovers on %s", node.Addr())
		conn.Close(ctx)
	}

	// The mover's sessions: the role's, never a superuser's, on every node
	// that took part, walsenders included.
	for _, node := range sb.Nodes {
		t.Logf("sessions of %s on %s: %v", moverRoleName, node.Name, sessions[node.Name])
	}
	for _, s := range sessions {
		for _, sess := range s {
			assert.False(t, sess.super, "a session of the mover ran as a superuser: %+v", sess)
		}
	}
	assert.NotEmpty(t, sessions[sb.Coordinator().Name], "the mover must have worked on the coordinator as its role")
	assert.True(t, hasBackend(sessions[n.Name], "client backend"), "the mover must have written to the target as its role")
	walsender := false
	for _, w := range sb.Workers() {
		walsender = walsender || hasBackend(sessions[w.Name], "walsender")
	}
	assert.True(t, walsender, "the mover must have streamed from a source as its role")

	// Nothing was refused for lack of privilege but what docs/privileges.md
	// says degrades without it.
	degraded := map[string]int{}
	for _, e := range logs.All() {
		msg := e.Message
		denied := strings.Contains(msg, "superuser")
		for _, f := range e.Context {
			if err, ok := f.Interface.(error); ok && f.Type == zapcore.ErrorType {
				msg += ": " + err.Error()
				var pgErr *pgconn.PgError
				denied = denied || (errors.As(err, &pgErr) && pgErr.Code == "42501") ||
					strings.Contains(err.Error(), "42501") || strings.Contains(err.Error(), "permission denied")
			}
		}
		if denied && !documentedDegradation(e.Message) {
			t.Errorf("the mover lacked a privilege docs/privileges.md grants, or needs a new one: %s", msg)
		} else if denied {
			if degraded[e.Message]++; degraded[e.Message] == 1 {
				t.Logf("documented degradation: %s", msg)
			}
		}
	}
}

// documentedDegradation reports whether a log message is one of those
// docs/privileges.md lists for what works less well without superuser
// rights the role is not given.
func documentedDegradation(msg string) bool {
	for _, m := range []string{
		"cannot measure free disk space on the target; moving without that check",
		"WAL guard: cannot measure free disk space on the source; limiting retained WAL by --max-retained-wal only",
	} {
		if msg == m {
			return true
		}
	}
	return false
}

type moverSession struct {
	backend string
	super   bool
}

func hasBackend(ss []moverSession, backend string) bool {
	for _, s := range ss {
		if s.backend == backend {
			return true
		}
	}
	return false
}

// watchSessions samples pg_stat_activity on every node (as the superuser)
// until ctx ends or the returned function is called, and returns the kinds
// of session the mover's role had on each node.
func watchSessions(ctx context.Context, t *testing.T, sb *sandbox.Cluster) func() map[string][]moverSession {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	seen := map[string]map[moverSession]bool{}
	var wg sync.WaitGroup
	for _, node := range sb.Nodes {
		wg.Add(1)
		go func(node sandbox.Node) {
			defer wg.Done()
			conn, err := pgx.Connect(ctx, node.DSN())
			if err != nil {
				t.Errorf("watch sessions on %s: %v", node.Name, err)
				return
			}
			defer conn.Close(context.Background())
			for ctx.Err() == nil {
				rows, err := conn.Query(ctx, `SELECT a.backend_type, r.rolsuper FROM pg_stat_activity a
					JOIN pg_roles r ON r.oid = a.usesysid WHERE r.rolname = $1`, moverRoleName)
				if err == nil {
					for rows.Next() {
						var s moverSession
						if rows.Scan(&s.backend, &s.super) == nil {
							mu.Lock()
							if seen[node.Name] == nil {
								seen[node.Name] = map[moverSession]bool{}
							}
							seen[node.Name][s] = true
							mu.Unlock()
						}
					}
					rows.Close()
				}
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
		}(node)
	}
	return func() map[string][]moverSession {
		cancel()
		wg.Wait()
		out := map[string][]moverSession{}
		for name, ss := range seen {
			for s := range ss {
				out[name] = append(out[name], s)
			}
			sort.Slice(out[name], func(i, j int) bool { return out[name][i].backend < out[name][j].backend })
		}
		return out
	}
}
