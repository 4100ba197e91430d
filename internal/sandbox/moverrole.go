package sandbox

import (
	"context"
	_ "embed" // moverrole.sql
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/shardmover/shardmover/metadata"
)

// MoverRoleSQL is the script that creates shardmover's least-privilege role
// on one node (docs/privileges.md reproduces it). It is written for psql
// (`psql -v role=... -v password=... -v owner=... -f moverrole.sql`);
// CreateMoverRole runs the same text.
//
//go:embed moverrole.sql
var MoverRoleSQL string

// TableOwner is the role that owns the sandbox's application tables once
// CreateMoverRole ran: a NOLOGIN role, as an application's table owner
// usually is, that the mover's role is a member of.
const TableOwner = "sandbox_owner"

// MoverRole is the login of a least-privilege role made by CreateMoverRole.
type MoverRole struct {
	User     string
	Password string
}

// DSN returns a keyword/value connection string for n as the role. It holds
// the password: give it to a driver, never to a log.
func (r MoverRole) DSN(n Node) string {
	return metadata.ConnSettings{
		"host": n.Host, "port": strconv.Itoa(n.Port), "user": r.User, "password": r.Password,
		"dbname": "postgres", "sslmode": "disable",
	}.String()
}

// CreateMoverRole creates, on every node, the role shardmover needs to run
// moves without being a superuser, with exactly the grants of MoverRoleSQL.
// The sandbox's application tables (every table outside the system schemas
// and shardmover's own) are first given to TableOwner, whose member the role
// becomes. On a compat sandbox the role must log in with its password
// (scram-sha-256, for normal and replication connections), so a test run
// as the role proves that the password reaches every connection; on a Citus
// sandbox, whose nodes connect to each other without passwords, loopback
// stays trusted, and TableOwner may log in and create in public, which
// Citus needs to copy reference tables to a new node. Run it again after
// AddNode or after new tables were created.
func (c *Cluster) CreateMoverRole(ctx context.Context, name, password string) (MoverRole, error) {
	if name == "" || password == "" {
		return MoverRole{}, fmt.Errorf("%w: the mover role needs a name and a password", ErrBadConfig)
	}
	c.mu.Lock()
	nodes := append([]Node(nil), c.Nodes...)
	c.mu.Unlock()
	vars := map[string]string{"role": name, "password": password, "owner": TableOwner}
	for _, n := range nodes {
		if err := c.createMoverRoleOn(ctx, n, vars); err != nil {
			return MoverRole{}, fmt.Errorf("create the mover role on %s (%s): %w", n.Name, n.Addr(), err)
		}
	}
	return MoverRole{User: name, Password: password}, nil
}

func (c *Cluster) createMoverRoleOn(ctx context.Context, n Node, vars map[string]string) error {
	conn, err := pgx.Connect(ctx, n.DSN())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if c.Citus {
		// Shard tables are hidden from pg_class in client sessions.
		if _, err := conn.Exec(ctx, "SET citus.show_shards_for_app_name_prefixes = '*'"); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, "SET citus.enable_ddl_propagation = off"); err != nil {
			return err
		}
	}
	owner := pgx.Identifier{TableOwner}.Sanitize()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1)", TableOwner).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE ROLE "+owner+" NOLOGIN"); err != nil {
			return err
		}
	}
	// The owner creates in its schema, as an application's table owner
	// does (it made its tables there): a move gives it the shards it
	// creates, which PostgreSQL allows only to a role with CREATE on the
	// schema (docs/privileges.md).
	if _, err := conn.Exec(ctx, "GRANT CREATE ON SCHEMA public TO "+owner); err != nil {
		return err
	}
	if c.Citus {
		// Citus copies reference tables to a new node by connecting to
		// it as their owner, who must log in (docs/privileges.md, Citus).
		if _, err := conn.Exec(ctx, "ALTER ROLE "+owner+" LOGIN"); err != nil {
			return err
		}
	}
	rows, err := conn.Query(ctx, `SELECT n.nspname, c.relname FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p')
		  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'shardmover', 'shardmover_catalog', 'citus', 'columnar', 'columnar_internal')
		  AND n.nspname NOT LIKE 'pg\_%'
		  AND pg_catalog.pg_get_userbyid(c.relowner) <> $1
		ORDER BY 1, 2`, TableOwner)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pgx.Identifier, error) {
		var s, t string
		err := r.Scan(&s, &t)
		return pgx.Identifier{s, t}, err
	})
	if err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := conn.Exec(ctx, "ALTER TABLE "+t.Sanitize()+" OWNER TO "+owner); err != nil {
			return fmt.Errorf("give %s to %s: %w", t.Sanitize(), TableOwner, err)
		}
	}
	if err := RunPsqlScript(ctx, conn, MoverRoleSQL, vars); err != nil {
		return err
	}
	if !c.Citus {
		return c.requirePassword(ctx, conn, n, vars["role"])
	}
	return nil
}

// requirePassword makes the role authenticate with scram-sha-256 on
// loopback, for normal and replication connections, ahead of the sandbox's
// trust lines.
func (c *Cluster) requirePassword(ctx context.Context, conn *pgx.Conn, n Node, role string) error {
	p := filepath.Join(n.DataDir, "pg_hba.conf")
	body, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	// pg_hba quotes a user name with double quotes; a name holding one
	// cannot be written there.
	if strings.ContainsAny(role, "\"\n") {
		return fmt.Errorf("%w: role name %q cannot be written to pg_hba.conf", ErrBadConfig, role)
	}
	lines := fmt.Sprintf("host all \"%s\" 127.0.0.1/32 scram-sha-256\nhost replication \"%s\" 127.0.0.1/32 scram-sha-256\n", role, role)
	if strings.Contains(string(body), lines) {
		return nil
	}
	if err := os.WriteFile(p, append([]byte(lines), body...), 0o600); err != nil {
		return err
	}
	if err := c.chown(p); err != nil {
		return err
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_reload_conf()").Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return errors.New("pg_reload_conf() failed")
	}
	return nil
}

var psqlVar = regexp.MustCompile(`:'([a-z_]+)'|:"([a-z_]+)"`)

// RunPsqlScript runs a script written for psql that uses only what
// MoverRoleSQL uses: `--` comment lines, statements ending with `;` at the
// end of a line, `:'var'` (a quoted literal) and `:"var"` (a quoted
// identifier) outside quotes, and `\gexec` (run the query, then each cell
// of its result as a statement). Every statement runs alone.
func RunPsqlScript(ctx context.Context, conn *pgx.Conn, script string, vars map[string]string) error {
	var stmt strings.Builder
	for _, line := range strings.Split(script, "\n") {
		trimmed := strings.TrimSpace(line)
		if stmt.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "--")) {
			continue
		}
		gexec := strings.HasSuffix(trimmed, `\gexec`)
		if gexec {
			line = strings.TrimSuffix(trimmed, `\gexec`)
		}
		stmt.WriteString(line)
		stmt.WriteByte('\n')
		if !gexec && !strings.HasSuffix(trimmed, ";") {
			continue
		}
		sql, err := substitute(stmt.String(), vars)
		stmt.Reset()
		if err != nil {
			return err
		}
		if err := runScriptStatement(ctx, conn, sql, gexec); err != nil {
			return err
		}
	}
	if strings.TrimSpace(stmt.String()) != "" {
		return errors.New("the script ends inside a statement")
	}
	return nil
}

func runScriptStatement(ctx context.Context, conn *pgx.Conn, sql string, gexec bool) error {
	if !gexec {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", firstLine(sql), err)
		}
		return nil
	}
	rows, err := conn.Query(ctx, sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return fmt.Errorf("%s: %w", firstLine(sql), err)
	}
	var generated []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			rows.Close()
			return err
		}
		for _, v := range vals {
			if s, ok := v.(string); ok && s != "" {
				generated = append(generated, s)
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%s: %w", firstLine(sql), err)
	}
	for _, g := range generated {
		if _, err := conn.Exec(ctx, g); err != nil {
			return fmt.Errorf("%s: %w", firstLine(g), err)
		}
	}
	return nil
}

// substitute replaces psql variables. A statement that sets a password is
// never part of an error message (firstLine stops before it).
func substitute(sql string, vars map[string]string) (string, error) {
	var missing string
	out := psqlVar.ReplaceAllStringFunc(sql, func(m string) string {
		sub := psqlVar.FindStringSubmatch(m)
		if sub[1] != "" {
			v, ok := vars[sub[1]]
			if !ok {
				missing = sub[1]
			}
			return "'" + strings.ReplaceAll(v, "'", "''") + "'"
		}
		v, ok := vars[sub[2]]
		if !ok {
			missing = sub[2]
		}
		return pgx.Identifier{v}.Sanitize()
	})
	if missing != "" {
		return "", fmt.Errorf("the script uses the variable %q, which is not set", missing)
	}
	return out, nil
}

// firstLine names a statement in an error without its values: the text up
// to its first variable or literal.
func firstLine(sql string) string {
	s := strings.TrimSpace(sql)
	if i := strings.IndexAny(s, "'\n"); i >= 0 {
		s = s[:i]
	}
	if len(s) > 80 {
		s = s[:80]
	}
	return strings.TrimSpace(s) + " ..."
}
