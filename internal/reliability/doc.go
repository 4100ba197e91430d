// Package reliability records what the fault-injection tests prove and
// turns the records into RELIABILITY.md.
//
// Contract:
//
//   - A test records one outcome per fault it injected, or per bad input it
//     tried, with Append: the fault's family and kind, where it was
//     injected (a phase, a cutover step, a network message, a command),
//     whether the case passed, and the figures its checks produced: writes
//     acknowledged, lost, duplicated and in doubt by the ledger, replication
//     artifacts left behind, the longest acknowledged write (the write
//     pause clients saw), the exit code of a command.
//   - Append writes one JSON line to the file named by SHARDMOVER_RELIABILITY_OUT
//     (created if missing, appended to with one write per record, so test
//     binaries running at once do not interleave lines). When the variable
//     is unset it does nothing and returns nil: ordinary test runs are
//     unaffected. Enabled says whether it is set, so a test can skip the
//     extra reads that feed a record.
//   - Read parses the lines back; Render writes RELIABILITY.md from them: a
//     table per family, every figure taken from a record, with the date, the
//     Go and PostgreSQL versions the records name, and the command that ran
//     the tests. Nothing in the document is typed by hand; a case that failed
//     says FAILED. `go run ./internal/reliability/cmd/reliability` is the
//     generator; `make reliability` runs the fault tests with the variable
//     set and then the generator.
//   - The package imports only the standard library: tests of any package
//     can record.
package reliability
