// Package scheduler turns cluster state into work. BuildInput makes
// planner input from a cluster's status (live, or a snapshot file for
// what-if planning) and the operator's options; Runner records and runs
// rebalance and drain jobs within concurrency, per-node and bandwidth
// limits, one job per cluster; Daemon is DESIGN.md section 9: one leader
// per cluster (a session advisory lock on the coordinator), resuming
// unfinished jobs, a node watcher that polls the node catalog and, on
// compat clusters, wakes at once on the coordinator's notification
// (metadata.WatchNodes), a settle period before a node-add rebalance, cron
// schedules, the cleanup sweep, and the HTTP endpoints (/metrics, /healthz,
// /readyz, /status).
//
// It imports planner and mover, never the other way round, and reaches the
// catalogs only through metadata. BuildInput checks every option and
// returns errors that match metadata.ErrInvalid, one sentence naming the
// flag that is wrong.
package scheduler
