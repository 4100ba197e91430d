// Package sandboxtest starts throw-away sandbox clusters for tests: free
// loopback ports, a fresh directory, and servers stopped and deleted when the
// test ends. Tests that use it need the PostgreSQL server binaries; they fail
// (never skip) when those are missing, because CI installs them. Citus
// sandboxes (NewCitus) also need the Citus extension: without it a test
// skips with one sentence saying what to install, unless
// SHARDMOVER_REQUIRE_CITUS is set (.ci/run sets it, since make deps installs
// Citus there), in which case it fails. A cluster's directory goes under
// $SHARDMOVER_TEST_DIR when set, else /dev/shm when it has 4 GiB free, else
// the system's temporary directory.
package sandboxtest
