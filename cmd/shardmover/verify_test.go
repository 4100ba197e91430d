package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/verify"
)

// TestVerifyBadInputBeforeConnecting: every refusal is one sentence and exit
// code 2, made before any connection (the coordinator given cannot be
// reached, and no message names it).
func TestVerifyBadInputBeforeConnecting(t *testing.T) {
	coord := "host=127.0.0.1 port=1 user=alice password=hunter2 dbname=x"
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"verify", "--shard", "0"}, "--shard must be a positive shard id"},
		{[]string{"verify", "--shard", "-4"}, "--shard must be a positive shard id"},
		{[]string{"verify", "--shard", "abc"}, `--shard "abc" is not a whole number`},
		{[]string{"verify", "--group", "1"}, "is not a shard group"},
		{[]string{"verify", "--group", "a:b"}, "is not a shard group"},
		{[]string{"verify", "--group", "1:-1"}, "is not a shard group"},
		{[]string{"verify", "--shard", "102008", "--all"}, "exactly one of --shard"},
		{[]string{"verify", "--shard", "102008", "--group", "1:0"}, "exactly one of --shard"},
		{[]string{"verify", "--group", "1:0", "--all"}, "exactly one of --shard"},
		{[]string{"verify", "--throttle", "fast"}, "is not a rate"},
		{[]string{"verify", "--throttle", "0rows/s"}, "is not a rate"},
		{[]string{"verify", "--throttle", "-5MB/s"}, "is not a rate"},
		{[]string{"verify", "extra"}, "verify takes flags only"},
	}
	for _, tc := range cases {
		_, msg, code := run(t, append(tc.args, "--coordinator", coord)...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, msg)
		assert.Contains(t, msg, tc.want, tc.args)
		assert.NotContains(t, msg, "127.0.0.1:1", "%v must be refused before connecting", tc.args)
		assert.NotContains(t, msg, "hunter2")
		assert.NotContains(t, msg, "\n", "one sentence, one line")
	}
}

func TestParseVerifyThrottle(t *testing.T) {
	var o verify.Options
	require.NoError(t, parseVerifyThrottle("20MB/s", &o))
	assert.Equal(t, int64(20e6), o.BytesPerSecond)
	o = verify.Options{}
	require.NoError(t, parseVerifyThrottle("5000rows/s", &o))
	assert.Equal(t, int64(5000), o.RowsPerSecond)
	assert.Zero(t, o.BytesPerSecond)
	o = verify.Options{}
	require.NoError(t, parseVerifyThrottle("", &o))
	assert.Zero(t, o.BytesPerSecond+o.RowsPerSecond)
}

// TestVerifyAfterMove: verify passes right after a move made with the CLI,
// and finds a row changed, deleted and added behind the move's back on the
// target by comparing with the fenced old copy.
func TestVerifyAfterMove(t *testing.T) {
	c, coord, _ := loadedCluster(t, 3, 2, 2)
	ctx := context.Background()
	// The target is any worker that does not hold shard 102008 yet.
	pc, err := pgx.Connect(ctx, coord)
	require.NoError(t, err)
	var holderPort int
	require.NoError(t, pc.QueryRow(ctx, `SELECT n.nodeport FROM shardmover_catalog.pg_dist_placement p
		JOIN shardmover_catalog.pg_dist_node n ON n.groupid = p.groupid WHERE p.shardid = 102008`).Scan(&holderPort))
	pc.Close(ctx)
	target := c.Workers()[0]
	for _, w := range c.Workers() {
		if w.Port != holderPort {
			target = w
		}
	}

	out, msg, code := run(t, "verify", "--coordinator", coord)
	require.Equal(t, 0, code, "%s\n%s", msg, out)
	assert.Contains(t, out, "data: not compared")
	_, msg, code = run(t, "verify", "--shard", "999", "--coordinator", coord)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "there is no shard 999")
	_, msg, code = run(t, "verify", "--group", "77:0", "--coordinator", coord)
	assert.Equal(t, 2, code, msg)
	assert.Contains(t, msg, "there is no shard group 77:0")

	_, msg, code = run(t, "move", "--shard", "102008", "--to", target.Addr(), "--coordinator", coord)
	require.Equal(t, 0, code, msg)

	// The status names the node keeping the old copy, which planning
	// avoids for the group until cleanup drops it.
	out, msg, code = run(t, "status", "-o", "json", "--coordinator", coord)
	require.Equal(t, 0, code, "%s\n%s", msg, out)
	var st metadata.Status
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	var holder int32
	for _, n := range st.Nodes {
		if strings.HasSuffix(n.Addr, fmt.Sprintf(":%d", holderPort)) {
			holder = n.ID
		}
	}
	for _, g := range st.ShardGroups {
		if slices.Contains(g.ShardIDs, 102008) {
			assert.Equal(t, []int32{holder}, g.OldCopyNodes, "group %s", g.ID)
		} else {
			assert.Empty(t, g.OldCopyNodes, "group %s", g.ID)
		}
	}

	out, msg, code = run(t, "verify", "--shard", "102008", "--throttle", "50MB/s", "--coordinator", coord)
	require.Equal(t, 0, code, "%s\n%s", msg, out)
	assert.Contains(t, out, "matches the old copy kept by move 1")
	assert.Contains(t, out, "kept:")
	out, msg, code = run(t, "verify", "--group", "1:0", "-o", "json", "--throttle", "100000rows/s", "--coordinator", coord)
	require.Equal(t, 0, code, "%s\n%s", msg, out)
	var rep verify.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.True(t, rep.OK)
	require.Len(t, rep.Shards, 2, "the group holds a users and an events shard")
	for _, s := range rep.Shards {
		assert.True(t, s.Compared && s.Match, "%+v", s)
		assert.Positive(t, s.Live.Rows)
		assert.Equal(t, s.Live.Checksum, s.Copy.Checksum)
	}

	// Behind the move's back, on the target: change one row, delete one,
	// add one.
	conn, err := pgx.Connect(ctx, target.DSN())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var k1, k2 int64
	require.NoError(t, conn.QueryRow(ctx, "SELECT min(user_id), max(user_id) FROM github_users_102008").Scan(&k1, &k2))
	_, err = conn.Exec(ctx, "UPDATE github_users_102008 SET login = login || 'x' WHERE user_id = $1", k1)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "DELETE FROM github_users_102008 WHERE user_id = $1", k2)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO github_users_102008 (user_id, login, created_at) VALUES (999999999, 'intruder', now())")
	require.NoError(t, err)

	out, msg, code = run(t, "verify", "--shard", "102008", "-o", "json", "--coordinator", coord)
	require.Equal(t, 1, code, "%s\n%s", msg, out)
	rep = verify.Report{}
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.False(t, rep.OK)
	require.Len(t, rep.Shards, 1)
	s := rep.Shards[0]
	assert.True(t, s.Compared)
	assert.False(t, s.Match)
	assert.Equal(t, s.Copy.Rows, s.Live.Rows, "one deleted and one added: same count, the checksum tells")
	assert.Equal(t, []verify.KeyDiff{
		{Key: strconv.FormatInt(k1, 10), What: "changed"},
		{Key: strconv.FormatInt(k2, 10), What: "missing"},
		{Key: "999999999", What: "added"},
	}, s.Differing)
	assert.Contains(t, s.Message, "writes since the move at")

	out, msg, code = run(t, "verify", "--group", "1:0", "--coordinator", coord)
	require.Equal(t, 1, code, "%s\n%s", msg, out)
	assert.Contains(t, out, "FAIL shard 102008")
	assert.Contains(t, out, "changed key ("+strconv.FormatInt(k1, 10)+")")
	assert.Contains(t, out, "missing key ("+strconv.FormatInt(k2, 10)+")")
	assert.Contains(t, out, "added key (999999999)")
	assert.Contains(t, out, "verify: found problems")
	assert.Equal(t, "verify found problems", msg)

	// The deferred cleanup record forgotten: the fenced copy is an orphan.
	cc, err := pgx.Connect(ctx, coord)
	require.NoError(t, err)
	defer cc.Close(ctx)
	_, err = cc.Exec(ctx, "DELETE FROM shardmover.cleanup WHERE move_id = 1 AND policy = 'deferred'")
	require.NoError(t, err)
	out, msg, code = run(t, "verify", "--all", "--coordinator", coord)
	require.Equal(t, 1, code, "%s\n%s", msg, out)
	// The fenced copy is on the move's source, wherever placement put it.
	var srcHost string
	var srcPort int
	require.NoError(t, cc.QueryRow(ctx, `SELECT n.nodename, n.nodeport FROM shardmover.moves m
		JOIN shardmover_catalog.pg_dist_node n ON n.groupid = m.source_group WHERE m.id = 1`).Scan(&srcHost, &srcPort))
	assert.Contains(t, out, "FAIL orphan: public.github_users_102008_moved_1 on "+net.JoinHostPort(srcHost, strconv.Itoa(srcPort)))
	assert.Contains(t, out, "move 1 is done and no deferred cleanup record names it")
}
