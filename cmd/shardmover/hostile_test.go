package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mainArgsEnv makes the test binary run main with the JSON-encoded
// arguments instead of the tests: runMain uses it to run the real CLI in a
// child process, with its own stderr and exit code.
const mainArgsEnv = "SHARDMOVER_TEST_MAIN_ARGS"

func TestMain(m *testing.M) {
	if raw, ok := os.LookupEnv(mainArgsEnv); ok {
		var args []string
		if err := json.Unmarshal([]byte(raw), &args); err != nil {
			panic(err)
		}
		os.Args = append([]string{"shardmover"}, args...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runMain runs the CLI as a process (this test binary running main) and
// returns its stdout, its stderr and its exit code.
func runMain(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), env...), mainArgsEnv+"="+string(raw))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return stdout.String(), stderr.String(), code
}

// countingListener accepts TCP connections and counts them: a coordinator
// that proves nobody connected.
func countingListener(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return l.Addr().String(), &n
}

// Hostile input is refused before any connection is made: exit code 2, one
// line on stderr saying what is wrong and what to do, nothing on stdout,
// nothing changed, and no password or connection string printed. The
// coordinator given counts connections, and must count none.
func TestHostileInput(t *testing.T) {
	addr, accepted := countingListener(t)
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	dsn := "host=" + host + " port=" + port + " user=alice password=hunter2 dbname=x connect_timeout=2"
	dir := t.TempDir()
	sandboxDir := filepath.Join(dir, "sandbox")
	unknownRules := filepath.Join(dir, "unknown-rules.json")
	require.NoError(t, os.WriteFile(unknownRules, []byte(`{"pinned": {"1:3": ["10.0.0.2:5432"]}}`), 0o644))
	badNodeRules := filepath.Join(dir, "bad-node-rules.json")
	require.NoError(t, os.WriteFile(badNodeRules, []byte(`{"pin": {"1:3": ["10.0.0.2"]}}`), 0o644))

	cases := []struct {
		name string
		args []string
		want string
	}{
		// move
		{"shard not a number", []string{"move", "--shard", "abc", "--to", "10.0.0.5:5432"}, `--shard "abc" is not a whole number`},
		{"shard zero", []string{"move", "--shard", "0", "--to", "10.0.0.5:5432"}, "--shard must be a positive shard id, got 0"},
		{"shard overflows int64", []string{"move", "--shard", "99999999999999999999", "--to", "10.0.0.5:5432"}, "is out of range for a whole number"},
		{"shard list with a word", []string{"move", "--shard=1,x", "--to", "10.0.0.5:5432"}, `--shard "1,x" is not a whole number`},
		{"move without target", []string{"move", "--shard", "1"}, "give exactly one of --to host:port and --to-node ID"},
		{"move with two targets", []string{"move", "--shard", "1", "--to", "10.0.0.5:5432", "--to-node", "2"}, "give exactly one of --to host:port and --to-node ID"},
		{"target not host:port", []string{"move", "--shard", "1", "--to", "nonsense"}, `--to "nonsense" is not host:port`},
		{"target port out of range", []string{"move", "--shard", "1", "--to", "10.0.0.5:70000"}, `--to "10.0.0.5:70000" is not host:port with a port from 1 to 65535`},
		{"target node negative", []string{"move", "--shard", "1", "--to-node", "-3"}, "--to-node must be a positive node id, got -3"},
		{"throttle zero", []string{"move", "--shard", "1", "--to", "10.0.0.5:5432", "--throttle", "0MB/s"}, `--throttle "0MB/s" is not a rate`},
		{"retained WAL negative", []string{"move", "--shard", "1", "--to", "10.0.0.5:5432", "--max-retained-wal", "-1GB"}, `--max-retained-wal "-1GB" is not a size`},
		{"retained WAL overflows", []string{"move", "--shard", "1", "--to", "10.0.0.5:5432", "--max-retained-wal", "99999999TB"}, `--max-retained-wal "99999999TB" is not a size`},
		{"concurrency zero", []string{"move", "--shard", "1", "--to", "10.0.0.5:5432", "--concurrency", "0"}, "--concurrency must be at least 1, got 0"},
		{"target swallowed the next flag", []string{"move", "--shard", "1", "--to"}, "takes no arguments, got [a connection string, not shown]"},
		// rebalance and drain
		{"unknown strategy", []string{"rebalance", "--strategy", "nope"}, `--strategy "nope" does not exist`},
		{"threshold above one", []string{"rebalance", "--threshold", "1.5"}, "--threshold must be a number from 0 up to (not including) 1, got 1.5"},
		{"threshold not a number", []string{"rebalance", "--threshold", "abc"}, `--threshold "abc" is not a number`},
		{"max moves negative", []string{"rebalance", "--max-moves", "-1"}, "--max-moves must be 0 or more, got -1"},
		{"bandwidth not a rate", []string{"rebalance", "--max-bandwidth", "lots"}, `--max-bandwidth "lots" is not a rate`},
		{"base cost negative", []string{"rebalance", "--base-cost", "-5MB"}, `--base-cost "-5MB" is not a size`},
		{"drain without node", []string{"drain"}, "--node is required"},
		{"drain node not host:port", []string{"drain", "--node", "nonsense"}, `--node "nonsense" is not host:port`},
		// plan
		{"capacity negative", []string{"plan", "--capacity", "10.0.0.5:5432=-1"}, "a capacity is a number of 0 or more"},
		{"capacity without number", []string{"plan", "--capacity", "10.0.0.5:5432"}, "must be host:port=number"},
		{"exclude negative", []string{"plan", "--exclude=-4"}, "--exclude must be a positive shard id, got -4"},
		{"add-node not host:port", []string{"plan", "--add-node", "bad"}, `--add-node "bad" is not host:port[=capacity]`},
		{"plan per-node zero", []string{"plan", "--per-node", "0"}, "--per-node must be at least 1, got 0"},
		// jobs
		{"job id not a number", []string{"jobs", "show", "abc"}, `"abc" is not a job id`},
		{"job id negative", []string{"jobs", "show", "-1"}, "-1 is not accepted: ids, counts and sizes are positive numbers"},
		{"resume per-node zero", []string{"jobs", "resume", "1", "--per-node", "0"}, "--per-node must be at least 1, got 0"},
		{"resume groups per stream zero", []string{"jobs", "resume", "1", "--groups-per-stream", "0"}, "--groups-per-stream must be at least 1, got 0"},
		{"rebalance groups per stream negative", []string{"rebalance", "--groups-per-stream", "-3"}, "--groups-per-stream must be at least 1, got -3"},
		{"unknown jobs subcommand", []string{"jobs", "sho", "1"}, `unknown command "sho" for ` + "`shardmover jobs` (did you mean show?)"},
		// daemon
		{"cron with four fields", []string{"daemon", "--schedule", "0 3 * *"}, `--schedule "0 3 * *" is not a cron expression`},
		{"cron that never fires", []string{"daemon", "--schedule", "0 0 30 2 *"}, "never fires"},
		{"cron below a second", []string{"daemon", "--schedule", "@every 100ms"}, "would fire more often than every second"},
		{"unknown time zone", []string{"daemon", "--timezone", "Nowhere/Land"}, `--timezone "Nowhere/Land" is not a known time zone`},
		{"settle negative", []string{"daemon", "--settle", "-1s"}, "--settle must not be negative, got -1s"},
		{"poll zero", []string{"daemon", "--poll", "0s"}, "--poll must be positive, got 0s"},
		{"duration overflows", []string{"daemon", "--keep-old-for", "99999999999h"}, `--keep-old-for "99999999999h" is not a duration`},
		{"listen port out of range", []string{"daemon", "--listen", ":99999"}, `--listen ":99999" is not host:port`},
		{"daemon strategy", []string{"daemon", "--strategy", "nope"}, `--strategy "nope" does not exist`},
		// verify and cleanup
		{"verify shard and group", []string{"verify", "--shard", "5", "--group", "1:0"}, "give exactly one of --shard ID, --group COLOCATION:INDEX and --all"},
		{"verify bad group", []string{"verify", "--group", "1"}, `--group "1" is not a shard group`},
		{"verify bad throttle", []string{"verify", "--shard", "5", "--throttle", "5rows"}, `--throttle "5rows" is not a rate`},
		{"cleanup negative grace", []string{"cleanup", "--keep-old-for", "-1h"}, "--keep-old-for must not be negative"},
		// workload and sandbox
		{"workload zero duration", []string{"workload", "--duration", "0s"}, "--duration must be positive, got 0s"},
		{"workload zero clients", []string{"workload", "--clients", "0"}, "--clients must be at least 1, got 0"},
		{"workload zero users", []string{"workload", "--users", "0"}, "--users must be at least 1, got 0"},
		{"sandbox load zero shards", []string{"sandbox", "load", "--shards", "0"}, "--shards must be between 1 and 128000, got 0"},
		{"sandbox up zero nodes", []string{"sandbox", "up", "--dir", sandboxDir, "--nodes", "0"}, "--nodes must be at least 1"},
		{"table shards too many", []string{"table", "create", "items", "--column", "id", "--shards", "200000"}, "--shards must be between 1 and 128000, got 200000"},
		{"node add not host:port", []string{"node", "add", "nonsense"}, `the node "nonsense" is not host:port`},
		// global flags and commands
		{"unknown output format", []string{"status", "-o", "yaml"}, `-o must be table or json, got "yaml"`},
		{"unknown log level", []string{"status", "--log-level", "loud"}, `--log-level must be debug, info, warn or error, got "loud"`},
		{"node-conninfo bad sslmode", []string{"status", "--node-conninfo", "sslmode=bogus password=hunter2"}, "--node-conninfo is not valid: failed to configure TLS (sslmode is invalid)"},
		{"node-conninfo not key=value", []string{"status", "--node-conninfo", "garbage"}, "--node-conninfo is not valid"},
		{"node-conninfo bad port", []string{"status", "--node-conninfo", "port=abc"}, "--node-conninfo is not valid: invalid port"},
		{"argument to a command without any", []string{"status", "extra"}, "`shardmover status` takes no arguments, got \"extra\""},
		{"unknown command", []string{"stauts"}, `unknown command "stauts" for ` + "`shardmover` (did you mean status?)"},
		{"unknown flag", []string{"status", "--frobnicate"}, "unknown flag --frobnicate for shardmover status"},
		{"version output yaml", []string{"version", "-o", "yaml"}, `-o must be table or json, got "yaml"`},
		// placement rules: syntax is refused before connecting
		{"pin without nodes", []string{"rebalance", "--pin", "1:3"}, `--pin "1:3" must be GROUP=host:port[,host:port...]`},
		{"pin empty node list", []string{"plan", "--pin", "1:3="}, "--pin 1:3 lists no node; give at least one host:port"},
		{"avoid not a group", []string{"plan", "--avoid", "c1=10.0.0.2:5432"}, `--avoid c1: "c1" is not a shard group; write COLOCATION:INDEX`},
		{"isolate not a group", []string{"drain", "--node", "10.0.0.2:5432", "--isolate", "x"}, `--isolate x: "x" is not a shard group`},
		{"allow node not host:port", []string{"daemon", "--allow", "github_events=nonsense"}, `--allow github_events: "nonsense" is not host:port`},
		{"pin given twice", []string{"rebalance", "--pin", "1:3=10.0.0.2:5432", "--pin", "1:3=10.0.0.3:5432"}, "--pin 1:3 is given twice (also as --pin 1:3)"},
		{"rules file missing", []string{"rebalance", "--rules", filepath.Join(dir, "none.json")}, "none.json cannot be read"},
		{"rules file unknown field", []string{"plan", "--rules", unknownRules}, `has unknown field "pinned"; the fields are pin, avoid, isolate and allow`},
		{"rules file bad node", []string{"drain", "--node", "10.0.0.2:5432", "--rules", badNodeRules}, `: pin "1:3": "10.0.0.2" is not host:port`},
	}
	require.GreaterOrEqual(t, len(cases), 20)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{}, tc.args...), "--coordinator", dsn)
			stdout, stderr, code := runMain(t, nil, args...)
			inputCase(t, tc.args, code, stderr)
			assert.Equal(t, 2, code, "%v: %s", tc.args, stderr)
			assert.Empty(t, stdout, "a refused command prints nothing on stdout")
			assert.True(t, strings.HasPrefix(stderr, "shardmover: "), stderr)
			assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line on stderr: %q", stderr)
			assert.True(t, strings.HasSuffix(stderr, "\n"), stderr)
			assert.Contains(t, stderr, tc.want)
			assert.NotContains(t, stderr, "cannot reach", "refused before connecting")
			for _, secret := range []string{"hunter2", "password", "user=alice", dsn} {
				assert.NotContains(t, stdout+stderr, secret)
			}
		})
	}
	assert.Zero(t, accepted.Load(), "no command connected to the coordinator")
	_, err = os.Stat(sandboxDir)
	assert.True(t, os.IsNotExist(err), "a refused sandbox up creates nothing")
}

// The coordinator given by SHARDMOVER_COORDINATOR is never printed either,
// and bad input is still refused before it is used.
func TestHostileInputEnvCoordinator(t *testing.T) {
	addr, accepted := countingListener(t)
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	dsn := "host=" + host + " port=" + port + " user=alice password=hunter2 dbname=x"
	env := []string{"SHARDMOVER_COORDINATOR=" + dsn}
	for _, args := range [][]string{
		{"daemon", "--schedule", "61 * * * *"},
		{"move", "--shard", "1", "--to", dsn},
		{"rebalance", "--strategy", dsn},
		{"plan", "--drain", dsn},
	} {
		stdout, stderr, code := runMain(t, env, args...)
		assert.Equal(t, 2, code, "%v: %s", args, stderr)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "%q", stderr)
		assert.NotContains(t, stdout+stderr, "hunter2")
		assert.NotContains(t, stdout+stderr, "user=alice")
	}
	assert.Zero(t, accepted.Load(), "no command connected to the coordinator")
}
