package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/planner"
	"github.com/shardmover/shardmover/scheduler"
)

type daemonProc struct {
	cmd  *exec.Cmd
	addr string
	log  string
}

func startDaemonProc(t *testing.T, bin, coord string, port int) *daemonProc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), fmt.Sprintf("daemon-%d.log", port))
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "daemon", "--coordinator", coord, "--listen", addr, "--settle", "1s", "--poll", "200ms",
		"--max-bandwidth", "1MB/s", "--concurrency", "1")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	p := &daemonProc{cmd: cmd, addr: addr, log: logPath}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_, _ = cmd.Process.Wait()
		logFile.Close()
	})
	return p
}

func (p *daemonProc) leader() bool {
	resp, err := http.Get("http://" + p.addr + "/status")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var st struct {
		Leader bool `json:"leader"`
	}
	return json.NewDecoder(resp.Body).Decode(&st) == nil && st.Leader
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTwoDaemonsLeaderKilled: two daemons, exactly one leads; a node is
// added; the leader is killed with SIGKILL mid-job; the standby takes over
// and the job completes with the workload's ledger intact.
func TestTwoDaemonsLeaderKilled(t *testing.T) {
	bin := buildBinary(t)
	ctx := context.Background()
	sb, cat := sandboxtest.NewCompat(t, 2)
	require.NoError(t, workload.Setup(ctx, cat, 16))
	r, err := workload.NewRouter(ctx, cat, 8)
	require.NoError(t, err)
	defer r.Close()
	_, err = workload.Load(ctx, r, workload.LoadOptions{Seed: 3, Users: 2000, Events: 12000})
	require.NoError(t, err)
	coord := sb.Coordinator().DSN()

	base := freeBase(t, 2)
	a := startDaemonProc(t, bin, coord, base)
	b := startDaemonProc(t, bin, coord, base+1)
	waitFor(t, "a leader", time.Minute, func() bool { return a.leader() || b.leader() })
	time.Sleep(time.Second)
	require.NotEqual(t, a.leader(), b.leader(), "exactly one daemon leads")
	leader, standby := a, b
	if b.leader() {
		leader, standby = b, a
	}

	opts := workload.DefaultRunOptions()
	opts.Clients, opts.Users, opts.Duration = 4, 2000, time.Hour
	bg := workload.Start(ctx, r, opts)

	n, err := sb.AddNode(ctx)
	require.NoError(t, err)
	_, err = cat.AddNode(ctx, n.Host, n.Port, metadata.DefaultAddNodeOptions())
	require.NoError(t, err)

	// Kill the leader once the job has finished a move and has more to do.
	waitFor(t, "the rebalance to be under way", 3*time.Minute, func() bool {
		moves, err := cat.Moves(ctx, metadata.MoveFilter{})
		if err != nil || len(moves) == 0 {
			return false
		}
		done, active := 0, 0
		for _, m := range moves {
			if m.Phase == "done" {
				done++
			} else if !m.Terminal() {
				active++
			}
		}
		return done >= 1 && active >= 1
	})
	require.NoError(t, leader.cmd.Process.Signal(syscall.SIGKILL))
	_, _ = leader.cmd.Process.Wait()
	waitFor(t, "the standby to lead", 30*time.Second, standby.leader)

	waitFor(t, "the job to complete", 5*time.Minute, func() bool {
		jobs, err := cat.Jobs(ctx, 5)
		if err != nil || len(jobs) == 0 {
			return false
		}
		moves, err := cat.Moves(ctx, metadata.MoveFilter{JobID: jobs[len(jobs)-1].ID, ActiveOnly: true})
		return err == nil && len(moves) == 0 && jobs[0].State == "done"
	})
	standbyLog, err := os.ReadFile(standby.log)
	require.NoError(t, err)
	assert.Contains(t, string(standbyLog), "resuming job", "the standby resumed the dead leader's job")
	res, err := bg.Stop()
	require.NoError(t, err)
	v, err := workload.Check(ctx, r, res.Ledger)
	require.NoError(t, err)
	assert.True(t, v.OK(), "ledger: %v", v.Violations)

	moves, err := cat.Moves(ctx, metadata.MoveFilter{})
	require.NoError(t, err)
	for _, m := range moves {
		assert.Equal(t, "done", m.Phase, "move %d (attempts %d, error %q)", m.ID, m.Attempts, m.Error)
	}
	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	in, err := scheduler.BuildInput(cl.Status(""), scheduler.DefaultPlanOptions())
	require.NoError(t, err)
	plan, err := planner.Plan(in)
	require.NoError(t, err)
	assert.Empty(t, plan.Moves, "the cluster ends balanced")
}
