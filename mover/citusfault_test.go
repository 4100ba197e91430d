package mover_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/faultproxy"
	"github.com/shardmover/shardmover/internal/reliability"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// newProxiedCitus is a Citus cluster (two workers with the github tables,
// a third added empty) whose every node Citus knows under a fault proxy's
// address (citus_set_coordinator_host, citus_update_node): Citus's own
// connections, the workload's and the mover's all go through the proxies.
func newProxiedCitus(t *testing.T, shards int, users, events int64) (*proxied, map[int32]*faultproxy.Proxy) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, direct := sandboxtest.NewCitus(t, 2)
	require.NoError(t, workload.Setup(ctx, direct, shards))
	_, err := sb.AddNode(ctx)
	require.NoError(t, err)
	proxy := func(addr string) *faultproxy.Proxy {
		px, err := faultproxy.New(addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = px.Close() })
		return px
	}
	p := &proxied{coord: proxy(sb.Coordinator().Addr())}
	byGroup := map[int32]*faultproxy.Proxy{0: p.coord}
	_, err = direct.Pool().Exec(ctx, "SELECT citus_set_coordinator_host('127.0.0.1', $1)", p.coord.Port())
	require.NoError(t, err)
	nodes, err := direct.Nodes(ctx)
	require.NoError(t, err)
	for _, n := range nodes {
		if n.IsCoordinator() {
			continue
		}
		px := proxy(n.Addr())
		p.workers = append(p.workers, px)
		byGroup[n.GroupID] = px
		_, err := direct.Pool().Exec(ctx, "SELECT citus_update_node($1, '127.0.0.1', $2)", n.ID, px.Port())
		require.NoError(t, err)
	}
	// citus_update_node marks the nodes' metadata out of sync; Citus's
	// maintenance daemon syncs it again shortly.
	require.Eventually(t, func() bool {
		var synced bool
		err := direct.Pool().QueryRow(ctx, "SELECT bool_and(metadatasynced) FROM pg_dist_node WHERE hasmetadata").Scan(&synced)
		return err == nil && synced
	}, time.Minute, 100*time.Millisecond, "Citus re-syncs its nodes' metadata after citus_update_node")
	p.dsn = "host=127.0.0.1 port=" + strconv.Itoa(p.coord.Port()) + " user=postgres dbname=postgres sslmode=disable"
	cat, err := metadata.Open(ctx, metadata.Config{Coordinator: p.dsn, ConnectTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(cat.Close)
	r, err := workload.NewRouter(ctx, cat, 8)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	_, err = workload.Load(ctx, r, workload.LoadOptions{Seed: 1, Users: users, Events: events})
	require.NoError(t, err)
	p.cluster = &cluster{sb: sb, cat: cat, r: r}
	return p, byGroup
}

// afterStatement is a rule that applies a to the first message of a
// connection whose statement starts with prefix (case-insensitive) once
// that connection ran a statement containing arm: e.g. the COMMIT of the
// coordinator transaction that flipped placements with Citus's function.
func afterStatement(arm, prefix string, a faultproxy.Action) faultproxy.Rule {
	var mu sync.Mutex
	armed := map[uint64]bool{}
	done := false
	return func(c faultproxy.ConnInfo, m faultproxy.Message) faultproxy.Action {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case done:
		case strings.Contains(m.Statement(), arm):
			armed[c.ID] = true
		case armed[c.ID] && (m.Type == 'Q' || m.Type == 'P') && strings.HasPrefix(strings.ToUpper(strings.TrimSpace(m.SQL())), prefix):
			done = true
			return a
		}
		return faultproxy.Pass
	}
}

// TestCitusCutoverNetworkFaults is TestCutoverNetworkFaults for the parts
// a Citus cutover adds: the metadata lock, the prepared placement flip and
// its COMMIT PREPARED on a metadata worker that is neither source nor
// target, the target's part, and the decision that flips the
// coordinator's placements with Citus's function. Each case moves one
// shard group under the Citus workload; every move must end done, with
// every node's pg_dist_placement naming the target, nothing prepared
// anywhere, and the ledger intact.
func TestCitusCutoverNetworkFaults(t *testing.T) {
	p, proxies := newProxiedCitus(t, 8, 200, 2000)
	target := p.newNode(t)
	cases := []struct {
		name string
		on   string // coordinator, source, target or bystander
		rule faultproxy.Rule
		// longest: when set, no acknowledged write may have taken longer.
		longest time.Duration
	}{
		// The coordinator's metadata lock is held when the bystander's
		// is lost: the attempt must give up within the pause bound (2 s),
		// not hold Citus's writes until a connection timeout.
		{"metadata lock dropped", "bystander", statement("SELECT LOCK_SHARD_METADATA", faultproxy.Drop), 4 * time.Second},
		{"placement flip prepared, reply lost", "bystander", statement("PREPARE TRANSACTION", faultproxy.CutAfterForward), 0},
		{"target's flip prepare cut", "target", statement("PREPARE TRANSACTION", faultproxy.Cut), 0},
		{"placement flip commit prepared, reply lost", "bystander", statement("COMMIT PREPARED", faultproxy.CutAfterForward), 0},
		{"decision commit ran, reply lost", "coordinator", afterStatement("citus_internal_update_placement_metadata", "COMMIT", faultproxy.CutAfterForward), 0},
		{"decision commit delayed 4s", "coordinator", afterStatement("citus_internal_update_placement_metadata", "COMMIT", faultproxy.Delay(4*time.Second)), 0},
		{"source fence prepared, reply lost", "source", statement("PREPARE TRANSACTION", faultproxy.CutAfterForward), 0},
	}
	moved := map[int64]int32{}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			faultCase(t, reliability.FamilyNetwork, tc.name+" (Citus)", "mover's connection to the "+tc.on+" on Citus",
				"the move finished: every node's placements on the target, nothing prepared anywhere, Citus routed every write")
			bg := startWorkload(p.cluster, 4, 200, uint8(i))
			g := citusGroup(t, p.cluster, workload.EventsTable, i)
			px := proxies[0]
			switch tc.on {
			case "source":
				px = proxies[g.GroupID]
			case "target":
				px = proxies[target.GroupID]
			case "bystander":
				for grp, x := range proxies {
					if grp != 0 && grp != g.GroupID && grp != target.GroupID {
						px = x
					}
				}
			}
			eng := mover.New(testConfig(t), p.cat)
			m := scheduleMove(t, eng, g.ShardIDs[0], target)
			px.SetRule(tc.rule)
			defer px.ClearRule()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			err := eng.Run(ctx, m.ID)
			select {
			case <-px.Fired():
			default:
				t.Fatalf("the fault never fired (the run returned %v): the test did not test what it says", err)
			}
			px.ClearRule()
			if err != nil {
				t.Logf("first run: %v", err)
				require.NoError(t, mover.New(testConfig(t), p.cat).Recover(ctx))
				require.NoError(t, eng.Run(ctx, m.ID))
			}
			done, err := p.cat.Move(ctx, m.ID)
			require.NoError(t, err)
			assert.Equal(t, "done", string(done.Phase))
			for _, id := range g.ShardIDs {
				moved[id] = g.GroupID
			}
			res := bg.stop(t)
			verifyCitus(t, p.cluster, res, moved)
			if tc.longest > 0 {
				var longest time.Duration
				for _, l := range res.Latencies {
					longest = max(longest, l.Dur)
				}
				assert.LessOrEqual(t, longest, tc.longest, "the longest acknowledged write")
			}
		})
	}
}
