package mover_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/faultproxy"
	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/internal/workload"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// proxied is a compat cluster whose every node is reached through a
// fault-injecting proxy: the nodes are registered under the proxies'
// addresses, and the catalog connects to the coordinator's proxy. The
// routed workload goes through the proxies too; rules pick the mover's
// messages by their SQL.
type proxied struct {
	*cluster
	coord   *faultproxy.Proxy
	dsn     string              // the coordinator, through its proxy
	workers []*faultproxy.Proxy // by worker index: 0, 1 hold data, 2 is the target
}

func newProxied(t *testing.T, shards int, users, events int64) *proxied {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb := sandboxtest.New(t, 3)
	p := &proxied{}
	proxy := func(addr string) *faultproxy.Proxy {
		px, err := faultproxy.New(addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = px.Close() })
		return px
	}
	p.coord = proxy(sb.Coordinator().Addr())
	for _, w := range sb.Workers() {
		p.workers = append(p.workers, proxy(w.Addr()))
	}
	dsn := "host=127.0.0.1 port=" + strconv.Itoa(p.coord.Port()) + " user=postgres dbname=postgres sslmode=disable"
	p.dsn = dsn
	cat, err := metadata.Open(ctx, metadata.Config{Coordinator: dsn, ConnectTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(cat.Close)
	require.NoError(t, cat.Install(ctx))
	for _, px := range p.workers[:2] {
		_, err := cat.AddNode(ctx, "127.0.0.1", px.Port(), metadata.DefaultAddNodeOptions())
		require.NoError(t, err)
	}
	require.NoError(t, workload.Setup(ctx, cat, shards))
	r, err := workload.NewRouter(ctx, cat, 8)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	_, err = workload.Load(ctx, r, workload.LoadOptions{Seed: 1, Users: users, Events: events})
	require.NoError(t, err)
	_, err = cat.AddNode(ctx, "127.0.0.1", p.workers[2].Port(), metadata.DefaultAddNodeOptions())
	require.NoError(t, err)
	p.cluster = &cluster{sb: sb, cat: cat, r: r}
	return p
}

// proxyOf returns the proxy in front of node group g's node.
func (p *proxied) proxyOf(t *testing.T, g int32) *faultproxy.Proxy {
	t.Helper()
	if g == 0 {
		return p.coord
	}
	nodes, err := p.cat.Nodes(context.Background())
	require.NoError(t, err)
	for _, n := range nodes {
		if n.GroupID != g {
			continue
		}
		for _, px := range p.workers {
			if px.Port() == n.Port {
				return px
			}
		}
	}
	t.Fatalf("no proxy for node group %d", g)
	return nil
}

// decisionCommit is a rule that applies a to the COMMIT of the first
// coordinator transaction that flips placements: the decision.
func decisionCommit(a faultproxy.Action, also func()) faultproxy.Rule {
	var mu sync.Mutex
	armed := map[uint64]bool{}
	done := false
	return func(c faultproxy.ConnInfo, m faultproxy.Message) faultproxy.Action {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return faultproxy.Pass
		}
		switch {
		case m.Type == 'Q' && m.Is("commit"):
			if armed[c.ID] {
				done = true
				if also != nil {
					also()
				}
				return a
			}
		case m.Type == 'Q' && m.Is("rollback"):
			delete(armed, c.ID)
		case strings.Contains(m.Statement(), "pg_dist_placement SET groupid"):
			armed[c.ID] = true
		}
		return faultproxy.Pass
	}
}

// statement is a rule that applies a to the first message running SQL that
// starts with prefix (case-insensitive).
func statement(prefix string, a faultproxy.Action) faultproxy.Rule {
	return faultproxy.Once(func(_ faultproxy.ConnInfo, m faultproxy.Message) bool {
		return (m.Type == 'Q' || m.Type == 'P') && strings.HasPrefix(strings.ToUpper(strings.TrimSpace(m.SQL())), prefix)
	}, a)
}

// TestCutoverNetworkFaults puts a nemesis between the mover and the
// coordinator or the source at each step of the cutover: a message delayed
// past the write-pause bound, dropped (the client hangs), cut before it
// arrives, or cut after the server ran it (the reply is lost), and the
// coordinator refusing connections right at the decision. Each case moves
// one shard group under the routed workload. Whatever the fault, the move
// must end done (faults heal), the shard's placement must name the target
// while the source's old shards carry their fenced names (never both
// serving, never neither), and nothing may stay prepared or locked; the
// ledger at the end proves no acknowledged write was lost.
func TestCutoverNetworkFaults(t *testing.T) { cutoverNetworkFaults(t, false) }

// TestStreamCutoverNetworkFaults is TestCutoverNetworkFaults for a stream:
// each case moves two shard groups of one source in one job, the second
// riding the first's stream, and both must end done and flipped.
func TestStreamCutoverNetworkFaults(t *testing.T) { cutoverNetworkFaults(t, true) }

func cutoverNetworkFaults(t *testing.T, stream bool) {
	shards := 16
	if stream {
		shards = 32
	}
	p := newProxied(t, shards, 300, 3000)
	target := p.newNode(t)
	srcs := holders(t, p.cluster)
	used := map[int]bool{}
	bg := startWorkload(p.cluster, 6, 300, 0)
	defer func() {
		if bg != nil {
			bg.stop(t)
		}
	}()
	cases := []struct {
		name string
		on   string // "coordinator" or "source"
		rule func(px *faultproxy.Proxy) faultproxy.Rule
		// longest: when set, no acknowledged write begun during the case
		// may have taken longer.
		longest time.Duration
	}{
		// The review's case: the decision's COMMIT held past the pause
		// bound; the mover must not roll the fence back under it.
		{"decision commit delayed 4s", "coordinator", func(*faultproxy.Proxy) faultproxy.Rule {
			return decisionCommit(faultproxy.Delay(4*time.Second), nil)
		}, 0},
		{"decision commit dropped", "coordinator", func(*faultproxy.Proxy) faultproxy.Rule {
			return decisionCommit(faultproxy.Drop, nil)
		}, 0},
		{"decision commit cut before it arrives", "coordinator", func(*faultproxy.Proxy) faultproxy.Rule {
			return decisionCommit(faultproxy.Cut, nil)
		}, 0},
		{"decision commit ran, reply lost", "coordinator", func(*faultproxy.Proxy) faultproxy.Rule {
			return decisionCommit(faultproxy.CutAfterForward, nil)
		}, 0},
		{"coordinator unreachable at the decision", "coordinator", func(px *faultproxy.Proxy) faultproxy.Rule {
			return decisionCommit(faultproxy.Cut, func() { px.Refuse(3 * time.Second) })
		}, 0},
		{"prepare delayed 4s", "source", func(*faultproxy.Proxy) faultproxy.Rule {
			return statement("PREPARE TRANSACTION", faultproxy.Delay(4*time.Second))
		}, 0},
		{"prepare ran, reply lost", "source", func(*faultproxy.Proxy) faultproxy.Rule {
			return statement("PREPARE TRANSACTION", faultproxy.CutAfterForward)
		}, 0},
		{"lock dropped", "source", func(*faultproxy.Proxy) faultproxy.Rule {
			return statement("LOCK TABLE", faultproxy.Drop)
		}, 0},
		// The fence's renames run under the source's lock, so the writes
		// to the group queue behind them: a lost one must end the attempt
		// within the pause bound (2 s), not hold those writes longer.
		{"fence dropped", "source", func(*faultproxy.Proxy) faultproxy.Rule {
			return faultproxy.Once(func(_ faultproxy.ConnInfo, m faultproxy.Message) bool {
				sql := strings.ToUpper(m.SQL())
				return (m.Type == 'Q' || m.Type == 'P') && strings.HasPrefix(sql, "ALTER TABLE") && strings.Contains(sql, " RENAME TO ")
			}, faultproxy.Drop)
		}, 4 * time.Second},
		{"commit prepared cut", "source", func(*faultproxy.Proxy) faultproxy.Rule {
			return statement("COMMIT PREPARED", faultproxy.Cut)
		}, 0},
		{"commit prepared ran, reply lost", "source", func(*faultproxy.Proxy) faultproxy.Rule {
			return statement("COMMIT PREPARED", faultproxy.CutAfterForward)
		}, 0},
	}
	type window struct {
		name     string
		from, to time.Time
		longest  time.Duration
	}
	var bounded []window
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if stream {
				netCase(t, "stream of two groups: "+tc.name, tc.on)
			} else {
				netCase(t, tc.name, tc.on)
			}
			// The previous case's fault has healed: the coordinator answers
			// through its proxy again.
			require.Eventually(t, func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				conn, err := pgx.Connect(ctx, p.dsn)
				if err != nil {
					return false
				}
				conn.Close(ctx)
				return true
			}, 20*time.Second, 100*time.Millisecond)
			n := 1
			if stream {
				n = 2
			}
			groups := groupsOn(t, p.cluster, srcs[i%2], n, used)
			for _, g := range groups {
				used[g] = true
			}
			px := p.coord
			if tc.on == "source" {
				px = p.proxyOf(t, srcs[i%2])
			}
			cfg := testConfig(t)
			eng := mover.New(cfg, p.cat)
			_, moves := scheduleJob(t, p.cluster, eng, groups, target)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if stream {
				require.NoError(t, p.cat.Carry(ctx, moves[0].ID, []int64{moves[1].ID}))
			}
			from := time.Now()
			px.SetRule(tc.rule(px))
			defer px.ClearRule()
			// Run, not RunJob: no recovery before a resumed run, which
			// settles what it finds on its own.
			err := eng.Run(ctx, moves[0].ID)
			select {
			case <-px.Fired():
			default:
				t.Fatalf("the fault never fired (the run returned %v): the test did not test what it says", err)
			}
			px.ClearRule()
			if err != nil {
				// A move may stop on a fault; a second run must finish it.
				t.Logf("first run: %v", err)
				require.NoError(t, eng.Run(ctx, moves[0].ID))
			}
			for _, m := range moves {
				done, err := p.cat.Move(ctx, m.ID)
				require.NoError(t, err)
				assert.Equal(t, "done", string(done.Phase))
				assert.Equal(t, moves[0].ID, done.StreamID(), "move %d rode the stream of the job's first move", m.ID)
				assertFlipped(t, p.cluster, done, target)
			}
			if tc.longest > 0 {
				bounded = append(bounded, window{tc.name, from, time.Now(), tc.longest})
			}
		})
	}
	res := bg.stop(t)
	bg = nil
	verifyAllowing(t, p.cluster, res, "connection")
	for _, w := range bounded {
		var longest time.Duration
		for _, l := range res.Latencies {
			if !l.At.Before(w.from) && l.At.Before(w.to) {
				longest = max(longest, l.Dur)
			}
		}
		assert.LessOrEqual(t, longest, w.longest, "%s: the longest acknowledged write begun during the case", w.name)
	}
}

// assertFlipped checks a done move: every shard's placement is on the
// target, the shard tables exist there, and on the source they exist only
// under their fenced names.
func assertFlipped(t *testing.T, c *cluster, m metadata.Move, target metadata.Node) {
	t.Helper()
	ctx := context.Background()
	cl, err := c.cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	for _, id := range m.ShardIDs {
		pl, ok := cl.PlacementOf(id)
		require.True(t, ok)
		assert.Equal(t, target.GroupID, pl.GroupID, "shard %d's placement", id)
	}
	src, ok := cl.NodeByGroup(m.SourceGroup)
	require.True(t, ok)
	conn, err := c.cat.ConnectNode(ctx, src.Host, src.Port)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, name := range m.ShardTables {
		ident, err := metadata.ParseQualifiedName(name)
		require.NoError(t, err)
		var live bool
		require.NoError(t, conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", ident.Sanitize()).Scan(&live))
		assert.False(t, live, "%s must be fenced on the source once its placement is on the target", ident.Sanitize())
	}
	var prepared int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'shardmover%'").Scan(&prepared))
	assert.Zero(t, prepared, "no fence may stay prepared")
}
