package pgerr

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATEs with a name of their own.
const (
	LockNotAvailable = "55P03" // lock_timeout expired, or NOWAIT
	UndefinedObject  = "42704"
	UndefinedTable   = "42P01"
	DiskFull         = "53100"
)

// Code returns the SQLSTATE of the server error in err's chain, or "".
func Code(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// class returns the SQLSTATE's class (its first two characters), or "".
func class(code string) string {
	if len(code) < 2 {
		return ""
	}
	return code[:2]
}

// IsLockTimeout reports SQLSTATE 55P03 lock_not_available.
func IsLockTimeout(err error) bool { return Code(err) == LockNotAvailable }

// IsUndefinedObject reports SQLSTATE 42704 undefined_object.
func IsUndefinedObject(err error) bool { return Code(err) == UndefinedObject }

// IsUndefinedTable reports SQLSTATE 42P01 undefined_table.
func IsUndefinedTable(err error) bool { return Code(err) == UndefinedTable }

// IsConnection reports a failure of the connection rather than of the
// statement: SQLSTATE class 08 or 57P01..57P03, a connection pgconn had
// already closed, or no server error at all and neither a context's end nor
// an error pgconn reports safe to retry.
func IsConnection(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; code {
		case "57P01", "57P02", "57P03":
			return true
		}
		return class(pgErr.Code) == "08"
	}
	if errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	return !pgconn.SafeToRetry(err)
}

// IsUnknownOutcome reports whether err may have come after the server
// committed (a broken connection during COMMIT): no server error, and not
// one pgconn reports safe to retry.
func IsUnknownOutcome(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return false
	}
	return !pgconn.SafeToRetry(err)
}

// IsPermanent reports a server error that no retry of a move's step cures:
// classes 22, 23, 28 and 42, and 53100 disk_full.
func IsPermanent(err error) bool {
	code := Code(err)
	if code == DiskFull {
		return true
	}
	switch class(code) {
	case "22", "23", "28", "42":
		return true
	}
	return false
}

// IsPermanentStreaming reports a server error that no retry of the
// replication stream cures: classes 22, 23, 42, 0A and XX.
func IsPermanentStreaming(err error) bool {
	switch class(Code(err)) {
	case "22", "23", "42", "0A", "XX":
		return true
	}
	return false
}

// RetryCap bounds how long one error may keep repeating. The zero value
// with Max set is ready: Fail starts the clock at the first failure of a
// streak, Reset ends the streak.
type RetryCap struct {
	Max   time.Duration
	since time.Time
}

// Fail records a failure and reports whether the streak it belongs to has
// lasted longer than Max: the caller gives up.
func (c *RetryCap) Fail() (exceeded bool) {
	if c.since.IsZero() {
		c.since = time.Now()
	}
	return time.Since(c.since) > c.Max
}

// Reset ends the streak: the next failure starts the clock again.
func (c *RetryCap) Reset() { c.since = time.Time{} }

// Failing reports whether a streak is under way.
func (c *RetryCap) Failing() bool { return !c.since.IsZero() }

// Elapsed is how long the current streak has lasted, 0 without one.
func (c *RetryCap) Elapsed() time.Duration {
	if c.since.IsZero() {
		return 0
	}
	return time.Since(c.since)
}
