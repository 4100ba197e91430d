package pgerr_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"

	"github.com/shardmover/shardmover/internal/pgerr"
)

func pgErr(code string) error { return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "m"} }

func wrap(err error) error { return fmt.Errorf("step: %w", fmt.Errorf("inner: %w", err)) }

// safe is an error pgconn reports as safe to retry (sent nothing).
type safe struct{}

func (safe) Error() string     { return "conn busy" }
func (safe) SafeToRetry() bool { return true }

func TestClassify(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	type want struct {
		code                                      string
		lock, undefObj, undefTable, conn, unknown bool
		permanent, permanentStreaming             bool
	}
	cases := []struct {
		name string
		err  error
		want want
	}{
		{"nil", nil, want{}},
		{"plain", errors.New("boom"), want{conn: true, unknown: true}},
		{"lock timeout", pgErr("55P03"), want{code: "55P03", lock: true}},
		{"lock timeout wrapped", wrap(pgErr("55P03")), want{code: "55P03", lock: true}},
		{"lock timeout joined", errors.Join(errors.New("other"), pgErr("55P03")), want{code: "55P03", lock: true}},
		{"undefined object", wrap(pgErr("42704")), want{code: "42704", undefObj: true, permanent: true, permanentStreaming: true}},
		{"undefined table", wrap(pgErr("42P01")), want{code: "42P01", undefTable: true, permanent: true, permanentStreaming: true}},
		{"syntax", pgErr("42601"), want{code: "42601", permanent: true, permanentStreaming: true}},
		{"privilege", pgErr("42501"), want{code: "42501", permanent: true, permanentStreaming: true}},
		{"data exception", pgErr("22023"), want{code: "22023", permanent: true, permanentStreaming: true}},
		{"unique violation", wrap(pgErr("23505")), want{code: "23505", permanent: true, permanentStreaming: true}},
		{"password", pgErr("28P01"), want{code: "28P01", permanent: true}},
		{"disk full", wrap(pgErr("53100")), want{code: "53100", permanent: true}},
		{"out of memory", pgErr("53200"), want{code: "53200"}},
		{"too many connections", pgErr("53300"), want{code: "53300"}},
		{"feature not supported", pgErr("0A000"), want{code: "0A000", permanentStreaming: true}},
		{"internal error", pgErr("XX000"), want{code: "XX000", permanentStreaming: true}},
		{"serialization", pgErr("40001"), want{code: "40001"}},
		{"deadlock", pgErr("40P01"), want{code: "40P01"}},
		{"object in use", pgErr("55006"), want{code: "55006"}},
		{"admin shutdown", wrap(pgErr("57P01")), want{code: "57P01", conn: true}},
		{"crash shutdown", pgErr("57P02"), want{code: "57P02", conn: true}},
		{"cannot connect now", pgErr("57P03"), want{code: "57P03", conn: true}},
		{"query canceled", pgErr("57014"), want{code: "57014"}},
		{"connection exception", pgErr("08006"), want{code: "08006", conn: true}},
		{"empty code", pgErr(""), want{}},
		{"one-letter code", pgErr("4"), want{code: "4"}},
		{"dial refused", wrap(refused), want{conn: true, unknown: true}},
		{"conn closed", fmt.Errorf("x: %w", pgconn.ErrConnClosed), want{conn: true, unknown: true}},
		{"safe to retry", wrap(safe{}), want{}},
		{"cancelled", wrap(context.Canceled), want{unknown: true}},
		{"deadline", context.DeadlineExceeded, want{unknown: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := want{
				code:               pgerr.Code(c.err),
				lock:               pgerr.IsLockTimeout(c.err),
				undefObj:           pgerr.IsUndefinedObject(c.err),
				undefTable:         pgerr.IsUndefinedTable(c.err),
				conn:               pgerr.IsConnection(c.err),
				unknown:            pgerr.IsUnknownOutcome(c.err),
				permanent:          pgerr.IsPermanent(c.err),
				permanentStreaming: pgerr.IsPermanentStreaming(c.err),
			}
			assert.Equal(t, c.want, got)
		})
	}
}

// The message never counts: a text that reads like a lock timeout, an
// unknown table or a refused connection is none of them.
func TestNotByMessage(t *testing.T) {
	err := errors.New(`ERROR: canceling statement due to lock timeout (SQLSTATE 55P03); relation "x" does not exist; connection refused; password authentication failed`)
	assert.Equal(t, "", pgerr.Code(err))
	assert.False(t, pgerr.IsLockTimeout(err))
	assert.False(t, pgerr.IsUndefinedTable(err))
	assert.False(t, pgerr.IsPermanent(err))
	assert.False(t, pgerr.IsPermanentStreaming(err))
	// And a server error's text is not read either: the code decides.
	e := &pgconn.PgError{Code: "40001", Message: "lock timeout, relation does not exist"}
	assert.False(t, pgerr.IsLockTimeout(e))
	assert.False(t, pgerr.IsUndefinedTable(e))
}

func TestRetryCap(t *testing.T) {
	c := pgerr.RetryCap{Max: 50 * time.Millisecond}
	assert.False(t, c.Failing())
	assert.Zero(t, c.Elapsed())
	assert.False(t, c.Fail(), "the first failure starts the clock")
	assert.True(t, c.Failing())
	time.Sleep(20 * time.Millisecond)
	assert.False(t, c.Fail(), "within the cap")
	time.Sleep(40 * time.Millisecond)
	assert.True(t, c.Fail(), "the streak lasted longer than the cap")
	assert.GreaterOrEqual(t, c.Elapsed(), 50*time.Millisecond)
	c.Reset()
	assert.False(t, c.Failing())
	assert.False(t, c.Fail(), "after Reset the clock starts again")
}
