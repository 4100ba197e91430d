// Package scheduler will hold the daemon of DESIGN.md section 9: a leader
// lock on the coordinator, a node-add watcher, cron schedules, the job runner
// and the HTTP endpoints (/metrics, /healthz, /readyz, /status).
//
// Status: not built yet (issue 6). It will import planner and mover, never
// the other way round, and reach the catalogs only through metadata.
package scheduler
