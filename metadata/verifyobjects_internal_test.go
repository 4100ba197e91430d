package metadata

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStripShardID(t *testing.T) {
	assert.Equal(t, `CREATE TRIGGER "T ""x""" BEFORE INSERT ON public.t FOR EACH ROW`,
		stripShardID(`CREATE TRIGGER "T ""x""_102008" BEFORE INSERT ON public.t_102008 FOR EACH ROW`, 102008))
	assert.Equal(t, "t_1020080 t_10200 t", stripShardID("t_1020080 t_10200 t_102008", 102008), "only the id itself, whole")
	assert.Equal(t, "users", stripDigitsSuffix("users_102010"))
	for _, keep := range []string{"users", "users_", "users_x1", "_"} {
		assert.Equal(t, keep, stripDigitsSuffix(keep))
	}
}

// TestCompareObjects: an object on at least half of a table's shards is
// expected on all (a tie counts as expected), one on fewer is one too many,
// and the most common definition is the expected one.
func TestCompareObjects(t *testing.T) {
	shard := func(id int64, items map[objectKey]string) shardObjects {
		return shardObjects{shard: Shard{ID: id, Schema: "public", Table: "t"}, node: "n:1", items: items}
	}
	trg := objectKey{objTrigger, "audit"}
	am := objectKey{kind: objAccessMethod}
	got := compareObjects("t", []shardObjects{
		shard(2, map[objectKey]string{am: "heap"}),
		shard(1, map[objectKey]string{am: "heap", trg: "CREATE TRIGGER audit"}),
	})
	require.Len(t, got, 1, "a tie: the shard without the trigger lost it")
	assert.Equal(t, int64(2), got[0].ShardID)
	assert.Equal(t, `public.t_2 on n:1 has no trigger "audit", which 1 of 2 shards of t have: CREATE TRIGGER audit`, got[0].Message)

	got = compareObjects("t", []shardObjects{
		shard(1, map[objectKey]string{am: "heap", trg: "A"}),
		shard(2, map[objectKey]string{am: "heap"}),
		shard(3, map[objectKey]string{am: "columnar", trg: "B"}),
		shard(4, map[objectKey]string{am: "heap", trg: "A"}),
		shard(5, map[objectKey]string{am: "heap", trg: "A", {objPolicy, "p"}: "P"}),
	})
	var msgs []string
	for _, f := range got {
		assert.True(t, f.Problem)
		msgs = append(msgs, f.Message)
	}
	assert.Equal(t, []string{
		`public.t_2 on n:1 has no trigger "audit", which 4 of 5 shards of t have: A`,
		`public.t_3 on n:1 has access method columnar where 4 of 5 shards of t have access method heap`,
		`public.t_3 on n:1 has trigger "audit" as B where 3 of 5 shards of t have A`,
		`public.t_5 on n:1 has policy "p", which only 1 of 5 shards of t have: P`,
	}, msgs)
	assert.Empty(t, compareObjects("t", []shardObjects{shard(1, map[objectKey]string{trg: "A"})}), "one shard: nothing to compare with")
}
