package metadata

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// ErrUnreachable marks a server that could not be connected to.
var ErrUnreachable = errors.New("unreachable")

// Config opens a Catalog.
type Config struct {
	// Coordinator is the coordinator's connection string (keyword/value or URL).
	Coordinator string
	// NodeConninfo adds or overrides parameters for connections to other
	// nodes ("sslmode=require user=x").
	NodeConninfo string
	// ConnectTimeout bounds each connection attempt (default 5s).
	ConnectTimeout time.Duration
	// Logger receives debug lines; nil means none.
	Logger *zap.Logger
}

// Catalog reads and writes the cluster's metadata on the coordinator.
type Catalog struct {
	pool     *pgxpool.Pool
	coord    ConnSettings
	nodeOver ConnSettings
	flavor   Flavor
	log      *zap.Logger
	timeout  time.Duration
}

const compatSchema = "shardmover_catalog"

// Open connects to the coordinator and detects the flavor.
func Open(ctx context.Context, cfg Config) (*Catalog, error) {
	coord, err := ParseConnString(cfg.Coordinator)
	if err != nil {
		return nil, fmt.Errorf("--coordinator: %w", err)
	}
	over, err := ParseConnString(cfg.NodeConninfo)
	if err != nil {
		return nil, fmt.Errorf("--node-conninfo: %w", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	c := &Catalog{coord: coord, nodeOver: over, log: cfg.Logger, timeout: cfg.ConnectTimeout}
	pcfg, err := pgxpool.ParseConfig(c.withTimeout(coord).String())
	if err != nil {
		return nil, invalidf("the coordinator connection string is not valid: %s", redact(err))
	}
	pcfg.MaxConns = 8
	pcfg.ConnConfig.RuntimeParams["application_name"] = "shardmover"
	// The journal's writes are decisions others act on at once (a cutover
	// decision is followed by COMMIT PREPARED on the source): they must be
	// durable when acknowledged, whatever the server's synchronous_commit.
	pcfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect to coordinator: %w", err)
	}
	c.pool = pool
	var hasCitus bool
	err = pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')").Scan(&hasCitus)
	if err != nil {
		pool.Close()
		return nil, unreachable("coordinator", pcfg.ConnConfig.Host, pcfg.ConnConfig.Port, err)
	}
	c.flavor = Compat
	if hasCitus {
		c.flavor = Citus
		if err := checkCitusVersion(ctx, pool); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return c, nil
}

// Close releases the coordinator connections.
func (c *Catalog) Close() { c.pool.Close() }

// Flavor returns the detected flavor.
func (c *Catalog) Flavor() Flavor { return c.flavor }

// Pool returns the coordinator pool (for packages that must run their own
// statements on the coordinator, never on pg_dist_* tables).
func (c *Catalog) Pool() *pgxpool.Pool { return c.pool }

// CoordinatorAddr is the coordinator's host:port.
func (c *Catalog) CoordinatorAddr() string {
	cfg := c.pool.Config().ConnConfig
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// t names a catalog table for the flavor.
func (c *Catalog) t(name string) string {
	if c.flavor == Citus {
		return "pg_catalog." + name
	}
	return compatSchema + "." + name
}

func (c *Catalog) withTimeout(s ConnSettings) ConnSettings {
	if _, ok := s["connect_timeout"]; ok {
		return s
	}
	secs := int(c.timeout / time.Second)
	if secs < 1 {
		secs = 1
	}
	return s.Merge(ConnSettings{"connect_timeout": strconv.Itoa(secs)})
}

// NodeSettings derives the connection settings of a node: host and port
// from the catalog, everything else from the coordinator's settings, then
// the NodeConninfo overrides.
//
// On Citus every session also runs with citusSessionOptions: Citus hides
// shard tables from pg_class and refuses DDL on them in ordinary client
// sessions, and a mover reads, creates, renames and drops shard tables.
func (c *Catalog) NodeSettings(host string, port int) ConnSettings {
	s := c.coord.Merge(ConnSettings{"host": host, "port": strconv.Itoa(port)})
	delete(s, "hostaddr")
	s = c.withTimeout(s.Merge(c.nodeOver))
	if c.flavor == Citus {
		s["options"] = strings.TrimSpace(s["options"] + " " + citusSessionOptions)
	}
	return s
}

// citusSessionOptions are the settings of a mover's sessions on Citus
// nodes, those Citus's own shard transfers run with: shards visible in the
// catalogs (citus.show_shards_for_app_name_prefixes), changes to them
// allowed (citus.enable_manual_changes_to_shards), and DDL kept to the
// node it runs on (citus.enable_ddl_propagation = off: a shard table is
// one node's business, and Citus refuses propagated DDL from a worker).
const citusSessionOptions = "-c citus.show_shards_for_app_name_prefixes=* -c citus.enable_manual_changes_to_shards=on -c citus.enable_ddl_propagation=off"

// ConnectNode opens one connection to host:port with the node settings.
func (c *Catalog) ConnectNode(ctx context.Context, host string, port int) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(c.NodeSettings(host, port).String())
	if err != nil {
		return nil, invalidf("node connection settings for %s are not valid: %s", net.JoinHostPort(host, strconv.Itoa(port)), redact(err))
	}
	cfg.RuntimeParams["application_name"] = "shardmover"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, unreachable("node", host, uint16(port), err)
	}
	return conn, nil
}

// unreachable words a connection failure without the connection string.
func unreachable(what, host string, port uint16, err error) error {
	addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
	reason, answered := connectFailure(err)
	if answered {
		// Also a failed password (28P01): the server answered.
		return &unreachableError{reason: reason,
			msg: fmt.Sprintf("%v: %s %s refused the connection: %s", ErrUnreachable, what, addr, reason)}
	}
	hint := "check that it is running and that --coordinator points to it"
	if what != "coordinator" {
		hint = "check that it is running and reachable from here"
	}
	return &unreachableError{reason: reason,
		msg: fmt.Sprintf("%v: cannot reach the %s at %s (%s); %s", ErrUnreachable, what, addr, reason, hint)}
}

// unreachableError is a server that could not be connected to: it matches
// ErrUnreachable, and keeps in a few words why (connectFailure) for
// messages that name many servers at once.
type unreachableError struct{ msg, reason string }

func (e *unreachableError) Error() string        { return e.msg }
func (e *unreachableError) Is(target error) bool { return target == ErrUnreachable }

// connectFailure says in a few words why a connection failed, never with
// the connection string: the server's refusal with its SQLSTATE when one
// answered (a failed password among them, answered is then true), else
// why by the error's type, never by its text.
func connectFailure(err error) (reason string, answered bool) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return fmt.Sprintf("%s (SQLSTATE %s)", pgErr.Message, pgErr.Code), true
	}
	reason = "no server answered"
	var ne net.Error
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		reason = "the connection timed out"
	case errors.Is(err, syscall.ECONNREFUSED):
		reason = "connection refused"
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		reason = "unknown host"
	}
	return reason, false
}

// failureReason is why err happened in a few words, for a message that
// names a node next to it: an unreachable node's reason (connectFailure),
// else the error's text.
func failureReason(err error) string {
	var u *unreachableError
	if errors.As(err, &u) {
		return u.reason
	}
	return err.Error()
}

// redact keeps the first clause of a parse error, which names the problem but
// not the connection string.
func redact(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}

// tx runs fn in a coordinator transaction that first takes shardmover's
// metadata advisory lock, so catalog writers never interleave.
func (c *Catalog) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", metadataLockKey); err != nil {
			return fmt.Errorf("take metadata lock: %w", err)
		}
		return fn(tx)
	})
}

// metadataLockKey is the advisory lock serialising catalog writes
// ("shardmvr" read as an int64 would overflow; this is a fixed arbitrary key).
const metadataLockKey int64 = 0x5348_4d56_0001
