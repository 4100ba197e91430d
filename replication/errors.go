package replication

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardmover/shardmover/internal/pgerr"
)

// ErrBadName is returned (wrapped) when a slot, publication or origin name
// is not a plain lower-case identifier. Nothing is created when it is.
var ErrBadName = errors.New("invalid replication artifact name")

// ErrNoReplicaIdentity is returned (wrapped) by CheckReplicaIdentity when a
// table has neither a primary key nor REPLICA IDENTITY FULL (nor a replica
// identity index), so its updates and deletes cannot be replicated.
var ErrNoReplicaIdentity = errors.New("table has no replica identity")

// ErrPermanent marks an error that retrying will not cure: bad input, a
// target that diverged from the source, a schema mismatch, an undecodable
// message. Stream.Run returns such errors at once; it retries every other
// error with backoff. Test with errors.Is(err, ErrPermanent).
var ErrPermanent = errors.New("permanent replication error")

// ErrDiverged is returned (wrapped, and also wrapping ErrPermanent) when an
// UPDATE or DELETE streamed from the source finds no row on the target: the
// target no longer mirrors the source, so applying further would be wrong.
var ErrDiverged = errors.New("target diverged from source")

// nameRE is what slot, publication and origin names must match: they are
// interpolated into replication commands, which take no parameters.
var nameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// ValidateName checks a slot, publication or origin name. kind names the
// artifact in the error ("slot", "publication", "origin").
func ValidateName(kind, name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: %s name %q must be 1 to 63 characters of a-z, 0-9 and _ (the mover uses shardmover_<move id>)", ErrBadName, kind, name)
	}
	return nil
}

// snapshotRE matches the names pg_export_snapshot and CREATE_REPLICATION_SLOT
// return ("00000003-00000002-1").
var snapshotRE = regexp.MustCompile(`^[0-9A-Fa-f]+(-[0-9A-Fa-f]+){1,3}$`)

func validateSnapshot(name string) error {
	if !snapshotRE.MatchString(name) {
		return fmt.Errorf("%w: snapshot name %q is not an exported snapshot name such as 00000003-00000002-1", ErrBadName, name)
	}
	return nil
}

// permanent wraps err so that errors.Is(err, ErrPermanent) holds.
func permanent(err error) error {
	if err == nil || errors.Is(err, ErrPermanent) {
		return err
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() []error {
	return []error{e.err, ErrPermanent}
}

// isPermanent classifies errors met while streaming: ErrPermanent, or a
// SQLSTATE pgerr.IsPermanentStreaming calls permanent (data, integrity,
// syntax and privilege errors, unsupported features, internal errors).
// Connection trouble, serialization failures, lock and resource shortages,
// operator intervention and "object in use" (a replication origin still
// held by a previous session that is exiting) are transient.
func isPermanent(err error) bool {
	return errors.Is(err, ErrPermanent) || pgerr.IsPermanentStreaming(err)
}

// pgCode returns the SQLSTATE of err, or "" (pgerr.Code).
func pgCode(err error) string { return pgerr.Code(err) }

// parseDSN parses a libpq connection string without ever echoing it: pgconn's
// own parse errors quote the string, which may hold a password.
func parseDSN(which, dsn string) (*pgconn.Config, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		msg := "invalid connection string"
		var pce *pgconn.ParseConfigError
		if errors.As(err, &pce) && pce.Unwrap() != nil {
			msg += ": " + redact(pce.Unwrap().Error(), dsn)
		}
		return nil, permanent(fmt.Errorf("parse %s DSN: %s", which, msg))
	}
	return cfg, nil
}

// redact removes any occurrence of the connection string from s.
func redact(s, dsn string) string {
	if dsn != "" {
		s = strings.ReplaceAll(s, dsn, "<dsn>")
	}
	return s
}

// addr is host:port of a parsed config, the only part of a DSN ever logged.
func addr(cfg *pgconn.Config) string {
	return net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
}
