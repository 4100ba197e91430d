package cpumeter

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
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

	// The live child says when its loop is done, then waits.
	live := exec.Command("sh", "-c", burn+"; echo done; exec sleep 60")
	out, err := live.StdoutPipe()
	require.NoError(t, err)
	start = m.Sample()
	require.NoError(t, live.Start())
	defer func() { _ = live.Process.Kill(); _ = live.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "done\n", line)
	own, _, _, _, ok := procStat(live.Process.Pid)
	require.True(t, ok, "the live child is still there")
	require.Greater(t, own, int64(0), "the live child burned its CPU")
	one, ok := ProcessCPU(live.Process.Pid)
	require.True(t, ok)
	require.Equal(t, time.Duration(own)*tick, one, "ProcessCPU reads the same process")
	_, ok = ProcessCPU(-1)
	require.False(t, ok, "no such process")
	servers, _ = m.Since(start)
	require.GreaterOrEqual(t, servers, time.Duration(own)*tick, "a live child counts")

	none, _ := New().Since(New().Sample())
	require.Zero(t, none, "no instances, no server time")
}

// Twice as many busy loops as there are CPUs: together they must have
// waited on a run queue for a good part of their time, and ProcessWait
// must see it.
func TestProcessWaitSeesMoreLoopsThanCPUs(t *testing.T) {
	n := 2 * runtime.NumCPU()
	var waited, ran time.Duration
	var loops []*exec.Cmd
	defer func() {
		for _, c := range loops {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	var outs []*bufio.Reader
	for range n {
		c := exec.Command("sh", "-c", burn+"; echo done; exec sleep 60")
		out, err := c.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, c.Start())
		loops = append(loops, c)
		outs = append(outs, bufio.NewReader(out))
	}
	for i, c := range loops {
		line, err := outs[i].ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "done\n", line)
		w, ok := ProcessWait(c.Process.Pid)
		require.True(t, ok, "read /proc/%d/schedstat", c.Process.Pid)
		cpu, ok := ProcessCPU(c.Process.Pid)
		require.True(t, ok)
		waited, ran = waited+w, ran+cpu
	}
	// n loops on n/2 CPUs: each ran about as long as it waited.
	require.Greater(t, waited, ran/4, "%d loops on %d CPUs ran %s and waited only %s", n, runtime.NumCPU(), ran, waited)
	_, ok := ProcessWait(-1)
	require.False(t, ok, "no such process")
}
