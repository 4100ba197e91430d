package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/verify"
)

// TestCitusVerifyObjectsCLI: on a Citus table with a trigger, extended
// statistics, a policy, a fillfactor and a foreign key to a colocated
// table, a group moved by shardmover has the same objects as the shards
// that stayed (verify passes), and a shard that then loses its trigger
// behind the cluster's back fails verify, which names the shard, the node
// and the trigger, in text and in JSON.
func TestCitusVerifyObjectsCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, cat := sandboxtest.NewCitus(t, 2)
	coord := c.Coordinator().DSN()
	conn, err := pgx.Connect(ctx, coord)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, stmt := range []string{
		`CREATE TABLE users (user_id bigint PRIMARY KEY, name text)`,
		`SELECT create_distributed_table('users', 'user_id', shard_count := 4, colocate_with := 'none')`,
		`CREATE TABLE events (user_id bigint NOT NULL, event_id bigint NOT NULL, a int, b int, tenant text,
			PRIMARY KEY (user_id, event_id)) WITH (fillfactor = 70)`,
		`SELECT create_distributed_table('events', 'user_id', colocate_with := 'users')`,
		`ALTER TABLE events ADD CONSTRAINT events_user_fk FOREIGN KEY (user_id) REFERENCES users (user_id) ON DELETE CASCADE`,
		`CREATE STATISTICS events_ab ON a, b FROM events`,
		`CREATE FUNCTION events_touch() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN NEW.b := coalesce(NEW.b, 0); RETURN NEW; END$$`,
		`SET citus.enable_unsafe_triggers = on`,
		`CREATE TRIGGER events_touch BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION events_touch()`,
		`ALTER TABLE events ENABLE ROW LEVEL SECURITY`,
		`CREATE POLICY tenant_rows ON events USING (tenant = current_user)`,
		`INSERT INTO users SELECT g, 'u' || g FROM generate_series(1, 200) g`,
		`INSERT INTO events SELECT 1 + g % 200, g, g, g, 'x' FROM generate_series(1, 2000) g`,
	} {
		_, err := conn.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	cl, err := cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
	require.NoError(t, err)
	events, err := cl.Table("events")
	require.NoError(t, err)
	moved := cl.TableShards(events)[0]
	p, _ := cl.PlacementOf(moved.ID)
	var to metadata.Node
	for _, n := range cl.Nodes {
		if !n.IsCoordinator() && n.GroupID != p.GroupID {
			to = n
		}
	}
	_, msg, code := run(t, "move", "--shard", fmt.Sprint(moved.ID), "--to", to.Addr(), "--coordinator", coord)
	require.Equal(t, 0, code, msg)
	out, msg, code := run(t, "verify", "--coordinator", coord)
	require.Equal(t, 0, code, "the moved shard has every object its siblings have\n%s\n%s", msg, out)
	assert.Contains(t, out, "verify: everything matches")

	// The moved shard loses its trigger on its new node.
	w, err := cat.ConnectNode(ctx, to.Host, to.Port)
	require.NoError(t, err)
	defer w.Close(ctx)
	d, err := metadata.ReadTableDDL(ctx, w, moved.Ident())
	require.NoError(t, err)
	require.Len(t, d.Triggers, 1)
	_, err = w.Exec(ctx, `DROP TRIGGER `+pgx.Identifier{d.Triggers[0].Name}.Sanitize()+` ON `+moved.Ident().Sanitize())
	require.NoError(t, err)

	out, msg, code = run(t, "verify", "--coordinator", coord)
	assert.Equal(t, 1, code, "%s\n%s", msg, out)
	want := fmt.Sprintf(`FAIL object: public.%s on %s has no trigger "events_touch", which 3 of 4 shards of events have`, moved.Name(), to.Addr())
	assert.Contains(t, out, want)
	assert.Contains(t, out, "verify: found problems")

	out, _, code = run(t, "verify", "-o", "json", "--coordinator", coord)
	assert.Equal(t, 1, code)
	var rep verify.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.False(t, rep.OK)
	problems := rep.Catalog.Problems()
	require.Len(t, problems, 1, "%+v", problems)
	assert.Equal(t, metadata.Finding{Kind: "object", Problem: true, ShardID: moved.ID, Node: to.Addr(), Table: "public." + moved.Name(),
		Object: `trigger "events_touch"`, Message: problems[0].Message}, problems[0])
}
