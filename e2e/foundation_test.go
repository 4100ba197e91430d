package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox"
	"github.com/shardmover/shardmover/metadata"
)

// buildBinary compiles cmd/shardmover once per test binary.
func buildBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "shardmover")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/shardmover").CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

// freeBase reserves n consecutive free loopback ports for the test.
func freeBase(t *testing.T, n int) int {
	t.Helper()
	base, err := sandbox.ReservePorts(n)
	require.NoError(t, err)
	t.Cleanup(func() {
		for p := base; p < base+n; p++ {
			sandbox.ReleasePorts(p)
		}
	})
	return base
}

func sm(t *testing.T, bin, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append(args, "--dir", dir)...)
	cmd.Env = append(os.Environ(), "SHARDMOVER_COORDINATOR=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "shardmover %s: %s", strings.Join(args, " "), out)
	return string(out)
}

// TestFoundationCLI runs the README's path through the real binary: a
// sandbox, github data, a routed workload with its ledger, status, add-node.
func TestFoundationCLI(t *testing.T) {
	bin := buildBinary(t)
	dir := filepath.Join(t.TempDir(), "sb")
	require.NoError(t, os.MkdirAll(filepath.Dir(dir), 0o755))
	base := freeBase(t, 6)
	sm(t, bin, dir, "sandbox", "up", "--port", fmt.Sprint(base), "--nodes", "2")
	t.Cleanup(func() { _ = exec.Command(bin, "sandbox", "down", "--purge", "--dir", dir).Run() })
	// up is idempotent.
	sm(t, bin, dir, "sandbox", "up", "--port", fmt.Sprint(base), "--nodes", "2")

	out := sm(t, bin, dir, "sandbox", "load", "--users", "500", "--events", "5000")
	assert.Contains(t, out, "loaded 500 users and 5000 events")
	out = sm(t, bin, dir, "workload", "--duration", "2s", "--clients", "4", "--users", "500")
	assert.Contains(t, out, "ledger: PASS")

	var st metadata.Status
	require.NoError(t, json.Unmarshal([]byte(sm(t, bin, dir, "status", "-o", "json")), &st))
	require.Len(t, st.Nodes, 3)
	require.Len(t, st.ShardGroups, 32)
	assert.Equal(t, 16, st.Nodes[1].ShardGroups)
	assert.Equal(t, 16, st.Nodes[2].ShardGroups)
	assert.Positive(t, st.Nodes[1].Bytes)

	out = sm(t, bin, dir, "sandbox", "add-node")
	assert.Contains(t, out, "started and registered worker3")
	require.NoError(t, json.Unmarshal([]byte(sm(t, bin, dir, "status", "-o", "json")), &st))
	require.Len(t, st.Nodes, 4)
	assert.Zero(t, st.Nodes[3].ShardGroups, "a new node holds nothing until a rebalance")

	sm(t, bin, dir, "sandbox", "down")
	out = sm(t, bin, dir, "sandbox", "status")
	assert.Contains(t, out, "stopped")
	assert.NotContains(t, out, "running")
}
