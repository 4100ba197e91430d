// Package sandbox starts and stops a local multi-node PostgreSQL cluster on
// loopback, for the demo, end-to-end tests and benchmarks.
//
// Contract:
//
//   - Servers come from the local PostgreSQL binaries: Config.BinDir, else
//     $PG_BINDIR, else `pg_config --bindir`, else /usr/lib/postgresql/<v>/bin.
//     When none is found Up returns ErrNoBinaries with the package to install.
//   - Run as root, every server runs as the unprivileged `postgres` OS user
//     (PostgreSQL refuses to run as root); data directories are chowned to it.
//   - Every node listens on 127.0.0.1 only, trusts loopback connections for
//     user "postgres", and has wal_level = logical, at least 32 replication
//     slots and WAL senders, and 32 prepared transactions. Durability is traded
//     for speed (fsync = off): a sandbox is for tests and demos, never for data
//     that must survive a machine crash.
//   - Node 0 is the coordinator, nodes 1..N are workers. Ports are BasePort,
//     BasePort+1, ... or, with BasePort = 0, free ports picked at start.
//   - A new node's data directory is a copy of one initdb output (user
//     postgres, trust, UTF8, locale C) kept under os.TempDir as
//     shardmover-initdb-<key>, one per binaries, version, options and OS
//     user, made once and shared by every process: it is whole once it is
//     there (initdb writes elsewhere and renames it into place), and never
//     started. A node's copy is put together beside its data directory and
//     renamed into place, so a copy cut short is never taken for one.
//   - The layout is persisted in <Dir>/sandbox.json so that every command (and
//     every process) sees the same cluster. Up is idempotent: it starts what is
//     stopped, removes a stale postmaster.pid left by a crash and never
//     re-initialises an existing data directory.
//   - The sandbox knows nothing of shardmover's catalogs: registering nodes is
//     the caller's job (package metadata).
//   - With Config.Citus the sandbox is a Citus cluster (CitusAvailable says
//     whether the servers can load Citus; ErrNoCitus otherwise): every node
//     also has shared_preload_libraries = 'citus' (first in the list),
//     citus.node_conninfo = 'sslmode=disable' and citus.local_hostname =
//     '127.0.0.1', and the extension; the coordinator is group 0 through
//     citus_set_coordinator_host and every worker, AddNode's too, is added
//     with citus_add_node, which syncs the metadata to it (Citus 11+). The
//     flavor is persisted; plain Up keeps the compat cluster unchanged.
//   - CreateMoverRole makes, on every node, the non-superuser role of
//     docs/privileges.md with exactly its script (moverrole.sql) and gives
//     the application tables to TableOwner, whose member the role becomes;
//     on a compat sandbox the role must then log in with its password.
package sandbox
