package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/mover"
)

func TestVerifyFlag(t *testing.T) {
	v := verifyFlag{on: true, throttle: "20MB/s"}
	require.NoError(t, v.resolve())
	cfg := v.apply(mover.DefaultConfig())
	assert.True(t, cfg.Verify)
	assert.Equal(t, int64(20e6), cfg.VerifyBytesPerSecond)
	off := verifyFlag{}
	require.NoError(t, off.resolve())
	assert.False(t, off.apply(mover.DefaultConfig()).Verify, "off by default")
}

// A bad --verify-throttle, or one without --verify, is refused with exit
// code 2 and one sentence before any connection is made (the coordinator
// given does not exist); --help says what --verify costs.
func TestVerifyFlagBadInput(t *testing.T) {
	coord := []string{"--coordinator", "127.0.0.1:1"}
	for _, cmd := range [][]string{
		{"move", "--shard", "102008", "--to", "127.0.0.1:2"},
		{"rebalance"},
		{"drain", "--node", "127.0.0.1:2"},
		{"daemon"},
	} {
		for bad, want := range map[string]string{
			"bad":  `--verify-throttle "bad" is not a rate: write it like 20MB/s`,
			"-5MB": `--verify-throttle "-5MB" is not a rate`,
			"0":    `--verify-throttle "0" is not a rate`,
		} {
			args := append(append(append([]string{}, cmd...), coord...), "--verify", "--verify-throttle", bad)
			_, msg, code := run(t, args...)
			assert.Equal(t, 2, code, "%v: %s", args, msg)
			assert.Contains(t, msg, want, args)
			assert.Equal(t, 1, strings.Count(strings.TrimSpace(msg), "\n")+1, "one line: %q", msg)
		}
		args := append(append(append([]string{}, cmd...), coord...), "--verify-throttle", "20MB/s")
		_, msg, code := run(t, args...)
		assert.Equal(t, 2, code, "%v: %s", args, msg)
		assert.Contains(t, msg, "--verify-throttle paces --verify: give --verify too", args)

		out, _, code := run(t, append(append([]string{}, cmd...), "--help")...)
		assert.Equal(t, 0, code)
		assert.Contains(t, out, "--verify ")
		assert.Contains(t, out, "temporary replication slot")
	}
}
