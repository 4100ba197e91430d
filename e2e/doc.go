// Package e2e holds end-to-end tests: real multi-node sandbox clusters, the
// shardmover binary's commands, and a routed workload whose ledger proves
// that no acknowledged write is lost.
package e2e
