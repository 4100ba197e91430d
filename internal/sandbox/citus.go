package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/metadata"
)

// ErrNoCitus is returned (wrapped) when a Citus sandbox is asked for and the
// PostgreSQL server has no Citus extension.
var ErrNoCitus = errors.New("the Citus extension is not installed")

// citusSettings are the postgresql.conf lines a Citus sandbox adds to the
// compat defaults (wal_level = logical, prepared transactions, ...).
var citusSettings = map[string]string{
	"shared_preload_libraries": "'citus'",
	// Loopback nodes trust each other: no TLS between them, so
	// CREATE EXTENSION does not switch ssl on with a self-signed
	// certificate as it does under Citus's default sslmode=require.
	"citus.node_conninfo": "'sslmode=disable'",
	// Citus connects to its own node (cleanup, background jobs) by this
	// name; the sandbox listens on 127.0.0.1 only.
	"citus.local_hostname": "'127.0.0.1'",
	// The maintenance daemon and background tasks take worker processes
	// besides the logical replication workers of moves.
	"max_worker_processes": "32",
}

// withCitusFirst puts citus first in a shared_preload_libraries value, as
// Citus requires.
func withCitusFirst(v string) string {
	v = strings.Trim(strings.TrimSpace(v), "'")
	libs := []string{"citus"}
	for _, l := range strings.Split(v, ",") {
		if l = strings.TrimSpace(l); l != "" && l != "citus" {
			libs = append(libs, l)
		}
	}
	return "'" + strings.Join(libs, ",") + "'"
}

// CitusAvailable reports, as nil or an error wrapping ErrNoCitus, whether the
// servers in binDir (empty: discover, as Up does) can load Citus.
func CitusAvailable(binDir string) error {
	bin, err := FindBinDir(binDir)
	if err != nil {
		return err
	}
	lib := filepath.Join(filepath.Dir(bin), "lib")
	if out, err := exec.Command(filepath.Join(bin, "pg_config"), "--pkglibdir").Output(); err == nil {
		lib = strings.TrimSpace(string(out))
	}
	if !fileExists(filepath.Join(lib, "citus.so")) {
		return fmt.Errorf("%w: install Citus 12 or newer built for the PostgreSQL server in %s, so that %s exists (as root, `make deps` installs Citus 13.2.2 for PostgreSQL 15 when ../shared/citus/ holds its archive)",
			ErrNoCitus, bin, filepath.Join(lib, "citus.so"))
	}
	return nil
}

// setupCitus makes the running nodes one Citus cluster: the extension on
// every node, the coordinator registered as group 0, every worker not yet in
// Citus's node catalog added with citus_add_node. It is idempotent.
func (c *Cluster) setupCitus(ctx context.Context) error {
	c.mu.Lock()
	nodes := append([]Node(nil), c.Nodes...)
	c.mu.Unlock()
	for _, n := range nodes {
		if err := execOn(ctx, n, "CREATE EXTENSION IF NOT EXISTS citus"); err != nil {
			return fmt.Errorf("create the citus extension on %s (%s): %w", n.Name, n.Addr(), err)
		}
	}
	coord := nodes[0]
	conn, err := pgx.Connect(ctx, coord.DSN())
	if err != nil {
		return fmt.Errorf("connect to the coordinator %s: %w", coord.Addr(), err)
	}
	defer conn.Close(ctx)
	var workers []metadata.HostPort
	for _, n := range nodes[1:] {
		workers = append(workers, metadata.HostPort{Host: n.Host, Port: n.Port})
	}
	added, err := metadata.JoinCitusCluster(ctx, conn, metadata.HostPort{Host: coord.Host, Port: coord.Port}, workers)
	for _, w := range added {
		c.log.Info("added worker to the Citus cluster", zap.String("addr", net.JoinHostPort(w.Host, strconv.Itoa(w.Port))))
	}
	if err != nil {
		return err
	}
	return nil
}

func execOn(ctx context.Context, n Node, sql string) error {
	conn, err := pgx.Connect(ctx, n.DSN())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}
