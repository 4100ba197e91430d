// Package workload generates GitHub-like data and runs a routed application
// workload against a sharded cluster, keeping a ledger of every acknowledged
// write so that a checker can prove nothing was lost or applied twice.
//
// Contract:
//
//   - Generator is deterministic: the same seed gives the same users and
//     events, byte for byte. Activity is skewed (a Zipf distribution: a few
//     users produce most events) and payloads are 0.5 to 2 KB of JSON.
//   - Router is the compat client of docs/design.md section 7: it hashes the
//     distribution value, finds the shard's placement in a cached metadata
//     snapshot, runs the statement on that node, and on SQLSTATE 42P01
//     (undefined_table) refreshes the snapshot and retries. It never writes
//     to a placement the metadata does not name at the time of the retry.
//   - Run drives inserts, updates and deletes from several clients. Each
//     client owns the rows it inserts, so the order of writes to one row is
//     known; a write whose outcome is unknown (an error after sending) is
//     recorded as in doubt, and its row is not touched again.
//   - Check reads every shard from the placement metadata names and proves:
//     every acknowledged insert is present once, in the right shard, with its
//     last acknowledged value; every acknowledged delete is absent; in-doubt
//     rows are in one of their two possible states. Any other state is a
//     violation, listed by key.
package workload
