package verify

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/metadata"
)

func TestParseGroup(t *testing.T) {
	k, err := ParseGroup("3:14")
	require.NoError(t, err)
	assert.Equal(t, GroupKey{ColocationID: 3, Index: 14}, k)
	for _, bad := range []string{"", "3", "3:", ":1", "a:1", "1:b", "-1:0", "1:-2", "1:2:3", "99999999999:0"} {
		_, err := ParseGroup(bad)
		assert.ErrorIs(t, err, metadata.ErrInvalid, bad)
	}
}

func TestValidate(t *testing.T) {
	g := &GroupKey{1, 0}
	assert.NoError(t, Options{All: true}.Validate())
	assert.NoError(t, Options{ShardID: 5}.Validate())
	assert.NoError(t, Options{Group: g}.Validate())
	for _, o := range []Options{{}, {ShardID: 5, All: true}, {ShardID: 5, Group: g}, {Group: g, All: true}, {ShardID: -1},
		{All: true, BytesPerSecond: -1}, {All: true, MaxKeys: -1}} {
		assert.ErrorIs(t, o.Validate(), metadata.ErrInvalid, "%+v", o)
	}
}

func TestCompareValue(t *testing.T) {
	now := time.Now()
	cases := []struct {
		a, b any
		want int
	}{
		{int64(1), int64(2), -1}, {int32(5), int32(5), 0}, {int16(3), int16(2), 1},
		{"B", "a", -1}, // COLLATE "C": bytes
		{false, true, -1}, {now, now.Add(time.Second), -1},
		{[16]byte{1}, [16]byte{0, 9}, 1}, {[]byte("ab"), []byte("b"), -1}, {1.5, 0.5, 1},
	}
	for _, c := range cases {
		got, err := compareValue(c.a, c.b)
		require.NoError(t, err)
		assert.Equal(t, c.want, got, "%v vs %v", c.a, c.b)
	}
	_, err := compareValue(struct{}{}, struct{}{})
	assert.ErrorIs(t, err, errUnordered)
	_, err = compareValue(int64(1), "1")
	assert.ErrorIs(t, err, errUnordered)
}
