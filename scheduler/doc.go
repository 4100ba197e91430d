// Package scheduler turns cluster state into work. BuildInput makes
// planner input from a cluster's status (live, or a snapshot file for
// what-if planning) and the operator's options; Runner records and runs
// rebalance and drain jobs within concurrency, per-node and bandwidth
// limits, one job per cluster; Daemon is docs/design.md section 9. With
// no strategy named, ApplyClusterStrategy makes a Citus cluster's plan
// follow Citus's default rebalance strategy from its catalog (thresholds,
// base cost, custom cost, capacity and allowed-on-node functions), combined
// with the operator's placement rules (rules.go).
//
// LiveStatus is the status every live plan starts from (plan, rebalance,
// drain, the daemon): each node's real capacity (1 on compat, the default
// Citus strategy's capacity function on Citus) and, with --strategy
// by_load, each shard group's load, measured by metadata.MeasureLoad over
// PlanOptions.LoadWindow (30 s by default; BuildInput refuses a window
// that is not positive, before anything connects): pg_stat_user_tables of
// every shard table is read on its node at the start and the end of the
// window, one query per node per sample, all nodes at once, and a group's
// load is (4 × written rows + read rows) per second summed over its
// tables. On Citus (no by_load strategy of its own) the same statistics
// are read on the workers' shard tables. A named strategy on Citus weighs
// every node 1, as Citus's built-in strategies do.
//
// Every live plan starts from metadata.Catalog.MeasuredSnapshot, which
// names the nodes it could not measure (stopped, unreachable, refusing
// the node credentials). While there is one, planning refuses with
// ErrUnmeasured (exit code 2 from the CLI; the daemon logs and skips the
// round), whatever the strategy; with PlanOptions.AllowUnmeasured,
// BuildLiveInput plans such nodes as inactive ones: their groups stay and
// no move goes to or from them (unmeasured.go). A drain refuses before it
// marks its node.
//
// Daemon leadership is a lease with a fencing token (metadata/leader.go):
// the leader holds a session advisory lock on the coordinator and, right
// after taking it, bumps the epoch in shardmover.leader on the lock's own
// session. Every Poll (at least every second) it checks, on that session
// and within a bounded time, that the coordinator (pg_locks) still shows it
// holding the lock and that its epoch is current; the session has an
// idle_session_timeout a little longer than that, so the coordinator frees
// the lock of a leader that stopped checking (cut off, frozen) even when no
// connection breaks. When a check fails the leader reports leader 0 and
// state "lost", stops every leader loop (watch, cron, sweep, job runner; a
// cutover in progress finishes first), releases the lock, and competes
// again. Jobs the daemon creates carry its epoch and are recorded only
// while it is current (metadata.ErrNotLeader otherwise); moves are fenced
// by their own move leases in mover.
//
// At the start of every term the leader adopts every unfinished job (it
// takes the job's leader_epoch) and resumes it; while it leads, jobs of its
// term that stopped early (connection errors) are run again with backoff.
// The node watcher polls the node catalog and, on compat clusters, wakes at
// once on the coordinator's notification (metadata.WatchNodes); it starts
// from the nodes the last leader accounted for (recorded in the journal
// whenever no rebalance is owed), so a node added while no daemon led is
// rebalanced onto; a settle period precedes a node-add rebalance, and a
// failed one is tried again with backoff.
//
// Every daemon, leader or not, refreshes /metrics (moves by phase, in one
// GROUP BY query; the recorded epoch) and /status from the journal every
// Poll; Start refuses a coordinator that is not a cluster's
// (metadata.ErrNotCluster) before it serves or creates anything. /readyz
// answers 200 with {"state":"leader"} or {"state":"standby"},
// and 503 while the coordinator is unreachable or after the lock was lost.
// shardmover_leader_changes_total counts this daemon's leadership changes.
//
// Schedules (ParseSchedule) are checked before anything connects: not a
// cron expression, never firing (0 0 30 2 *) and sub-second (@every 500ms)
// schedules are refused with a sentence. They follow the wall clock of
// --timezone; a time skipped by a daylight saving gap runs right after the
// gap instead of skipping the day (ScheduleHelp).
//
// It imports planner and mover, never the other way round, and reaches the
// catalogs only through metadata. BuildInput checks every option and
// returns errors that match metadata.ErrInvalid, one sentence naming the
// flag that is wrong.
package scheduler
