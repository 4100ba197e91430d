package cpumeter

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// burn is a shell loop that keeps one core busy for a while.
const burn = `i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done`

// This process stands in for a postmaster: a child that exits within the
// window is counted through the parent's reaped time, one still running at
// its end through its own.
func TestCountsExitedAndLiveChildren(t *testing.T) {
	m := New(os.Getpid())

	start := m.Sample()
	exited := exec.Command("sh", "-c", burn)
	require.NoError(t, exited.Run())
	used := exited.ProcessState.UserTime() + exited.ProcessState.SystemTime()
	require.Greater(t, used, 50*time.Millisecond, "the loop burns measurable CPU")
	servers, _ := m.Since(start)
	require.GreaterOrEqual(t, servers, used-2*tick, "an exited child counts")

	live := exec.Command("sh", "-c", burn+"; sleep 30")
	start = m.Sample()
	require.NoError(t, live.Start())
	defer func() { _ = live.Process.Kill(); _ = live.Wait() }()
	var own int64
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		// Until the loop is done (its shell has used what the first one did).
		if o, _, _, _, ok := procStat(live.Process.Pid); ok && time.Duration(o)*tick >= used-2*tick {
			own = o
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NotZero(t, own, "the live child burned its CPU")
	servers, _ = m.Since(start)
	require.GreaterOrEqual(t, servers, time.Duration(own)*tick, "a live child counts")

	none, _ := New().Since(New().Sample())
	require.Zero(t, none, "no instances, no server time")
}
