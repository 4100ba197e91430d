// Package metadata is the only package that reads or writes the pg_dist_*
// catalogs and shardmover's journal.
//
// A Catalog is opened on the coordinator. It detects the cluster's flavor
// (citus when pg_extension lists citus, compat otherwise; never configured by
// hand) and names every catalog through that flavor, so each query reads the
// same columns in both: pg_catalog.pg_dist_* for citus, shardmover_catalog.pg_dist_*
// (Citus 13's exact table names, column names and types) for compat.
//
// Contract:
//
//   - Install creates the compat catalogs (and InstallJournal the journal);
//     running either again changes nothing, and once shardmover.installed
//     records this version's statements it runs none of them, so it takes
//     no lock a writer of the catalogs or the journal holds.
//   - Snapshot returns one consistent view of nodes, distributed tables,
//     colocation groups, shards with hash ranges, placements and shard groups,
//     read in a single REPEATABLE READ transaction; sizes are then measured on
//     each node with pg_total_relation_size.
//   - Writes (AddNode, CreateDistributedTable) check their input first and
//     change nothing when it is wrong; such errors wrap ErrInvalid and read as
//     one sentence saying what to do.
//   - Hash ranges and hash functions agree bit for bit with PostgreSQL and
//     Citus: N shards split the int32 space evenly, and a value belongs to the
//     shard whose range holds hashint4/hashint8/hashtext of it.
//   - Connections to nodes take host and port from pg_dist_node and every
//     other parameter from the coordinator's connection string, overridable
//     with NodeConninfo. Errors and logs name nodes by host:port only; no
//     password or full connection string is ever printed.
//   - Table DDL (ddl.go) is built from catalog parts: ReadTableDDL resolves
//     a table by schema and name (a pgx.Identifier, never dotted text) and
//     reads columns (type with typmod, collation, NOT NULL, default, stored
//     generated expression, identity with its sequence options and
//     position), PRIMARY KEY, UNIQUE, CHECK and EXCLUDE constraints (whole
//     pg_get_constraintdef output), indexes no constraint owns (the text of
//     pg_get_indexdef after an exact prefix built from quote_ident of the
//     names, refused when it does not start so; never a search in the text)
//     and the replica identity, in one batch with an empty search_path so
//     names outside pg_catalog come qualified. Foreign keys, triggers,
//     policies, grants, invalid indexes and defaults that read a sequence
//     are not copied. RunDDL runs each statement through pgsql.ExecOne in a
//     transaction of its own with SET LOCAL statement_timeout = 0, so a
//     crafted name can never start a second statement and a node's
//     statement_timeout cannot kill an index build. A move target's identity
//     columns are BY DEFAULT until the cutover runs FinishStatements (the
//     source's kind and sequence position, read under its lock); Diff, run
//     by the cutover on both definitions, ignores only that kind and the
//     positions. A new shard's constraint and index names are
//     <name>_<shardid>; when that is longer than 63 bytes, the name is cut
//     on a UTF-8 boundary and a hash of the whole name goes before the
//     suffix, so names stay valid and distinct.
//   - On compat clusters a statement trigger on the node catalog NOTIFYs
//     NodeChannel; WatchNodes turns that into wake-ups (never on Citus,
//     whose catalog is not ours: callers poll as well).
//   - On Citus (citus.go; Citus 12 or later, refused otherwise at Open):
//     every node session runs with the settings Citus's own shard transfers
//     use (shards visible, changes to them allowed, DDL not propagated);
//     BlockCitusWrites blocks Citus-routed writes to a shard group (on a
//     move's target, before the writes take their snapshot);
//     UpdatePlacements flips a node's copy of the placements through
//     Citus's own function inside the caller's transaction; the decision
//     (OpenDecision, Decision.BlockWrites, Decision.Commit) flips
//     the coordinator's and records the old shards in Citus's deferred
//     cleanup; CitusBusy, CitusDefaultStrategy and EnsureReferenceTables
//     read and prepare what a Citus move needs.
package metadata
