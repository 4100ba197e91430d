// Command shardmover is the CLI of the shardmover shard rebalancer.
//
// It parses flags, builds the logger and configuration, and calls the
// packages; it holds no logic of its own. Exit codes: 0 success; 1 the
// operation failed (the message says what is left and how to resume or clean
// up); 2 bad input or a refused precondition (nothing was changed).
package main
