// Package workload generates GitHub-like data and runs an application
// workload against a sharded cluster, keeping a ledger of every acknowledged
// write so that a checker can prove nothing was lost or applied twice.
//
// One API serves both flavors. NewRouter reads the catalog's flavor (from
// its snapshot) and returns a Router that either routes the statements
// itself (compat) or lets Citus route them (citus); Load, Run, Start/Stop,
// Check and NextRunID take that Router, Setup takes the catalog, and
// RunOptions mean the same on both. Statements name Target.Rel, which is the shard table on
// compat and the distributed table on Citus.
//
// Contract:
//
//   - Generator is deterministic: the same seed gives the same users and
//     events, byte for byte. Activity is skewed (a Zipf distribution: a few
//     users produce most events) and payloads are 0.5 to 2 KB of JSON.
//   - Router on compat is the client of docs/design.md section 7: it hashes
//     the distribution value, finds the shard's placement in a cached
//     metadata snapshot, runs the statement on that node, and on SQLSTATE
//     42P01 (undefined_table) refreshes the snapshot and retries. It never
//     writes to a placement the metadata does not name at the time of the
//     retry.
//   - Router on Citus does no routing: each statement is plain SQL on
//     github_events, sent to the client's entry node (Router.Entry): even
//     clients use the coordinator, odd clients the metadata-synced workers
//     in turn, so half of the clients go through the coordinator and half
//     through workers (any node of a metadata-synced cluster takes DML).
//     Route and Do, which have no client, use the coordinator. It never
//     retries: an application on Citus does not, so every error a
//     statement gets is the workload's error (a failed write).
//   - Setup creates the tables and distributes them by user_id, colocated:
//     with shardmover's CreateDistributedTable on compat, with Citus's
//     create_distributed_table (CitusDistribute) on Citus. Load copies the
//     generated rows into the shards on compat and into the distributed
//     tables through the coordinator on Citus; the same seed gives the same
//     rows on both.
//   - Run drives inserts, updates and deletes from several clients. Each
//     client owns the rows it inserts, so the order of writes to one row is
//     known; a write whose outcome is unknown (an error after sending) is
//     recorded as in doubt, and its row is not touched again. An error the
//     server answered means nothing committed, except on Citus for the
//     SQLSTATEs about Citus's own hop to the shard's node (class 08, XX000,
//     57014, 57P01-57P03, 40003), which are in doubt too. Errors are counted
//     by SQLSTATE (or "connection", "context") on both flavors.
//     RunResult.Via counts acknowledged writes by the node they were sent to.
//   - Check proves: every acknowledged insert is present once, in the right
//     shard, with its last acknowledged value; every acknowledged delete is
//     absent; in-doubt rows are in one of their two possible states. On
//     compat it reads every shard at the placement fresh metadata names. On
//     Citus it reads through the coordinator (Citus routes to the current
//     placements) and compares that with the ledger; it also reads every
//     shard at the placement Citus's placement catalog names, and each row
//     carries Citus's get_shard_id_for_distribution_column: a row Citus
//     returns that is not at its placement (or differs there), one at a
//     placement that Citus does not return, or one whose Citus shard is not
//     the shard whose hash range holds it is misplaced. Any other state is
//     a violation, listed by key. Check expects the workload stopped.
//   - Each run's rows have their own event id range (RunBase(RunID));
//     NextRunID finds the first run id no earlier run on the cluster used.
package workload
