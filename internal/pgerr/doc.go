// Package pgerr is the one classifier of errors met talking to PostgreSQL,
// and the one cap on how long an error may keep repeating.
//
// Contract:
//
//   - Errors are classified by SQLSTATE, the Code of a *pgconn.PgError found
//     anywhere in the chain (errors.As, so wrapped and joined errors count),
//     never by message text. Code returns "" when there is no server error.
//   - Named conditions: IsLockTimeout (55P03 lock_not_available, what
//     lock_timeout raises), IsUndefinedObject (42704, e.g. no such prepared
//     transaction, slot or origin), IsUndefinedTable (42P01).
//   - IsConnection: the connection failed, not the statement. Either the
//     server said so (class 08 connection_exception, 57P01 admin_shutdown,
//     57P02 crash_shutdown, 57P03 cannot_connect_now), or pgconn had already
//     closed the connection (pgconn.ErrConnClosed), or there is no server
//     error at all and the error is neither a context's cancellation or
//     deadline nor one pgconn reports as safe to retry (a dial, TLS, read or
//     write failure).
//   - IsUnknownOutcome: the error may have come after the server committed
//     (no server error, and pgconn does not report it safe to retry: the
//     request may have been sent). A server error always means the
//     statement failed.
//   - Permanent errors are those no retry cures. Two sets exist today and
//     are kept apart so that behaviour does not change:
//     IsPermanent, for a move's steps: classes 22 data_exception, 23
//     integrity_constraint_violation, 28 invalid_authorization_specification,
//     42 syntax_error_or_access_rule_violation, and 53100 disk_full
//     (recopying would fill the disk again);
//     IsPermanentStreaming, for the replication stream: classes 22, 23, 42,
//     0A feature_not_supported and XX internal_error. The stream retries 28
//     and 53100 (the stream's own retry cap bounds them).
//     Every other SQLSTATE (40 serialization and deadlock, 53 other
//     resource shortages, 55 object in use and lock timeouts, 57 operator
//     intervention, 08 connection) and every non-server error is retryable.
//   - RetryCap bounds how long one error may keep repeating: its clock starts
//     at the first failure of a streak and stops at Reset, which the caller
//     calls when it makes progress (what progress is stays the caller's).
//   - Package-specific sentinels (replication.ErrPermanent, the mover's own
//     permanent errors, metadata.ErrInvalid for refused input) are tested by
//     their packages on top of this classifier. Refused input, in every
//     package, is metadata.Invalidf's error type, matching metadata.ErrInvalid.
package pgerr
