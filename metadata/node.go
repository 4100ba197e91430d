package metadata

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// AddNodeOptions tunes AddNode.
type AddNodeOptions struct {
	// ShouldHaveShards is stored in pg_dist_node (default true via
	// DefaultAddNodeOptions).
	ShouldHaveShards bool
}

// DefaultAddNodeOptions returns options for an ordinary worker.
func DefaultAddNodeOptions() AddNodeOptions { return AddNodeOptions{ShouldHaveShards: true} }

// ParseAddr parses host:port. It wraps ErrInvalid on bad input.
func ParseAddr(addr string) (string, int, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return "", 0, invalidf("%q is not host:port (for example 127.0.0.1:9702)", addr)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, invalidf("%q has no valid port (1-65535)", addr)
	}
	return host, port, nil
}

// AddNode registers a worker in a compat cluster after checking that it can
// be reached and has wal_level = logical; it installs the catalogs first when
// they are missing. A node already registered is returned as it is, with
// ErrExists.
func (c *Catalog) AddNode(ctx context.Context, host string, port int, opts AddNodeOptions) (Node, error) {
	if c.flavor == Citus {
		return Node{}, invalidf("this is a Citus cluster; add nodes with SELECT citus_add_node('%s', %d)", host, port)
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	if err := c.Install(ctx); err != nil {
		return Node{}, err
	}
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return Node{}, err
	}
	for _, n := range nodes {
		if n.Host == host && n.Port == port {
			return n, fmt.Errorf("%w: %s is already registered as node %d", ErrExists, addr, n.ID)
		}
	}
	conn, err := c.ConnectNode(ctx, host, port)
	if err != nil {
		return Node{}, invalidf("%s", err.Error())
	}
	defer conn.Close(ctx)
	var walLevel string
	if err := conn.QueryRow(ctx, "SELECT current_setting('wal_level')").Scan(&walLevel); err != nil {
		return Node{}, fmt.Errorf("read wal_level on %s: %w", addr, err)
	}
	if walLevel != "logical" {
		return Node{}, invalidf("%s has wal_level = %s; set wal_level = logical in its postgresql.conf and restart it", addr, walLevel)
	}
	var n Node
	err = c.tx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `INSERT INTO shardmover_catalog.pg_dist_node (nodename, nodeport, shouldhaveshards)
			VALUES ($1, $2, $3)
			RETURNING nodeid, groupid, nodename, nodeport, noderack, hasmetadata, isactive,
				noderole::text, nodecluster::text, metadatasynced, shouldhaveshards`, host, port, opts.ShouldHaveShards)
		if err != nil {
			return err
		}
		n, err = pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) (Node, error) {
			var n Node
			err := r.Scan(&n.ID, &n.GroupID, &n.Host, &n.Port, &n.Rack, &n.HasMetadata, &n.IsActive,
				&n.Role, &n.Cluster, &n.MetadataSynced, &n.ShouldHaveShards)
			return n, err
		})
		return err
	})
	if err != nil {
		return Node{}, fmt.Errorf("register %s: %w", addr, err)
	}
	return n, nil
}

// ErrExists marks something that is already there.
var ErrExists = errors.New("already exists")

// Nodes lists pg_dist_node ordered by group.
func (c *Catalog) Nodes(ctx context.Context) ([]Node, error) {
	if err := c.requireInstalled(ctx); err != nil {
		return nil, err
	}
	return readNodes(ctx, c.pool, c.t("pg_dist_node"))
}

// NodeByAddr finds a registered node by host:port.
func (c *Catalog) NodeByAddr(ctx context.Context, addr string) (Node, error) {
	host, port, err := ParseAddr(addr)
	if err != nil {
		return Node{}, err
	}
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return Node{}, err
	}
	for _, n := range nodes {
		if n.Host == host && n.Port == port {
			return n, nil
		}
	}
	return Node{}, fmt.Errorf("%w: no node %s is registered; `shardmover node list` shows the registered nodes", ErrNotFound, addr)
}

// SetShouldHaveShards sets pg_dist_node.shouldhaveshards of a node. On
// Citus it goes through Citus's own citus_set_node_property, as Citus's
// citus_drain_node does before it moves the node's shards away (Citus
// propagates the change to every metadata node).
func (c *Catalog) SetShouldHaveShards(ctx context.Context, nodeID int32, v bool) error {
	if c.flavor == Citus {
		tag, err := c.pool.Exec(ctx, `SELECT pg_catalog.citus_set_node_property(nodename, nodeport, 'shouldhaveshards', $2)
			FROM pg_catalog.pg_dist_node WHERE nodeid = $1`, nodeID, v)
		if err != nil {
			return fmt.Errorf("citus_set_node_property(shouldhaveshards = %t) of node %d: %w", v, nodeID, err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("%w: node %d", ErrNotFound, nodeID)
		}
		return nil
	}
	return c.tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "UPDATE shardmover_catalog.pg_dist_node SET shouldhaveshards = $2 WHERE nodeid = $1", nodeID, v)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("%w: node %d", ErrNotFound, nodeID)
		}
		return nil
	})
}

// HostPort names a server by its address.
type HostPort struct {
	Host string
	Port int
}

// JoinCitusCluster makes the servers one Citus cluster through conn, a
// session on the coordinator that already has the citus extension: the
// coordinator is registered as group 0 (citus_set_coordinator_host) and
// every worker not yet in Citus's node catalog is added (citus_add_node,
// which syncs metadata to it). It is idempotent, and returns the workers it
// added. Only test clusters (internal/sandbox) use it; operators add nodes
// to a real Citus cluster with Citus's own functions.
func JoinCitusCluster(ctx context.Context, conn *pgx.Conn, coordinator HostPort, workers []HostPort) ([]HostPort, error) {
	var registered bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_node WHERE groupid = 0 AND nodename = $1 AND nodeport = $2)`,
		coordinator.Host, coordinator.Port).Scan(&registered); err != nil {
		return nil, fmt.Errorf("read Citus's nodes on the coordinator: %w", err)
	}
	if !registered {
		if _, err := conn.Exec(ctx, "SELECT citus_set_coordinator_host($1, $2)", coordinator.Host, coordinator.Port); err != nil {
			return nil, fmt.Errorf("citus_set_coordinator_host(%s:%d): %w", coordinator.Host, coordinator.Port, err)
		}
	}
	var added []HostPort
	for _, w := range workers {
		var known bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_node WHERE nodename = $1 AND nodeport = $2)`,
			w.Host, w.Port).Scan(&known); err != nil {
			return added, fmt.Errorf("read Citus's nodes on the coordinator: %w", err)
		}
		if known {
			continue
		}
		if _, err := conn.Exec(ctx, "SELECT citus_add_node($1, $2)", w.Host, w.Port); err != nil {
			return added, fmt.Errorf("citus_add_node(%s:%d): %w", w.Host, w.Port, err)
		}
		added = append(added, w)
	}
	return added, nil
}
