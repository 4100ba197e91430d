// Package scheduler turns cluster state into work: it builds planner input
// from a cluster's status (live, or a snapshot file for what-if planning)
// and the operator's options, and (issue 6) will hold the daemon of
// DESIGN.md section 9: a leader lock on the coordinator, a node-add watcher,
// cron schedules, the job runner and the HTTP endpoints.
//
// It imports planner and mover, never the other way round, and reaches the
// catalogs only through metadata. BuildInput checks every option and
// returns errors that match metadata.ErrInvalid, one sentence naming the
// flag that is wrong.
package scheduler
