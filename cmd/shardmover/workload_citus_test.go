package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
)

// TestWorkloadOnCitusSandbox: `shardmover workload` on a Citus sandbox sends
// its writes through the coordinator and the workers, Citus routing them,
// and the ledger passes; the JSON report names the flavor and the writes
// sent through each node.
func TestWorkloadOnCitusSandbox(t *testing.T) {
	c, _ := sandboxtest.NewCitus(t, 2)
	coord := c.Coordinator().DSN()
	_, msg, code := run(t, "sandbox", "load", "--coordinator", coord, "--users", "100", "--events", "500", "--shards", "4")
	require.Equal(t, 0, code, msg)

	out, msg, code := run(t, "workload", "--coordinator", coord, "--duration", "2s", "--clients", "4", "--users", "100")
	require.Equal(t, 0, code, "%s\n%s", msg, out)
	t.Log(out)
	assert.Contains(t, out, "ledger: PASS")
	assert.Contains(t, out, "routed by Citus; writes sent through")
	assert.Contains(t, out, c.Coordinator().Addr()+" (coordinator)")
	for _, w := range c.Workers() {
		assert.Contains(t, out, w.Addr()+" (worker)")
	}

	out, msg, code = run(t, "workload", "--coordinator", coord, "--duration", "1s", "--clients", "2", "--users", "100", "-o", "json")
	require.Equal(t, 0, code, "%s\n%s", msg, out)
	var rep struct {
		Flavor  string           `json:"flavor"`
		Via     map[string]int64 `json:"writes_by_node"`
		Verdict struct {
			Violations []string `json:"violations"`
			Checked    int      `json:"rows_checked"`
		} `json:"verdict"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Equal(t, "citus", rep.Flavor)
	assert.Empty(t, rep.Verdict.Violations)
	assert.Positive(t, rep.Verdict.Checked)
	assert.Positive(t, rep.Via[c.Coordinator().Addr()])
	assert.Positive(t, rep.Via[c.Workers()[0].Addr()], "client 1 writes through the first worker")
}
