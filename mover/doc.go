// Package mover will run one shard-group move as a persisted, resumable
// state machine (DESIGN.md section 5): scheduled, preflight, setup, copying,
// indexing, catching_up, cutover, cleanup, then done, failed or cancelled.
//
// Status: not built yet (issue 5). It will use replication for the data and
// metadata for the journal and the placement flip.
package mover
