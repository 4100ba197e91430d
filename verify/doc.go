// Package verify checks shardmover's work: the catalogs against themselves
// and the nodes (metadata.VerifyCatalog), and the data of a shard against
// another copy of it. It reads only; it never changes a catalog, a journal
// row or a table. It uses metadata for the catalogs, the journal and node
// connections, and touches no catalog table itself.
//
// Contract:
//
//   - Run takes exactly one selection: a shard (ShardID), a shard group
//     (ColocationID:Index) or All. The catalog checks always cover the whole
//     cluster: a broken placement anywhere is worth knowing about whatever
//     was asked. The data comparison runs only for an explicit shard or
//     group: All checks the catalogs and compares no data (see "Old copies"
//     below for why).
//   - Report.OK is false when any catalog finding is a problem or any
//     compared shard differs; kept fenced copies and the copies of
//     unfinished moves are listed as information and do not count.
//   - A selection naming a shard or group the catalogs do not have is an
//     error wrapping metadata.ErrNotFound, returned before any data is read.
//
// Objects. The catalog checks include each placement's objects
// (metadata.FindingObject): its triggers, foreign keys, policies, extended
// statistics, storage parameters, access method and row-level security are
// compared with those of the other shards of its table, read on every node
// in one batch, names and definitions without the shard's own _<shardid>
// suffix. An object that at least half of a table's shards have and one
// lacks, one that fewer than half have, or a definition that differs from
// the most common one is a problem naming the shard, its node and the
// object. --all checks them too: a moved shard that lost its foreign keys
// is as wrong as a missing placement.
//
// Which other copy. A shard has one placement; the only other copy of its
// data shardmover knows of is the old, fenced table a finished move left on
// its previous node (<shard>_moved_<moveid>, metadata.FencedName), kept
// until its deferred cleanup record expires. Verify finds it through the
// journal: the newest move in phase done that carried the shard to the node
// its placement names and whose deferred cleanup record still names the
// fenced table. A shard with no such copy is reported as not compared.
//
// Old copies. The fenced copy froze at the move's cutover; the live table
// goes on taking writes. A difference between them is therefore exactly
// what verify must find when someone changed the target behind the move's
// back, and also what any write since the cutover produces. Verify cannot
// tell the two apart, so it compares only when asked for a shard or a group
// (an operator checking a move just made, before writes resume or on a
// quiet table), reports a difference as a problem, and says in its message
// when the move happened and that writes since then also explain it.
//
// At one replication position. The strict comparison a move makes before
// its cutover (mover.Config.Verify, --verify) uses CompareTx: the caller
// opens one REPEATABLE READ transaction on each side, already holding its
// snapshot, and CompareTx compares the tables in them with the same
// checksum, throttle and differing-keys merge (keys listed as the target
// sees them: changed, missing, or only on the target). The mover takes
// the source's snapshot from a temporary logical slot's exported snapshot
// and the target's while its applier is held at that slot's consistent
// point (replication.Stream.Hold), so both sides show exactly the source
// transactions that commit before that point and any difference is one
// the move would carry over: it refuses the cutover.
//
// Checksum. Each side is read in one REPEATABLE READ, READ ONLY
// transaction, in batches of heap pages (a TID range scan, WHERE ctid >=
// '(p,0)' AND ctid < '(p+n,0)'), so that --throttle can sleep between
// batches while every batch reads the same snapshot. Per row it computes
// hashtextextended(row::text, 0), a 64-bit hash of the row's text form, and
// per table the row count, the sum of the hashes (as numeric, so it never
// overflows) and their bit_xor. The three are order-independent (heap
// order differs between copies) and combine across batches; sum and xor
// together make a cancelling collision far less likely than either alone.
// md5 over sorted rows was not chosen: sorting a whole shard costs a sort of
// the table on the node (memory or temp files) and cannot be cut into
// throttled batches. The row's text form depends on session settings, so
// both sides read with the same fixed DateStyle, IntervalStyle, TimeZone,
// extra_float_digits and bytea_output. Columns must be in the same order on
// both sides, which holds for a move's copies (the target is created from
// the source's catalog).
//
// Differing keys. When the counts or checksums differ, both sides are read
// again ordered by primary key (text columns with COLLATE "C", so that the
// order is the bytes' order, the one Go compares in), with the key values
// and the row hash per row, and merged in key order; the first MaxKeys keys
// whose row is missing on one side or hashes differently are listed. A key
// of a type the merge cannot order in Go (anything but integers, floats,
// text, booleans, timestamps, dates, uuids and bytea), or a table without a
// primary key, is reported as a difference without keys.
//
// Throttle. BytesPerSecond paces the page batches by their size in bytes
// (pages × block size), RowsPerSecond by the rows they held; the key pass
// waits every 1000 rows. Both go through internal/ratelimit. A long
// throttled read holds one snapshot open on the node for its duration,
// which holds back vacuum there: that is the price of a consistent read.
package verify
