// Package pgbench runs PostgreSQL's own client, pgbench, against a Citus
// cluster and reads what it reports, for the tests and benchmarks that
// hold shardmover to a client it did not write.
//
// Contract:
//
//   - InitCitus builds the layout on a Citus coordinator: `pgbench -i` at a
//     scale, then pgbench_accounts and pgbench_history distributed by aid,
//     colocated, in the given number of shards (history gets a hid
//     bigserial and the primary key (aid, hid): a move refuses a table
//     without a replica identity), pgbench_branches and pgbench_tellers
//     as reference tables. Script is the transaction run on it: pgbench's
//     TPC-B-like one reduced to the two distributed tables, an UPDATE of
//     one account and the INSERT of its history row, so each transaction
//     touches exactly one shard group; WriteScript puts it in a file for
//     -f.
//   - Start runs one pgbench process entering the cluster through one node
//     (any node of a metadata-synced Citus cluster routes): the script,
//     the given clients on one thread, no rate limit, a query mode (-M),
//     and a log line per transaction (-l) under LogDir. It never retries
//     (pgbench 15's default of one try): a transaction that gets a
//     serialization or deadlock error is logged failed and counted in
//     the summary, and any other error aborts its client, which runs no
//     more transactions (and pgbench exits with status 2). So every error
//     a move surfaces to an application shows, and none is hidden by a
//     retry.
//   - Stop ends a process with SIGALRM, as its own -T does: pgbench 15
//     implements -T with alarm(2), and the handler only sets the flag its
//     clients check between transactions, so every client finishes the
//     transaction it is in, the log files are flushed and closed, and the
//     summary is printed. It has no handler for SIGINT or SIGTERM: they
//     kill it, without a summary, with log lines cut mid-way and
//     transactions committed but never logged. Its -T (Options.Limit) is
//     only a bound; a computed -T would have to guess how long the
//     operation under test takes. Stop waits at most the bound it is
//     given, then kills it and says so. A process whose context ends is
//     killed.
//   - ParseSummary reads the summary pgbench prints (the transactions it
//     counted as processed and as failed, and every line reporting an
//     error or an aborted client); ParseLog and ReadLogs read its
//     per-transaction logs into Txn values: when each transaction ended
//     (the log's epoch and microseconds), its latency, or that it failed.
//     Every transaction pgbench finished is logged, so the lines of a run
//     are its processed plus its failed transactions. Both parsers take
//     pgbench 15's formats (testdata holds real output) and refuse a log
//     line they do not understand.
//   - Stats, TPS, Ended and Span compute from those transactions: the 99th
//     percentile (nearest rank) and the slowest latency of the
//     transactions that did not fail, and the transactions per second that
//     did not fail and ended in a window [from, to). A latency is pgbench's
//     own "time": the elapsed time of one run of the script as the client
//     measured it, any wait on a lock included; Span gives when the first
//     and the last of them ended.
//   - CheckBalances reads the database's side: pgbench_history's row
//     count (each transaction pgbench counted inserts one row, so more
//     rows than transactions is a transaction pgbench saw fail that
//     committed, or one applied twice, and fewer is a committed one lost),
//     and the accounts whose balance is not the sum of their history's
//     deltas (an UPDATE and its INSERT must commit together, once).
//
// It builds, runs and reads; it judges nothing: the caller decides what a
// figure must be (e2e's TestPgbenchCitus, scheduler's
// BenchmarkCitusPgbench).
package pgbench
