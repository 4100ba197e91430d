// Package sandboxtest starts throw-away sandbox clusters for tests: free
// loopback ports, a fresh directory, and servers stopped and deleted when the
// test ends. Tests that use it need the PostgreSQL server binaries; they fail
// (never skip) when those are missing, because CI installs them.
package sandboxtest
