package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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

// ready is the daemon's /readyz: status code and state.
func (p *daemonProc) ready() (int, scheduler.Readiness) {
	var r scheduler.Readiness
	resp, err := http.Get("http://" + p.addr + "/readyz")
	if err != nil {
		return 0, r
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&r)
	return resp.StatusCode, r
}

// metrics scrapes the daemon's /metrics into name{label=value} -> value.
func (p *daemonProc) metrics() map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return out
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			key := name
			for _, l := range m.GetLabel() {
				key += fmt.Sprintf("{%s=%s}", l.GetName(), l.GetValue())
			}
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			}
		}
	}
	return out
}

// exactlyOneLeader waits until exactly one of the running daemons reports
// leader (/status, /readyz, shardmover_leader), every other standby, under
// an epoch newer than after, and the coordinator shows the recorded
// leader's session holding the leader lock. It returns the leader.
func exactlyOneLeader(t *testing.T, cat *metadata.Catalog, after int64, ps ...*daemonProc) *daemonProc {
	t.Helper()
	var leader *daemonProc
	waitFor(t, "exactly one daemon leading and holding the lock", time.Minute, func() bool {
		leader = nil
		sum := 0.0
		for _, p := range ps {
			code, r := p.ready()
			m := p.metrics()
			sum += m["shardmover_leader"]
			switch {
			case code == 200 && r.State == "leader" && p.leader():
				if leader != nil {
					return false
				}
				leader = p
			case code == 200 && r.State == "standby":
			default:
				return false
			}
		}
		if leader == nil || sum != 1 {
			return false
		}
		rec, ok, err := cat.CurrentLeader(context.Background())
		var pid int32
		perr := cat.Pool().QueryRow(context.Background(), `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND classid = $1 AND objid = 1 AND objsubid = 2`, uint32(metadata.LockLeader)).Scan(&pid)
		return err == nil && ok && perr == nil && rec.Held && rec.PID == pid && rec.Epoch > after &&
			strings.HasSuffix(rec.Holder, "http "+leader.addr)
	})
	return leader
}

// phasesAsJournal waits until /metrics of every daemon shows the journal's
// moves by phase.
func phasesAsJournal(t *testing.T, cat *metadata.Catalog, ps ...*daemonProc) {
	t.Helper()
	waitFor(t, "/metrics of every daemon to show the journal's moves by phase", 30*time.Second, func() bool {
		want, err := cat.MovesByPhase(context.Background())
		if err != nil {
			return false
		}
		for _, p := range ps {
			m := p.metrics()
			for _, ph := range []string{"scheduled", "preflight", "copying", "catching_up", "cutover", "cleanup", "done", "failed", "cancelled"} {
				if m["shardmover_moves{phase="+ph+"}"] != float64(want[ph]) {
					return false
				}
			}
		}
		return true
	})
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

// TestTwoDaemonsLeaderKilled: two daemons, exactly one leads and holds
// the lock; the coordinator ends the leader's lock session and exactly one
// leads again under a new epoch; a node is added; the leader is killed
// with SIGKILL mid-job; the standby takes over, holding the lock, and the
// job completes with the workload's ledger intact; its /metrics shows the
// journal's moves by phase.
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
	leader := exactlyOneLeader(t, cat, 0, a, b)
	// The coordinator ends the leader's lock session: exactly one daemon
	// leads again, under a new epoch (the same daemon may win again).
	rec, _, err := cat.CurrentLeader(ctx)
	require.NoError(t, err)
	_, err = cat.Pool().Exec(ctx, "SELECT pg_terminate_backend($1)", rec.PID)
	require.NoError(t, err)
	leader = exactlyOneLeader(t, cat, rec.Epoch, a, b)
	standby := a
	if leader == a {
		standby = b
	}

	opts := workload.DefaultRunOptions()
	opts.Clients, opts.Users, opts.Duration = 4, 2000, time.Hour
	opts.Pause = workload.TestPause
	bg := workload.Start(ctx, r, opts)

	n, err := sb.AddNode(ctx)
	require.NoError(t, err)
	added, err := cat.AddNode(ctx, n.Host, n.Port, metadata.DefaultAddNodeOptions())
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
	rec, _, err = cat.CurrentLeader(ctx)
	require.NoError(t, err)
	require.NoError(t, leader.cmd.Process.Signal(syscall.SIGKILL))
	_, _ = leader.cmd.Process.Wait()
	killed := time.Now()
	require.Equal(t, standby, exactlyOneLeader(t, cat, rec.Epoch, standby))
	t.Logf("the standby led %s after the leader was killed", time.Since(killed).Round(time.Millisecond))

	// The dead leader had not accounted for the new node (it records that
	// when its rebalance ends), so the new leader owes the node a rebalance
	// of its own once the resumed job is done: wait for every job, and for
	// the leader to have accounted for the node.
	waitFor(t, "every job to complete and the new node to be accounted for", 5*time.Minute, func() bool {
		jobs, err := cat.Jobs(ctx, 20)
		if err != nil || len(jobs) == 0 {
			return false
		}
		for _, j := range jobs {
			if j.State != metadata.JobDone {
				return false
			}
		}
		seen, ok, err := cat.NodesSeen(ctx)
		return err == nil && ok && slices.Contains(seen, added.ID)
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
		assert.Equal(t, "done", string(m.Phase), "move %d (attempts %d, error %q)", m.ID, m.Attempts, m.Error)
	}
	phasesAsJournal(t, cat, standby)
	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	in, err := scheduler.BuildInput(cl.Status(""), scheduler.DefaultPlanOptions())
	require.NoError(t, err)
	plan, err := planner.Plan(in)
	require.NoError(t, err)
	assert.Empty(t, plan.Moves, "the cluster ends balanced")
}

// TestDaemonRefusesBadSchedulesBeforeConnecting: schedules that never fire
// or fire more often than every second are refused with a sentence and
// exit code 2 before the daemon connects anywhere (the coordinator given
// does not exist); a rate written with a lower-case unit is accepted.
func TestDaemonRefusesBadSchedulesBeforeConnecting(t *testing.T) {
	bin := buildBinary(t)
	for _, tc := range []struct{ schedule, want string }{
		{"0 0 30 2 *", "never fires"},
		{"@every -5s", "more often than every second"},
		{"@every 0s", "more often than every second"},
	} {
		cmd := exec.Command(bin, "daemon", "--coordinator", "postgres://postgres@127.0.0.1:1/none", "--listen", "127.0.0.1:0",
			"--max-bandwidth", "200kB/s", "--schedule", "0 3 * * *", "--schedule", tc.schedule)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%s: %s", tc.schedule, out)
		assert.Equal(t, 2, ee.ExitCode(), "%s: %s", tc.schedule, out)
		assert.Contains(t, string(out), tc.want, tc.schedule)
		assert.Contains(t, string(out), "--schedule", tc.schedule)
		assert.NotContains(t, string(out), "connect", "nothing connected: %s", out)
	}
	out, err := exec.Command(bin, "daemon", "--help").CombinedOutput()
	require.NoError(t, err)
	assert.Contains(t, string(out), "clocks go forward")
}
