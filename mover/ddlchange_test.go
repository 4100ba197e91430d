package mover_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// nodeOfGroup returns the node of group g.
func nodeOfGroup(t testing.TB, c *cluster, g int32) metadata.Node {
	t.Helper()
	nodes, err := c.cat.Nodes(context.Background())
	require.NoError(t, err)
	for _, n := range nodes {
		if n.GroupID == g {
			return n
		}
	}
	t.Fatalf("no node in group %d", g)
	return metadata.Node{}
}

// execOnShards runs sql (with %s for each shard table) on node n.
func execOnShards(ctx context.Context, c *cluster, n metadata.Node, m metadata.Move, sql string) error {
	conn, err := c.cat.ConnectNode(ctx, n.Host, n.Port)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, name := range m.ShardTables {
		ident, err := metadata.ParseQualifiedName(name)
		if err != nil {
			return err
		}
		stmt := strings.ReplaceAll(sql, "%s", ident.Sanitize())
		stmt = strings.ReplaceAll(stmt, "%n", pgx.Identifier{"extra_" + ident[1]}.Sanitize())
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// TestSchemaChangeNoChangeCarries: DDL on the source's shards after the
// target's tables and indexes were built, and no later row change that
// would show it to the applier (no workload on the group). Each change must
// fail the move at the cutover, which compares both definitions under its
// lock, and leave the group serving on its source; before, the move
// exited 0 with the index, the constraint or the column missing on the
// target.
func TestSchemaChangeNoChangeCarries(t *testing.T) {
	c := newCluster(t, 8, 100, 1000)
	target := c.newNode(t)
	for i, ddl := range []struct{ sql, want string }{
		{"CREATE INDEX %n ON %s (created_at)", "index"},
		{"ALTER TABLE %s ADD CONSTRAINT %n CHECK (created_at IS NOT NULL) NOT VALID", "constraint"},
		{"ALTER TABLE %s ADD COLUMN extra int", "column"},
		{"ALTER TABLE %s REPLICA IDENTITY FULL", "replica identity"},
	} {
		t.Run(ddl.want, func(t *testing.T) {
			ctx := context.Background()
			shard, source := groupShard(t, c, i)
			src := nodeOfGroup(t, c, source)
			cfg := testConfig(t)
			var m metadata.Move
			cfg.AfterPhase = func(_ int64, p mover.Phase) error {
				if p != mover.Indexing {
					return nil
				}
				return execOnShards(ctx, c, src, m, ddl.sql)
			}
			eng := mover.New(cfg, c.cat)
			m = scheduleMove(t, eng, shard, target)
			err := eng.Run(ctx, m.ID)
			require.Error(t, err, "a schema change that nothing replicates must fail the move")
			t.Logf("move failed as it should: %v", err)
			assert.Contains(t, err.Error(), "changed on the source during the move")
			assert.Contains(t, err.Error(), ddl.want)
			assert.False(t, errors.Is(err, metadata.ErrInvalid), "a failure mid-move is not a refused request")
			got, err := c.cat.Move(ctx, m.ID)
			require.NoError(t, err)
			assert.Equal(t, "failed", string(got.Phase))
			_, group := groupShard(t, c, i)
			assert.Equal(t, source, group, "the group stays on its source")
			require.NoError(t, execOnShards(ctx, c, src, m, "SELECT 1 FROM %s LIMIT 1"), "the source's shards keep their names")
		})
	}
}

// TestCopyThatKeepsFailingEnds: a copy that fails every time (here a
// trigger, always enabled, on every table created on the target raises an
// error, as a full disk would) used to be retried forever: the step back from copying to
// setup restarted the retry clock. It must end after RetryFor, and a real
// disk_full (53100) at once; both leave the group on its source.
func TestCopyThatKeepsFailingEnds(t *testing.T) {
	c := newCluster(t, 4, 100, 1000)
	target := c.newNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := c.cat.ConnectNode(ctx, target.Host, target.Port)
	require.NoError(t, err)
	defer conn.Close(ctx)
	arm := func(code string) {
		for _, stmt := range []string{
			`CREATE OR REPLACE FUNCTION public.fail_copy() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN RAISE EXCEPTION 'no space left (test)' USING ERRCODE = '` + code + `'; END $$`,
			`CREATE OR REPLACE FUNCTION public.arm_fail_copy() RETURNS event_trigger LANGUAGE plpgsql AS $$
				DECLARE r record;
				BEGIN
					FOR r IN SELECT * FROM pg_event_trigger_ddl_commands() WHERE command_tag = 'CREATE TABLE' LOOP
						EXECUTE format('CREATE TRIGGER fail_copy BEFORE INSERT ON %s FOR EACH ROW EXECUTE FUNCTION public.fail_copy()', r.object_identity);
						EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER fail_copy', r.object_identity);
					END LOOP;
				END $$`,
			`DROP EVENT TRIGGER IF EXISTS arm_fail_copy`,
			`CREATE EVENT TRIGGER arm_fail_copy ON ddl_command_end WHEN TAG IN ('CREATE TABLE') EXECUTE FUNCTION public.arm_fail_copy()`,
			`ALTER EVENT TRIGGER arm_fail_copy ENABLE ALWAYS`,
		} {
			_, err := conn.Exec(ctx, stmt)
			require.NoError(t, err)
		}
	}
	for i, tc := range []struct {
		code     string
		retryFor time.Duration
		want     string
	}{
		{"P0001", 3 * time.Second, "gave up after 3s"},
		{"53100", time.Hour, "no space left"},
	} {
		t.Run(tc.code, func(t *testing.T) {
			arm(tc.code)
			shard, source := groupShard(t, c, i)
			cfg := testConfig(t)
			cfg.RetryFor = tc.retryFor
			eng := mover.New(cfg, c.cat)
			m := scheduleMove(t, eng, shard, target)
			err := eng.Run(ctx, m.ID)
			require.Error(t, err)
			require.NoError(t, ctx.Err(), "the move was still retrying when the test gave up")
			assert.Contains(t, err.Error(), tc.want)
			got, err := c.cat.Move(ctx, m.ID)
			require.NoError(t, err)
			assert.Equal(t, "failed", string(got.Phase))
			_, group := groupShard(t, c, i)
			assert.Equal(t, source, group, "the group stays on its source")
		})
	}
}

// TestRewriteDuringMoveFailsTheMove: a change on the source's shards
// during the move that leaves their definition as it was, but not their
// rows, is not decoded: a rewrite (ALTER COLUMN ... TYPE ... USING) and a
// column dropped and added again under its name. Each must fail the move
// at the cutover with a sentence, the group staying on its source. (Both
// ended `done`: the placement kept the old values, the source had the
// new ones, and every row differed.)
func TestRewriteDuringMoveFailsTheMove(t *testing.T) {
	c := newCluster(t, 8, 100, 1000)
	target := c.newNode(t)
	for i, tc := range []struct {
		name       string
		before     []string // after preflight, before setup reads the source
		during     []string // after indexing: the target's tables are built
		wantReason string
	}{
		{"rewrite", nil,
			[]string{"ALTER TABLE %s ALTER COLUMN created_at TYPE timestamp USING created_at + interval '1 day'"},
			"was rewritten on the source"},
		{"column dropped and added", []string{"ALTER TABLE %s ADD COLUMN big text", "UPDATE %s SET big = 'old'"},
			[]string{"ALTER TABLE %s DROP COLUMN big", "ALTER TABLE %s ADD COLUMN big text"},
			"dropped and added again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			shard, source := groupShard(t, c, i)
			src := nodeOfGroup(t, c, source)
			cfg := testConfig(t)
			var m metadata.Move
			cfg.AfterPhase = func(_ int64, p mover.Phase) error {
				var stmts []string
				switch p {
				case mover.Preflight:
					stmts = tc.before
				case mover.Indexing:
					stmts = tc.during
				}
				for _, sql := range stmts {
					if err := execOnShards(ctx, c, src, m, sql); err != nil {
						return err
					}
				}
				return nil
			}
			eng := mover.New(cfg, c.cat)
			m = scheduleMove(t, eng, shard, target)
			err := eng.Run(ctx, m.ID)
			require.Error(t, err, "a change that nothing replicates must fail the move")
			t.Logf("move failed as it should: %v", err)
			assert.Contains(t, err.Error(), tc.wantReason)
			got, err := c.cat.Move(ctx, m.ID)
			require.NoError(t, err)
			assert.Equal(t, "failed", string(got.Phase))
			_, group := groupShard(t, c, i)
			assert.Equal(t, source, group, "the group stays on its source")
		})
	}
}
