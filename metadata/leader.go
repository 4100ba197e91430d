package metadata

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardmover/shardmover/internal/pgerr"
)

// Daemon leadership (docs/design.md section 9) is a lease with a fencing token.
// The lease is the session advisory lock LockLeader; the token is the epoch
// in shardmover.leader, bumped by every new leader right after it takes the
// lock, in a transaction that checks on the lock's own session that it still
// holds it. Work the daemon records (creating a job, adopting one) goes
// through the functions below, which check in the same transaction that the
// caller's epoch is still the current one and that its session still holds
// the lock, and refuse with ErrNotLeader otherwise: a leader that lost its
// lock cannot act, even for a moment after a new one was elected.

// ErrNotLeader is returned when the caller's leadership is gone: its lock
// session died, or a newer leader bumped the epoch.
var ErrNotLeader = errors.New("not the leader")

// leaderKey is the second key of the leader lock (LockLeader, leaderKey).
const leaderKey int32 = 1

const leaderDDL = `CREATE TABLE IF NOT EXISTS shardmover.leader (
	id integer PRIMARY KEY DEFAULT 1 CHECK (id = 1),
	epoch bigint NOT NULL,
	holder text NOT NULL,
	pid integer NOT NULL,
	since timestamptz NOT NULL DEFAULT now(),
	nodes_seen integer[]
)`

// Leadership is a daemon's term as leader: its lease on the leader lock
// and the epoch it was elected with.
type Leadership struct {
	Epoch  int64
	Holder string
	lease  *Lease
}

// PID is the coordinator backend that holds the leader lock.
func (l *Leadership) PID() uint32 { return l.lease.pid }

// LeaderRecord is the row of shardmover.leader: who was elected last, and
// whether its session still holds the lock.
type LeaderRecord struct {
	Epoch  int64     `json:"epoch"`
	Holder string    `json:"holder"`
	PID    int32     `json:"pid"`
	Since  time.Time `json:"since"`
	// Held: the recorded pid holds the leader lock right now (pg_locks).
	Held bool `json:"held"`
}

// TryLeaderLock takes the leader lock on a dedicated connection; ok is
// false when another session holds it.
func (c *Catalog) TryLeaderLock(ctx context.Context) (*Lease, bool, error) {
	return c.TryLock(ctx, LockLeader, leaderKey)
}

// TakeLeadership starts a term for the holder of lease (the leader lock):
// it installs the journal, then, in one transaction on the lease's own
// session, checks that the session holds the lock and bumps the epoch.
// holder names the daemon (host, pid, address) for people.
//
// ttl, when positive, is the lease's time to live on the coordinator: the
// lock's session gets idle_session_timeout = ttl (PostgreSQL 14+), so a
// leader that stops checking its lock (cut off from the coordinator, frozen)
// loses it after ttl even when no connection breaks for the server to see.
// The leader must check more often than that (CheckLeadership).
func (c *Catalog) TakeLeadership(ctx context.Context, lease *Lease, holder string, ttl time.Duration) (*Leadership, error) {
	if err := c.InstallJournal(ctx); err != nil {
		return nil, err
	}
	if _, err := lease.conn.Exec(ctx, leaderDDL); err != nil {
		return nil, fmt.Errorf("install shardmover.leader: %w", err)
	}
	if ttl > 0 {
		_, err := lease.conn.Exec(ctx, fmt.Sprintf("SET idle_session_timeout = %d", max(ttl.Milliseconds(), 1)))
		if err != nil && !pgerr.IsUndefinedObject(err) { // unknown before PostgreSQL 14
			return nil, fmt.Errorf("set the leader lock's time to live: %w", err)
		}
	}
	var epoch int64
	err := pgx.BeginTxFunc(ctx, lease.conn, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if err := holdsLeaderLock(ctx, tx, 0); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO shardmover.leader AS l (id, epoch, holder, pid, since)
			VALUES (1, 1, $1, pg_backend_pid(), now())
			ON CONFLICT (id) DO UPDATE SET epoch = l.epoch + 1, holder = EXCLUDED.holder, pid = EXCLUDED.pid, since = now()
			RETURNING epoch`, holder).Scan(&epoch)
	})
	if err != nil {
		return nil, fmt.Errorf("take leadership: %w", err)
	}
	return &Leadership{Epoch: epoch, Holder: holder, lease: lease}, nil
}

// holdsLeaderLock checks inside tx that backend pid (0: the transaction's
// own) holds the leader lock.
func holdsLeaderLock(ctx context.Context, tx pgx.Tx, pid uint32) error {
	var held bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND classid = $1 AND objid = $2 AND objsubid = 2 AND pid = CASE WHEN $3 = 0 THEN pg_backend_pid() ELSE $3 END)`,
		uint32(LockLeader), uint32(leaderKey), int64(pid)).Scan(&held); err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("%w: the session of the leader lock no longer holds it", ErrNotLeader)
	}
	return nil
}

// fence checks inside tx that l is still the current leadership: the epoch
// is l's (the row is locked FOR SHARE, so no new leader can bump it before
// tx ends) and l's session holds the lock.
func fence(ctx context.Context, tx pgx.Tx, l *Leadership) error {
	if l == nil {
		return fmt.Errorf("%w: no leadership", ErrNotLeader)
	}
	var epoch int64
	err := tx.QueryRow(ctx, "SELECT epoch FROM shardmover.leader WHERE id = 1 FOR SHARE").Scan(&epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: no leader is recorded", ErrNotLeader)
	}
	if err != nil {
		return err
	}
	if epoch != l.Epoch {
		return fmt.Errorf("%w: leader epoch %d was superseded by epoch %d", ErrNotLeader, l.Epoch, epoch)
	}
	return holdsLeaderLock(ctx, tx, l.lease.pid)
}

// CheckLeadership checks, on the lease's own session, that it still holds
// the leader lock (the coordinator's view, from pg_locks) and that l's
// epoch is the current one. Any failure, a broken connection included, is
// ErrNotLeader (wrapped with the cause). Only the leader's heartbeat calls
// it: the lease's connection is not safe for concurrent use.
func (c *Catalog) CheckLeadership(ctx context.Context, l *Leadership) error {
	var epoch int64
	var held bool
	err := l.lease.conn.QueryRow(ctx, `SELECT coalesce((SELECT epoch FROM shardmover.leader WHERE id = 1), 0),
		EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND classid = $1 AND objid = $2 AND objsubid = 2 AND pid = pg_backend_pid())`,
		uint32(LockLeader), uint32(leaderKey)).Scan(&epoch, &held)
	switch {
	case err != nil:
		return fmt.Errorf("%w: the leader lock's connection failed: %s", ErrNotLeader, redact(err))
	case !held:
		return fmt.Errorf("%w: the coordinator shows the leader lock no longer held by backend %d", ErrNotLeader, l.lease.pid)
	case epoch != l.Epoch:
		return fmt.Errorf("%w: leader epoch %d was superseded by epoch %d", ErrNotLeader, l.Epoch, epoch)
	}
	return nil
}

// Release ends the term: the lock is given up and its connection closed.
func (l *Leadership) Release(ctx context.Context) { l.lease.Release(ctx) }

// CurrentLeader reads shardmover.leader; ok is false when no daemon has
// ever led.
func (c *Catalog) CurrentLeader(ctx context.Context) (LeaderRecord, bool, error) {
	var r LeaderRecord
	var exists bool
	if err := c.pool.QueryRow(ctx, "SELECT to_regclass('shardmover.leader') IS NOT NULL").Scan(&exists); err != nil || !exists {
		return r, false, err
	}
	err := c.pool.QueryRow(ctx, `SELECT epoch, holder, pid, since, EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
			AND granted AND classid = $1 AND objid = $2 AND objsubid = 2 AND pid = l.pid)
		FROM shardmover.leader l WHERE id = 1`, uint32(LockLeader), uint32(leaderKey)).Scan(&r.Epoch, &r.Holder, &r.PID, &r.Since, &r.Held)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

// CreateLeaderJob is CreateJob for the leader: the job carries l's epoch
// (jobs.leader_epoch), and it is recorded only if l is still the current
// leadership (ErrNotLeader otherwise), in the same transaction.
func (c *Catalog) CreateLeaderJob(ctx context.Context, l *Leadership, kind, strategy string, specs []MoveSpec) (Job, []Move, error) {
	var job Job
	var moves []Move
	err := c.tx(ctx, func(tx pgx.Tx) (err error) {
		if err := fence(ctx, tx, l); err != nil {
			return err
		}
		job, moves, err = createJobTx(ctx, tx, kind, strategy, l.Epoch, specs)
		return err
	})
	if err != nil {
		return Job{}, nil, err
	}
	return job, moves, nil
}

// AdoptJobs makes l the owner of unfinished jobs of the given kinds (jobs
// with a move not done, failed or cancelled) and marks them running, in
// one fenced transaction; it returns them oldest first. With own set it
// only takes jobs l already owns (created or adopted in this term), to run
// them again after an error. Jobs whose moves have all ended but whose
// state still says running or paused (their runner died between the last
// move and recording the end) get their final state at the same time.
func (c *Catalog) AdoptJobs(ctx context.Context, l *Leadership, own bool, kinds ...string) ([]Job, error) {
	var jobs []Job
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, l); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `UPDATE shardmover.jobs j SET leader_epoch = $1, state = $4
			WHERE kind = ANY($2) AND (NOT $3 OR leader_epoch = $1)
				AND EXISTS (SELECT 1 FROM shardmover.moves m WHERE m.job_id = j.id AND m.phase <> ALL($5))
			RETURNING `+jobColumns, l.Epoch, kinds, own, JobRunning, terminalPhases())
		if err != nil {
			return err
		}
		if jobs, err = pgx.CollectRows(rows, scanJob); err != nil {
			return err
		}
		if own {
			return nil
		}
		_, err = tx.Exec(ctx, `UPDATE shardmover.jobs j SET leader_epoch = $1, finished_at = coalesce(finished_at, now()),
			state = CASE WHEN s.failed > 0 THEN $3::text WHEN s.cancelled > 0 THEN $4::text ELSE $5::text END
			-- The job-state rule of mover.JobState: failed, else cancelled if
			-- any move was cancelled, else done.
			FROM (SELECT job_id, count(*) FILTER (WHERE phase = $6) AS failed,
					count(*) FILTER (WHERE phase = $7) AS cancelled, count(*) FILTER (WHERE phase = $8) AS done
				FROM shardmover.moves GROUP BY job_id
				HAVING count(*) FILTER (WHERE phase <> ALL($9)) = 0) s
			WHERE s.job_id = j.id AND j.kind = ANY($2) AND j.state = ANY($10)`, l.Epoch, kinds,
			JobFailed, JobCancelled, JobDone, PhaseFailed, PhaseCancelled, PhaseDone, terminalPhases(),
			[]string{string(JobRunning), string(JobPaused)})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("adopt unfinished jobs: %w", err)
	}
	slices.SortFunc(jobs, func(a, b Job) int { return int(a.ID - b.ID) })
	return jobs, nil
}

// NodesSeen returns the ids of the usable nodes (active, shouldhaveshards)
// that the last leader had accounted for: no rebalance was owed for them.
// ok is false when none was recorded yet.
func (c *Catalog) NodesSeen(ctx context.Context) (ids []int32, ok bool, err error) {
	var exists bool
	if err := c.pool.QueryRow(ctx, "SELECT to_regclass('shardmover.leader') IS NOT NULL").Scan(&exists); err != nil || !exists {
		return nil, false, err
	}
	var got []int32
	err = c.pool.QueryRow(ctx, "SELECT nodes_seen FROM shardmover.leader WHERE id = 1").Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && got == nil) {
		return nil, false, nil
	}
	return got, err == nil, err
}

// RecordNodesSeen records the usable nodes l has accounted for (fenced).
func (c *Catalog) RecordNodesSeen(ctx context.Context, l *Leadership, ids []int32) error {
	ids = slices.Clone(ids)
	if ids == nil {
		ids = []int32{}
	}
	slices.Sort(ids)
	return pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, l); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE shardmover.leader SET nodes_seen = $1 WHERE id = 1", ids)
		return err
	})
}

// MovesByPhase counts the journal's moves by phase, in one query. An
// uninstalled journal has none.
func (c *Catalog) MovesByPhase(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	ok, err := c.journalInstalled(ctx)
	if err != nil || !ok {
		return out, err
	}
	rows, err := c.pool.Query(ctx, "SELECT phase, count(*) FROM shardmover.moves GROUP BY phase")
	if err != nil {
		return nil, err
	}
	var phase string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&phase, &n}, func() error { out[phase] = n; return nil })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// VerifyLeadership checks, in a coordinator transaction of its own (safe
// from any goroutine, unlike CheckLeadership), that l is still the current
// leadership; it returns ErrNotLeader (wrapped) when it is not.
func (c *Catalog) VerifyLeadership(ctx context.Context, l *Leadership) error {
	return c.tx(ctx, func(tx pgx.Tx) error { return fence(ctx, tx, l) })
}

// FinishLeaderJob is FinishJob for a job run under leadership l: it is
// refused with ErrNotLeader unless l is still current and still owns the
// job, so a leader that lost its term cannot overwrite the state the new
// one records.
func (c *Catalog) FinishLeaderJob(ctx context.Context, l *Leadership, id int64, state JobState, errText string) error {
	return c.tx(ctx, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, l); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE shardmover.jobs SET state = $2, error = $3, finished_at = now()
			WHERE id = $1 AND leader_epoch = $4`, id, state, errText, l.Epoch)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("%w: job %d is owned by another leadership than epoch %d", ErrNotLeader, id, l.Epoch)
		}
		return nil
	})
}
