package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/mover"
)

func TestMaxRetainedWALFlag(t *testing.T) {
	for raw, want := range map[string]int64{"10GB": 10e9, "512MiB": 512 << 20, "4mb": 4e6, "1048576": 1 << 20} {
		w := maxWALFlag{raw: raw}
		require.NoError(t, w.resolve(), raw)
		assert.Equal(t, want, w.apply(mover.DefaultConfig()).MaxRetainedWAL, raw)
	}
	assert.Equal(t, int64(10e9), mover.DefaultConfig().MaxRetainedWAL, "the default matches the flag's 10GB")
}

// A bad --max-retained-wal is refused with exit code 2 before any
// connection is made (the coordinator given does not exist).
func TestMaxRetainedWALBadInput(t *testing.T) {
	coord := []string{"--coordinator", "127.0.0.1:1"}
	for _, cmd := range [][]string{
		{"move", "--shard", "102008", "--to", "127.0.0.1:2"},
		{"rebalance"},
		{"drain", "--node", "127.0.0.1:2"},
		{"daemon"},
	} {
		for _, bad := range []string{"lots", "-5MB", "0"} {
			args := append(append(append([]string{}, cmd...), coord...), "--max-retained-wal", bad)
			_, msg, code := run(t, args...)
			assert.Equal(t, 2, code, "%v: %s", args, msg)
			assert.Contains(t, msg, `--max-retained-wal "`+bad+`" is not a size`, args)
		}
	}
}
