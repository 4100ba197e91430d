package mover

import (
	"errors"

	"github.com/shardmover/shardmover/internal/pgerr"
	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/replication"
)

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func permanent(err error) error { return &permanentError{err} }

// isPermanent: our own permanent errors, replication's, refusals, and
// SQLSTATEs that no retry fixes (pgerr.IsPermanent: data, integrity,
// authorization, syntax and access rules, disk full).
func isPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p) || errors.Is(err, metadata.ErrInvalid) || errors.Is(err, replication.ErrPermanent) || pgerr.IsPermanent(err)
}
