package main

import (
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/procs"
)

func TestVersionFromBuildInfo(t *testing.T) {
	v := readVersion(nil, false)
	assert.Equal(t, "devel", v.Version)
	assert.Empty(t, v.Commit)
	assert.Nil(t, v.Dirty)
	assert.Equal(t, runtime.Version(), v.Go)

	v = readVersion(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, true)
	assert.Equal(t, "devel", v.Version)
	assert.Equal(t, "go1.26.8", v.Go)

	v = readVersion(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "cc928e488f36a9d5d27278a7c1b96182f0e6fe57"},
			{Key: "vcs.time", Value: "2026-12-01T12:59:42Z"}, {Key: "vcs.modified", Value: "true"}}}, true)
	assert.Equal(t, "v1.2.3", v.Version)
	assert.Equal(t, "cc928e488f36a9d5d27278a7c1b96182f0e6fe57", v.Commit)
	assert.Equal(t, "2026-12-01T12:59:42Z", v.CommitTime)
	require.NotNil(t, v.Dirty)
	assert.True(t, *v.Dirty)
	assert.Equal(t, []string{"15"}, v.PostgreSQL.Versions)
	assert.Equal(t, []string{"12", "13"}, v.Citus.Versions)
}

// `shardmover version` needs no cluster: it answers with a coordinator
// where nothing listens, in a table and in JSON.
func TestVersionCommand(t *testing.T) {
	coord := "host=127.0.0.1 port=1 user=alice password=hunter2 dbname=x"
	out, stderr, code := runMain(t, nil, "version", "--coordinator", coord)
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stderr)
	assert.True(t, strings.HasPrefix(out, "shardmover "), out)
	for _, want := range []string{"commit:", "go:         " + runtime.Version(), "postgresql: 15 (", "citus:      12, 13 ("} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "hunter2")

	out, stderr, code = runMain(t, nil, "version", "-o", "json", "--coordinator", coord)
	require.Equal(t, 0, code, stderr)
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	assert.NotEmpty(t, v["version"])
	assert.Equal(t, runtime.Version(), v["go"])
	assert.Equal(t, runtime.GOOS+"/"+runtime.GOARCH, v["platform"])
	pg, ok := v["postgresql"].(map[string]any)
	require.True(t, ok, out)
	assert.Equal(t, []any{"15"}, pg["versions"])
	citus, ok := v["citus"].(map[string]any)
	require.True(t, ok, out)
	assert.Equal(t, []any{"12", "13"}, citus["versions"])
}

// The binary runs Go code on half the CPUs (internal/procs) unless
// GOMAXPROCS says otherwise; `version` reports what it runs with.
func TestVersionReportsGoThreads(t *testing.T) {
	threads := func(env ...string) float64 {
		out, stderr, code := runMain(t, env, "version", "-o", "json")
		require.Equal(t, 0, code, stderr)
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		assert.EqualValues(t, runtime.NumCPU(), v["cpus"])
		n, ok := v["go_threads"].(float64)
		require.True(t, ok, out)
		return n
	}
	// What Go would use: this test process's own GOMAXPROCS, which go test
	// leaves at Go's default.
	assert.EqualValues(t, procs.Default(runtime.GOMAXPROCS(0)), threads("GOMAXPROCS="), "unset: half the CPUs")
	assert.EqualValues(t, 3, threads("GOMAXPROCS=3"), "an operator's GOMAXPROCS wins")
}
