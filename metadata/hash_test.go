package metadata_test

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
)

// TestHashesMatchServer compares the Go hash functions with the server's own
// hashint2/hashint4/hashint8/hashtext on thousands of values.
func TestHashesMatchServer(t *testing.T) {
	c := sandboxtest.New(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.Coordinator().DSN())
	require.NoError(t, err)
	defer conn.Close(ctx)

	r := rand.New(rand.NewPCG(1, 2))
	ints8 := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, math.MaxInt32, math.MinInt32,
		math.MaxInt32 + 1, math.MinInt32 - 1, 1 << 40, -(1 << 40), 102027}
	for i := 0; i < 3000; i++ {
		ints8 = append(ints8, int64(r.Uint64()), int64(r.IntN(1_000_000))-500_000)
	}
	ints4 := []int32{0, 1, -1, math.MaxInt32, math.MinInt32}
	for i := 0; i < 3000; i++ {
		ints4 = append(ints4, int32(r.Uint32()))
	}
	ints2 := []int16{0, 1, -1, math.MaxInt16, math.MinInt16, 12345, -12345}
	texts := []string{"", "a", "ab", "abc", "abcd", "hello world", "github_events", "ünïcødé", "日本語のテキスト",
		"emoji 🐘🚀", strings.Repeat("x", 11), strings.Repeat("y", 12), strings.Repeat("z", 13), strings.Repeat("long", 500)}
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 -_/äöüßéèçñ漢字🙂"
	runes := []rune(alphabet)
	for i := 0; i < 3000; i++ {
		n := r.IntN(40)
		var b strings.Builder
		for j := 0; j < n; j++ {
			b.WriteRune(runes[r.IntN(len(runes))])
		}
		texts = append(texts, b.String())
	}

	var got8 []int32
	require.NoError(t, conn.QueryRow(ctx, "SELECT array_agg(hashint8(v) ORDER BY o) FROM unnest($1::bigint[]) WITH ORDINALITY AS u(v, o)", ints8).Scan(&got8))
	for i, v := range ints8 {
		require.Equal(t, got8[i], metadata.HashInt8(v), "hashint8(%d)", v)
	}
	var got4 []int32
	require.NoError(t, conn.QueryRow(ctx, "SELECT array_agg(hashint4(v) ORDER BY o) FROM unnest($1::int[]) WITH ORDINALITY AS u(v, o)", ints4).Scan(&got4))
	for i, v := range ints4 {
		require.Equal(t, got4[i], metadata.HashInt4(v), "hashint4(%d)", v)
	}
	var got2 []int32
	require.NoError(t, conn.QueryRow(ctx, "SELECT array_agg(hashint2(v) ORDER BY o) FROM unnest($1::smallint[]) WITH ORDINALITY AS u(v, o)", ints2).Scan(&got2))
	for i, v := range ints2 {
		require.Equal(t, got2[i], metadata.HashInt2(v), "hashint2(%d)", v)
	}
	var gotT []int32
	require.NoError(t, conn.QueryRow(ctx, "SELECT array_agg(hashtext(v) ORDER BY o) FROM unnest($1::text[]) WITH ORDINALITY AS u(v, o)", texts).Scan(&gotT))
	for i, v := range texts {
		require.Equal(t, gotT[i], metadata.HashText(v), "hashtext(%q)", v)
	}
}

func TestHashRangesCoverInt32(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 32, 1000, 65536} {
		t.Run("", func(t *testing.T) {
			rs, err := metadata.HashRanges(n)
			require.NoError(t, err)
			require.Len(t, rs, n)
			assert.Equal(t, int32(math.MinInt32), rs[0].Min)
			assert.Equal(t, int32(math.MaxInt32), rs[n-1].Max)
			for i := range rs {
				require.LessOrEqual(t, rs[i].Min, rs[i].Max, "shard %d of %d is empty", i, n)
				if i > 0 {
					require.Equal(t, int64(rs[i-1].Max)+1, int64(rs[i].Min), "gap or overlap between %d and %d of %d", i-1, i, n)
				}
			}
		})
	}
	_, err := metadata.HashRanges(0)
	require.ErrorIs(t, err, metadata.ErrInvalid)
}

// Citus's 32-shard ranges start with these bounds (shardminvalue/maxvalue of
// a default create_distributed_table).
func TestHashRangesMatchCitus(t *testing.T) {
	rs, err := metadata.HashRanges(32)
	require.NoError(t, err)
	assert.Equal(t, metadata.Range{Min: -2147483648, Max: -2013265921}, rs[0])
	assert.Equal(t, metadata.Range{Min: -2013265920, Max: -1879048193}, rs[1])
	assert.Equal(t, metadata.Range{Min: 2013265920, Max: 2147483647}, rs[31])
}

func TestPartkeyRoundTrip(t *testing.T) {
	n, err := metadata.ParsePartkey("{VAR :varno 1 :varattno 7 :vartype 20 :vartypmod -1 :varcollid 0 :varnullingrels (b) :varlevelsup 0 :varnosyn 1 :varattnosyn 7 :location -1}")
	require.NoError(t, err)
	assert.Equal(t, 7, n)
	_, err = metadata.ParsePartkey("{CONST}")
	assert.Error(t, err)
}
