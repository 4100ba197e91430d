package metadata

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/pgerr"
)

// The journal (schema shardmover on the coordinator, docs/design.md section 8)
// records jobs, moves, every phase change and every artifact a move creates.
// A move's phase column is the truth its mover resumes from.

// ErrPhaseConflict is returned by SetPhase when the move is no longer in the
// phase the caller expected: another mover, or a cancel, changed it.
var ErrPhaseConflict = errors.New("move phase changed underneath")

// ErrGroupBusy marks a shard group that another unfinished move already holds.
var ErrGroupBusy = errors.New("shard group is held by another move")

// Phase is a move's phase as the journal stores it (moves.phase,
// move_log.from_phase and to_phase). mover.Phase is the mover's enum of the
// same phases; its String form is one of these.
type Phase string

// The phases of a move, in the order a move passes them (docs/design.md,
// "move phases"); the last three are terminal.
const (
	PhaseScheduled  Phase = "scheduled"
	PhasePreflight  Phase = "preflight"
	PhaseSetup      Phase = "setup"
	PhaseCopying    Phase = "copying"
	PhaseIndexing   Phase = "indexing"
	PhaseCatchingUp Phase = "catching_up"
	PhaseCutover    Phase = "cutover"
	PhaseCleanup    Phase = "cleanup"
	PhaseDone       Phase = "done"
	PhaseFailed     Phase = "failed"
	PhaseCancelled  Phase = "cancelled"
)

// TerminalPhases are the phases a move ends in: the one definition of
// "finished" that every query and check uses.
var TerminalPhases = []Phase{PhaseDone, PhaseFailed, PhaseCancelled}

// Terminal reports whether a move in phase p has ended.
func (p Phase) Terminal() bool { return slices.Contains(TerminalPhases, p) }

// terminalPhases is TerminalPhases as a text[] query argument: SQL tests
// "unfinished" as phase <> ALL($n).
func terminalPhases() []string {
	out := make([]string, len(TerminalPhases))
	for i, p := range TerminalPhases {
		out[i] = string(p)
	}
	return out
}

// sqlList renders values as an SQL list of literals ('a', 'b'), for the
// DDL that cannot take parameters (a partial index's predicate, a column
// default). The values are this package's constants: no quoting needed.
func sqlList[S ~string](values ...S) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = "'" + string(v) + "'"
	}
	return strings.Join(quoted, ", ")
}

// JobState is a job's state (jobs.state).
type JobState string

// Job states. A job runs, is paused (some move unfinished, resumable), or
// has ended done, failed or cancelled (mover.JobState is the rule).
const (
	JobRunning   JobState = "running"
	JobPaused    JobState = "paused"
	JobDone      JobState = "done"
	JobFailed    JobState = "failed"
	JobCancelled JobState = "cancelled"
)

// ObjectKind is the kind of artifact a cleanup record names
// (cleanup.object_type).
type ObjectKind string

// Cleanup object kinds.
const (
	// ObjectPrepared: a move's prepared fence transaction (by its GID).
	ObjectPrepared ObjectKind = "prepared"
	// ObjectSlot: a logical replication slot on the source.
	ObjectSlot ObjectKind = "slot"
	// ObjectPublication: a publication on the source.
	ObjectPublication ObjectKind = "publication"
	// ObjectOrigin: a replication origin on the target.
	ObjectOrigin ObjectKind = "origin"
	// ObjectTable: a shard table (the target copy, or the fenced old shard).
	ObjectTable ObjectKind = "table"
)

var journalDDL = []string{
	`CREATE SCHEMA IF NOT EXISTS shardmover`,
	`CREATE TABLE IF NOT EXISTS shardmover.jobs (
		id bigserial PRIMARY KEY,
		kind text NOT NULL,
		state text NOT NULL DEFAULT ` + sqlList(JobRunning) + `,
		strategy text NOT NULL DEFAULT '',
		created_at timestamptz NOT NULL DEFAULT now(),
		started_at timestamptz,
		finished_at timestamptz,
		error text NOT NULL DEFAULT ''
	)`,
	`CREATE TABLE IF NOT EXISTS shardmover.moves (
		id bigserial PRIMARY KEY,
		job_id bigint NOT NULL REFERENCES shardmover.jobs (id),
		colocation_id integer NOT NULL,
		shard_index integer NOT NULL,
		shard_ids bigint[] NOT NULL,
		shard_tables text[] NOT NULL,
		source_group integer NOT NULL,
		target_group integer NOT NULL,
		phase text NOT NULL DEFAULT ` + sqlList(PhaseScheduled) + `,
		bytes_total bigint NOT NULL DEFAULT 0,
		bytes_copied bigint NOT NULL DEFAULT 0,
		source_lsn pg_lsn,
		applied_lsn pg_lsn,
		cutover_committed boolean NOT NULL DEFAULT false,
		cancel_requested boolean NOT NULL DEFAULT false,
		error text NOT NULL DEFAULT '',
		attempts integer NOT NULL DEFAULT 0,
		created_at timestamptz NOT NULL DEFAULT now(),
		updated_at timestamptz NOT NULL DEFAULT now()
	)`,
	// One unfinished move per shard group, enforced by the database. An
	// index predicate takes no parameters: the terminal set is spelled out
	// from TerminalPhases.
	`CREATE UNIQUE INDEX IF NOT EXISTS moves_one_active_per_group ON shardmover.moves (colocation_id, shard_index)
		WHERE phase NOT IN (` + sqlList(TerminalPhases...) + `)`,
	`CREATE TABLE IF NOT EXISTS shardmover.move_log (
		id bigserial PRIMARY KEY,
		move_id bigint NOT NULL REFERENCES shardmover.moves (id),
		from_phase text NOT NULL,
		to_phase text NOT NULL,
		message text NOT NULL DEFAULT '',
		at timestamptz NOT NULL DEFAULT now()
	)`,
	`CREATE TABLE IF NOT EXISTS shardmover.cleanup (
		id bigserial PRIMARY KEY,
		move_id bigint REFERENCES shardmover.moves (id),
		node_group integer NOT NULL,
		object_type text NOT NULL,
		name text NOT NULL,
		policy text NOT NULL,
		created_at timestamptz NOT NULL DEFAULT now()
	)`,
	// cutover_epoch numbers the cutover attempts whose outcome has been
	// settled: settling an undecided attempt bumps it under the move row's
	// lock, and a decision carries the epoch it was prepared under, so a
	// decision delayed past its settlement can never commit.
	`ALTER TABLE shardmover.moves ADD COLUMN IF NOT EXISTS cutover_epoch bigint NOT NULL DEFAULT 0`,
	// The epoch of the daemon leadership that created or last adopted the job (metadata/leader.go); 0: not a daemon's.
	`ALTER TABLE shardmover.jobs ADD COLUMN IF NOT EXISTS leader_epoch bigint NOT NULL DEFAULT 0`,
	// carry_over_due: a settlement found the fence of a committed decision
	// gone and is re-establishing it; what the source took meanwhile must
	// reach the target before the slot is dropped. Set before the re-fence,
	// cleared after the carry-over (mover/settle.go).
	`ALTER TABLE shardmover.moves ADD COLUMN IF NOT EXISTS carry_over_due boolean NOT NULL DEFAULT false`,
	// carried_by: the move whose stream carries this one (docs/design.md
	// 6.2): its phases follow that move's, its decision is that move's.
	`ALTER TABLE shardmover.moves ADD COLUMN IF NOT EXISTS carried_by bigint REFERENCES shardmover.moves (id)`,
	`CREATE INDEX IF NOT EXISTS moves_carried_by ON shardmover.moves (carried_by) WHERE carried_by IS NOT NULL`,
	// source_filenodes: each shard table's relfilenode on the source,
	// read by setup before the slot's snapshot; a cutover that finds
	// another one knows the table was rewritten during the move (a
	// rewrite's rows are not logically decoded) and fails the move.
	`ALTER TABLE shardmover.moves ADD COLUMN IF NOT EXISTS source_filenodes bigint[]`,
	installedDDL,
}

// Cleanup policies.
const (
	// CleanupAlways: drop when the move ends, whatever its outcome (slot,
	// publication, origin).
	CleanupAlways = "always"
	// CleanupOnFailure: drop when the move fails or is cancelled (the target
	// copy); forget when it succeeds.
	CleanupOnFailure = "on_failure"
	// CleanupDeferred: drop after a grace period (the fenced old shards).
	CleanupDeferred = "deferred"
)

// Job is a row of shardmover.jobs.
type Job struct {
	ID         int64      `json:"id"`
	Kind       string     `json:"kind"`
	State      JobState   `json:"state"`
	Strategy   string     `json:"strategy"`
	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	Error      string     `json:"error,omitempty"`
}

// Move is a row of shardmover.moves.
type Move struct {
	ID               int64    `json:"id"`
	JobID            int64    `json:"job_id"`
	ColocationID     int32    `json:"colocation_id"`
	ShardIndex       int      `json:"shard_index"`
	ShardIDs         []int64  `json:"shard_ids"`
	ShardTables      []string `json:"shard_tables"` // schema.name of each shard table
	SourceGroup      int32    `json:"source_group"`
	TargetGroup      int32    `json:"target_group"`
	Phase            Phase    `json:"phase"`
	BytesTotal       int64    `json:"bytes_total"`
	BytesCopied      int64    `json:"bytes_copied"`
	SourceLSN        string   `json:"source_lsn,omitempty"`
	AppliedLSN       string   `json:"applied_lsn,omitempty"`
	CutoverCommitted bool     `json:"cutover_committed"`
	CutoverEpoch     int64    `json:"cutover_epoch"`
	CarryOverDue     bool     `json:"carry_over_due"`
	CancelRequested  bool     `json:"cancel_requested"`
	// CarriedBy is the move whose stream carries this one (0: none): a
	// rider's phases follow its lead's, and one decision flips both.
	CarriedBy int64     `json:"carried_by,omitempty"`
	Error     string    `json:"error,omitempty"`
	Attempts  int       `json:"attempts"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Name is the name of every replication artifact of the move: its
// stream's (StreamID).
func (m Move) Name() string { return fmt.Sprintf("shardmover_%d", m.StreamID()) }

// StreamID is the move whose stream carries this one: its lead, or itself.
// The stream's artifacts and the fenced names of the old shards
// (FencedName) carry this id.
func (m Move) StreamID() int64 {
	if m.CarriedBy != 0 {
		return m.CarriedBy
	}
	return m.ID
}

// Terminal reports whether the move has ended.
func (m Move) Terminal() bool { return Phase(m.Phase).Terminal() }

// MoveSpec asks for one move.
type MoveSpec struct {
	Group       ShardGroup
	ShardTables []string
	SourceGroup int32
	TargetGroup int32
}

// CleanupRecord is a row of shardmover.cleanup.
type CleanupRecord struct {
	ID         int64      `json:"id"`
	MoveID     *int64     `json:"move_id,omitempty"`
	NodeGroup  int32      `json:"node_group"`
	ObjectType ObjectKind `json:"object_type"`
	Name       string     `json:"name"`
	Policy     string     `json:"policy"`
	CreatedAt  time.Time  `json:"created_at"`
}

// InstallJournal creates the journal schema (idempotent). It refuses a
// database that is not a cluster (ErrNotCluster), creating nothing.
//
// On Citus the journal stays on the coordinator: its DDL is not propagated
// (Citus would send CREATE SCHEMA to every metadata node, and refuses to
// while one of them is out of sync).
func (c *Catalog) InstallJournal(ctx context.Context) (err error) {
	// Only a cluster gets the journal: pointed at any other database, a
	// command refuses there having created nothing (RequireCluster). A
	// compat cluster is made by Install, which installs the journal too.
	if err := c.requireInstalled(ctx); err != nil {
		return err
	}
	want := map[string]string{partJournal: journalVersion}
	if c.installedAlready(ctx, want) {
		return nil
	}
	defer func() {
		if err == nil {
			c.recordInstalled(ctx, want)
		}
	}()
	return c.tx(ctx, func(tx pgx.Tx) error {
		if c.flavor == Citus {
			if _, err := tx.Exec(ctx, "SET LOCAL citus.enable_ddl_propagation = off"); err != nil {
				return fmt.Errorf("install journal: %w", err)
			}
		}
		for _, stmt := range journalDDL {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("install journal: %w", err)
			}
		}
		return nil
	})
}

const moveColumns = `id, job_id, colocation_id, shard_index, shard_ids, shard_tables, source_group, target_group,
	phase, bytes_total, bytes_copied, coalesce(source_lsn::text, ''), coalesce(applied_lsn::text, ''),
	cutover_committed, cutover_epoch, carry_over_due, cancel_requested, coalesce(carried_by, 0), error, attempts, created_at, updated_at`

func scanMove(r pgx.CollectableRow) (Move, error) {
	var m Move
	err := r.Scan(&m.ID, &m.JobID, &m.ColocationID, &m.ShardIndex, &m.ShardIDs, &m.ShardTables, &m.SourceGroup,
		&m.TargetGroup, &m.Phase, &m.BytesTotal, &m.BytesCopied, &m.SourceLSN, &m.AppliedLSN,
		&m.CutoverCommitted, &m.CutoverEpoch, &m.CarryOverDue, &m.CancelRequested, &m.CarriedBy, &m.Error, &m.Attempts, &m.CreatedAt, &m.UpdatedAt)
	return m, err
}

const jobColumns = `id, kind, state, strategy, created_at, started_at, finished_at, error`

func scanJob(r pgx.CollectableRow) (Job, error) {
	var j Job
	err := r.Scan(&j.ID, &j.Kind, &j.State, &j.Strategy, &j.CreatedAt, &j.StartedAt, &j.FinishedAt, &j.Error)
	return j, err
}

// CreateJob records a job and its moves (phase scheduled) in one
// transaction. A shard group already held by an unfinished move makes the
// whole job fail with ErrGroupBusy and records nothing.
func (c *Catalog) CreateJob(ctx context.Context, kind, strategy string, specs []MoveSpec) (Job, []Move, error) {
	var job Job
	var moves []Move
	err := c.tx(ctx, func(tx pgx.Tx) (err error) {
		job, moves, err = createJobTx(ctx, tx, kind, strategy, 0, specs)
		return err
	})
	if err != nil {
		return Job{}, nil, err
	}
	return job, moves, nil
}

// createJobTx records a job (under a daemon leadership's epoch, or 0) and
// its moves in tx; a shard group held by an unfinished move fails it with
// ErrGroupBusy.
func createJobTx(ctx context.Context, tx pgx.Tx, kind, strategy string, epoch int64, specs []MoveSpec) (Job, []Move, error) {
	rows, err := tx.Query(ctx, `INSERT INTO shardmover.jobs (kind, strategy, started_at, leader_epoch)
		VALUES ($1, $2, now(), $3) RETURNING `+jobColumns, kind, strategy, epoch)
	if err != nil {
		return Job{}, nil, err
	}
	job, err := pgx.CollectExactlyOneRow(rows, scanJob)
	if err != nil {
		return Job{}, nil, err
	}
	var moves []Move
	for _, s := range specs {
		var holder int64
		err := tx.QueryRow(ctx, `SELECT id FROM shardmover.moves WHERE colocation_id = $1 AND shard_index = $2
			AND phase <> ALL($3)`, s.Group.ColocationID, s.Group.Index, terminalPhases()).Scan(&holder)
		if err == nil {
			job := holderJob(ctx, tx, holder)
			return Job{}, nil, fmt.Errorf("%w: shard group %s (shards %v) is already being moved by move %d of job %d; let it finish or cancel it with `shardmover jobs cancel %d`",
				ErrGroupBusy, s.Group.Key(), s.Group.ShardIDs, holder, job, job)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return Job{}, nil, err
		}
		rows, err := tx.Query(ctx, `INSERT INTO shardmover.moves (job_id, colocation_id, shard_index, shard_ids, shard_tables,
			source_group, target_group, bytes_total) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING `+moveColumns,
			job.ID, s.Group.ColocationID, s.Group.Index, s.Group.ShardIDs, s.ShardTables, s.SourceGroup, s.TargetGroup, s.Group.Bytes)
		if err != nil {
			return Job{}, nil, err
		}
		m, err := pgx.CollectExactlyOneRow(rows, scanMove)
		if err != nil {
			return Job{}, nil, err
		}
		moves = append(moves, m)
	}
	return job, moves, nil
}

func holderJob(ctx context.Context, tx pgx.Tx, move int64) int64 {
	var j int64
	_ = tx.QueryRow(ctx, "SELECT job_id FROM shardmover.moves WHERE id = $1", move).Scan(&j)
	return j
}

// Move reads one move.
func (c *Catalog) Move(ctx context.Context, id int64) (Move, error) {
	rows, err := c.pool.Query(ctx, "SELECT "+moveColumns+" FROM shardmover.moves WHERE id = $1", id)
	if err != nil {
		return Move{}, err
	}
	m, err := pgx.CollectExactlyOneRow(rows, scanMove)
	if errors.Is(err, pgx.ErrNoRows) {
		return Move{}, fmt.Errorf("%w: there is no move %d", ErrNotFound, id)
	}
	return m, err
}

// MoveFilter selects moves.
type MoveFilter struct {
	JobID      int64 // 0: any job
	ActiveOnly bool
}

// Moves lists moves ordered by id.
func (c *Catalog) Moves(ctx context.Context, f MoveFilter) ([]Move, error) {
	ok, err := c.journalInstalled(ctx)
	if err != nil || !ok {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, "SELECT "+moveColumns+` FROM shardmover.moves
		WHERE ($1 = 0 OR job_id = $1) AND (NOT $2 OR phase <> ALL($3)) ORDER BY id`, f.JobID, f.ActiveOnly, terminalPhases())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanMove)
}

// Job reads one job.
func (c *Catalog) Job(ctx context.Context, id int64) (Job, error) {
	rows, err := c.pool.Query(ctx, "SELECT "+jobColumns+" FROM shardmover.jobs WHERE id = $1", id)
	if err != nil {
		return Job{}, err
	}
	j, err := pgx.CollectExactlyOneRow(rows, scanJob)
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, fmt.Errorf("%w: there is no job %d", ErrNotFound, id)
	}
	return j, err
}

// Jobs lists jobs, newest first.
func (c *Catalog) Jobs(ctx context.Context, limit int) ([]Job, error) {
	ok, err := c.journalInstalled(ctx)
	if err != nil || !ok {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, "SELECT "+jobColumns+" FROM shardmover.jobs ORDER BY id DESC LIMIT $1", limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanJob)
}

func (c *Catalog) journalInstalled(ctx context.Context) (bool, error) {
	var ok bool
	err := c.pool.QueryRow(ctx, "SELECT to_regclass('shardmover.moves') IS NOT NULL").Scan(&ok)
	return ok, err
}

// SetPhase moves a move from one phase to another, and logs the change, in
// one transaction. It fails with ErrPhaseConflict when the move is not in
// phase from. errText is stored in moves.error (empty clears it). Movers use
// SetPhaseLeased; SetPhase is for tools that hold no lease.
func (c *Catalog) SetPhase(ctx context.Context, id int64, from, to, msg, errText string) error {
	return c.SetPhaseLeased(ctx, nil, id, from, to, msg, errText)
}

// SetPhaseLeased is SetPhase for the holder of the move's lease: in the
// same transaction it checks that the lease's session still holds the
// move's lock, and fails with ErrLeaseLost otherwise, so a mover that lost
// its lease (a coordinator restart, a cut connection) can never change a
// move another mover may be running.
func (c *Catalog) SetPhaseLeased(ctx context.Context, lease *Lease, id int64, from, to, msg, errText string) error {
	return pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if lease != nil {
			if err := lease.checkTx(ctx, tx); err != nil {
				return err
			}
		}
		return setPhaseTx(ctx, tx, id, from, to, msg, errText)
	})
}

func setPhaseTx(ctx context.Context, tx pgx.Tx, id int64, from, to, msg, errText string) error {
	tag, err := tx.Exec(ctx, setPhaseSQL, id, from, to, errText, PhasePreflight)
	if err := setPhaseResult(id, from, tag, err); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, logPhaseSQL, id, from, to, msg); err != nil {
		return fmt.Errorf("log phase of move %d: %w", id, err)
	}
	if _, err := tx.Exec(ctx, setRidersPhaseSQL, ridersPhaseArgs(id, from, to, msg, errText)...); err != nil {
		return fmt.Errorf("set the phase of the moves move %d carries: %w", id, err)
	}
	return nil
}

// ridersPhaseArgs are setRidersPhaseSQL's arguments.
func ridersPhaseArgs(lead int64, from, to, msg, errText string) []any {
	return []any{lead, from, to, errText, PhasePreflight, PhaseDone, fmt.Sprintf("with move %d: %s", lead, msg)}
}

const (
	setPhaseSQL = `UPDATE shardmover.moves SET phase = $3, error = $4, updated_at = now(),
		attempts = attempts + CASE WHEN $3 = $5::text THEN 1 ELSE 0 END
		WHERE id = $1 AND phase = $2 AND carried_by IS NULL`
	logPhaseSQL = `INSERT INTO shardmover.move_log (move_id, from_phase, to_phase, message) VALUES ($1, $2, $3, $4)`
	// setRidersPhaseSQL moves the riders of lead $1 that are in the lead's
	// old phase $2 to its new one $3, and logs each (a rider taken out of
	// the stream has ended, and is in no phase the lead leaves). A rider
	// that ends done counts its bytes as copied (the stream's copy counted
	// them on the lead's row).
	setRidersPhaseSQL = `WITH carried AS (
		UPDATE shardmover.moves SET phase = $3, error = $4, updated_at = now(),
			attempts = attempts + CASE WHEN $3 = $5::text THEN 1 ELSE 0 END,
			bytes_copied = CASE WHEN $3 = $6::text THEN bytes_total ELSE bytes_copied END
		WHERE carried_by = $1 AND phase = $2 RETURNING id)
		INSERT INTO shardmover.move_log (move_id, from_phase, to_phase, message) SELECT id, $2, $3, $7 FROM carried`
)

// setPhaseResult checks setPhaseSQL's outcome.
func setPhaseResult(id int64, from string, tag pgconn.CommandTag, err error) error {
	if err != nil {
		return fmt.Errorf("set phase of move %d: %w", id, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("%w: move %d is not in phase %s (or another move's stream carries it)", ErrPhaseConflict, id, from)
	}
	return nil
}

// SetCarryOverDue records (due) or clears that move id's source took
// writes after its committed decision which must be carried to the target
// before its slot is dropped: set before the fence is re-established,
// cleared once they were carried over. It refuses (ErrLeaseLost) unless
// lease's session still holds the move's lock.
func (c *Catalog) SetCarryOverDue(ctx context.Context, lease *Lease, id int64, due bool) error {
	return pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if err := lease.checkTx(ctx, tx); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, "UPDATE shardmover.moves SET carry_over_due = $2, updated_at = now() WHERE id = $1", id, due)
		if err != nil {
			return fmt.Errorf("record the carry-over of move %d: %w", id, err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("%w: there is no move %d", ErrNotFound, id)
		}
		return nil
	})
}

// SetProgress records copy progress and replication positions ("" keeps an
// LSN as it is).
func (c *Catalog) SetProgress(ctx context.Context, id, bytesCopied, bytesTotal int64, sourceLSN, appliedLSN string) error {
	_, err := c.pool.Exec(ctx, `UPDATE shardmover.moves SET bytes_copied = $2, bytes_total = greatest(bytes_total, $3),
		source_lsn = coalesce(nullif($4, '')::pg_lsn, source_lsn), applied_lsn = coalesce(nullif($5, '')::pg_lsn, applied_lsn),
		updated_at = now() WHERE id = $1`, id, bytesCopied, bytesTotal, sourceLSN, appliedLSN)
	return err
}

// SetSourceFilenodes records the relfilenode of each of move id's shard
// tables on the source, in the order of its ShardTables.
func (c *Catalog) SetSourceFilenodes(ctx context.Context, id int64, nodes []int64) error {
	_, err := c.pool.Exec(ctx, "UPDATE shardmover.moves SET source_filenodes = $2, updated_at = now() WHERE id = $1", id, nodes)
	return err
}

// SourceFilenodes reads what SetSourceFilenodes recorded (nil: nothing,
// a move set up by an older version).
func (c *Catalog) SourceFilenodes(ctx context.Context, id int64) ([]int64, error) {
	var nodes []int64
	err := c.pool.QueryRow(ctx, "SELECT source_filenodes FROM shardmover.moves WHERE id = $1", id).Scan(&nodes)
	return nodes, err
}

// RequestCancel asks the move's mover to cancel it. A move past its
// cutover decision cannot be cancelled (ErrInvalid); a terminal one is left
// as it is.
func (c *Catalog) RequestCancel(ctx context.Context, id int64) (Move, error) {
	m, err := c.Move(ctx, id)
	if err != nil {
		return m, err
	}
	if m.Terminal() {
		return m, nil
	}
	if m.CutoverCommitted {
		return m, invalidf("move %d is past its cutover decision and will complete; it cannot be cancelled", id)
	}
	_, err = c.pool.Exec(ctx, "UPDATE shardmover.moves SET cancel_requested = true, updated_at = now() WHERE id = $1 AND NOT cutover_committed", id)
	return m, err
}

// MoveLog is one phase change.
type MoveLog struct {
	From    string    `json:"from"`
	To      string    `json:"to"`
	Message string    `json:"message,omitempty"`
	At      time.Time `json:"at"`
}

// MoveHistory returns a move's phase changes in order.
func (c *Catalog) MoveHistory(ctx context.Context, id int64) ([]MoveLog, error) {
	rows, err := c.pool.Query(ctx, "SELECT from_phase, to_phase, message, at FROM shardmover.move_log WHERE move_id = $1 ORDER BY id", id)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[MoveLog])
}

// FinishJob sets a job's final state.
func (c *Catalog) FinishJob(ctx context.Context, id int64, state JobState, errText string) error {
	_, err := c.pool.Exec(ctx, "UPDATE shardmover.jobs SET state = $2, error = $3, finished_at = now() WHERE id = $1", id, state, errText)
	return err
}

// AddCleanup records an artifact before it is created, so nothing leaks.
func (c *Catalog) AddCleanup(ctx context.Context, moveID int64, nodeGroup int32, objType ObjectKind, name, policy string) error {
	_, err := c.pool.Exec(ctx, `INSERT INTO shardmover.cleanup (move_id, node_group, object_type, name, policy)
		SELECT $1, $2, $3, $4, $5 WHERE NOT EXISTS (SELECT 1 FROM shardmover.cleanup
			WHERE move_id = $1 AND node_group = $2 AND object_type = $3 AND name = $4)`, moveID, nodeGroup, objType, name, policy)
	if err != nil {
		return fmt.Errorf("record cleanup of %s %s: %w", objType, name, err)
	}
	return nil
}

// Cleanups lists cleanup records: of one move (moveID > 0) or all.
func (c *Catalog) Cleanups(ctx context.Context, moveID int64) ([]CleanupRecord, error) {
	ok, err := c.journalInstalled(ctx)
	if err != nil || !ok {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, `SELECT id, move_id, node_group, object_type, name, policy, created_at
		FROM shardmover.cleanup WHERE $1 = 0 OR move_id = $1 ORDER BY id`, moveID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[CleanupRecord])
}

// KeptOldCopies lists, by shard group key ("colocation:index", as
// ShardGroup.Key), the node groups that still hold an old copy of the
// group's tables: fenced by a finished move and recorded for the deferred
// drop after the grace period. Empty when the journal is not installed.
func (c *Catalog) KeptOldCopies(ctx context.Context) (map[string][]int32, error) {
	ok, err := c.journalInstalled(ctx)
	if err != nil || !ok {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, `SELECT m.colocation_id, m.shard_index, array_agg(DISTINCT c.node_group ORDER BY c.node_group)
		FROM shardmover.cleanup c JOIN shardmover.moves m ON m.id = c.move_id
		WHERE c.policy = $1 AND c.object_type = $2 GROUP BY 1, 2`, CleanupDeferred, ObjectTable)
	if err != nil {
		return nil, err
	}
	out := map[string][]int32{}
	var colocation int32
	var index int
	var groups []int32
	_, err = pgx.ForEachRow(rows, []any{&colocation, &index, &groups}, func() error {
		out[ShardGroup{ColocationID: colocation, Index: index}.Key()] = slices.Clone(groups)
		return nil
	})
	return out, err
}

// RemoveCleanup deletes a record once its artifact is gone.
func (c *Catalog) RemoveCleanup(ctx context.Context, id int64) error {
	_, err := c.pool.Exec(ctx, "DELETE FROM shardmover.cleanup WHERE id = $1", id)
	return err
}

// ForgetCleanups deletes a move's records of one policy (on success, the
// target copy is no longer something to drop).
func (c *Catalog) ForgetCleanups(ctx context.Context, moveID int64, policy string) error {
	_, err := c.pool.Exec(ctx, "DELETE FROM shardmover.cleanup WHERE move_id = $1 AND policy = $2", moveID, policy)
	return err
}

// CutoverFlip is the decision of a move's cutover.
type CutoverFlip struct {
	MoveID      int64
	ShardIDs    []int64
	SourceGroup int32
	TargetGroup int32
	// OldTables are the fenced shard tables left on the source, dropped
	// after a grace period.
	OldTables []string
	// OldTableMoves, when set, names for each of OldTables the move whose
	// group it belongs to (the lead or one of Riders), under which its
	// deferred drop is recorded: each group's old copy stays findable from
	// its own row (KeptOldCopies, verify). Unset: MoveID for every one.
	OldTableMoves []int64
	// Riders are the moves MoveID's stream carries, every one of which the
	// decision flips with it (their shards are in ShardIDs). The decision
	// is refused unless exactly these ride, each in phase cutover with no
	// cancel request.
	Riders []int64
	// Lease is the mover's lease on the move: the decision is refused unless
	// the lease's session still holds the move's lock, so a mover that lost
	// its lease (and whose prepared transaction another mover may be
	// settling) can never flip.
	Lease *Lease
	// Epoch is the move's cutover_epoch read before the fence was
	// prepared. The decision is refused when it changed: the attempt was
	// settled (rolled back) while the decision was on its way.
	Epoch int64
}

// riderState is a rider's row as the decision locks it.
type riderState struct {
	ID     int64
	Phase  string
	Cancel bool
}

// checkRiders compares the riders the decision found (locked, unfinished)
// with the ones its flip carries: exactly those, each in phase cutover
// and not asked to cancel.
func checkRiders(f CutoverFlip, found []riderState) error {
	ids := make([]int64, len(found))
	for i, r := range found {
		ids[i] = r.ID
		switch {
		case Phase(r.Phase) != PhaseCutover:
			return fmt.Errorf("%w: move %d, which move %d carries, is in phase %s, not cutover", ErrPhaseConflict, r.ID, f.MoveID, r.Phase)
		case r.Cancel:
			return fmt.Errorf("%w: move %d, which move %d carries, was cancelled before the decision", ErrPhaseConflict, r.ID, f.MoveID)
		}
	}
	want := slices.Clone(f.Riders)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		return fmt.Errorf("%w: move %d carries moves %v, and its cutover was prepared for %v; nothing flipped", ErrPhaseConflict, f.MoveID, ids, want)
	}
	return nil
}

// CommitCutover is step 6 of docs/design.md 5.1: in one coordinator
// transaction it points every shard's placement at the target group, marks
// the move cutover_committed (phase cutover -> cleanup), and records the
// deferred drop of the old shards. Committing it is the decision. It is
// OpenDecision followed by Decision.Commit.
//
// An error that leaves the outcome unknown (the connection broke during
// COMMIT, or its reply is late) is returned as is; the caller must then
// settle the outcome with SettleDecision, never with a plain read.
func (c *Catalog) CommitCutover(ctx context.Context, f CutoverFlip) error {
	d, err := c.OpenDecision(ctx, f.MoveID)
	if err != nil {
		return err
	}
	defer d.Close(ctx)
	return d.Commit(ctx, f)
}

// ErrPlacementMoved: at the decision, the group's shards were no longer
// all placed on the move's source (another tool moved them). Nothing
// flipped; the move cannot succeed.
var ErrPlacementMoved = errors.New("the shard group is no longer on the move's source")

// Decision is a move's decision transaction on the coordinator, open from
// OpenDecision until Commit or Close.
type Decision struct {
	c    *Catalog
	conn *pgxpool.Conn
	tx   pgx.Tx
	id   int64
	done bool
}

// OpenDecision opens move id's decision transaction. It names itself
// (application_name decisionName(id)) before anything else, so that
// SettleDecision can end it if it is still in flight. It locks nothing: a
// cutover opens it before its write pause.
func (c *Catalog) OpenDecision(ctx context.Context, id int64) (_ *Decision, err error) {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	d := &Decision{c: c, conn: conn, id: id}
	defer func() {
		if err != nil {
			d.Close(ctx)
		}
	}()
	if d.tx, err = conn.Begin(ctx); err != nil {
		return nil, err
	}
	if _, err := d.tx.Exec(ctx, "SELECT set_config('application_name', $1, true)", decisionName(id)); err != nil {
		return nil, err
	}
	return d, nil
}

// BlockWrites, on Citus, blocks Citus-routed writes from the coordinator
// to the shards lockIDs (their metadata lock), waiting at most lockWait (0:
// no bound), in one round trip: a Citus cutover opens its decision first,
// and at the start of its pause takes this lock before the metadata locks
// on the workers and the source table lock, and keeps the decision open
// through the pause, so that the coordinator's lock is released only when
// the placements it guards have flipped. With lockTables (the coordinator
// is the move's target) it first locks their distributed tables too
// (see BlockCitusWrites). On compat, or without lockIDs, it does nothing.
func (d *Decision) BlockWrites(ctx context.Context, lockIDs []int64, lockWait time.Duration, lockTables bool) error {
	if d.c.flavor != Citus || len(lockIDs) == 0 {
		return nil
	}
	timeout := ""
	if lockWait > 0 {
		timeout = fmt.Sprintf("%dms", lockWait.Milliseconds())
	}
	return blockCitusWrites(ctx, d.tx, lockIDs, timeout, lockTables, true)
}

// Close rolls the decision back unless it committed, and returns its
// connection.
func (d *Decision) Close(ctx context.Context) {
	if d.conn == nil {
		return
	}
	if d.tx != nil && !d.done {
		_ = d.tx.Rollback(context.WithoutCancel(ctx))
	}
	d.conn.Release()
	d.conn = nil
}

// Commit makes the decision: under the catalog-write lock and the move
// row's lock it requires phase cutover, no cancel request, the epoch the
// fences were prepared under and the lease; flips the placements (on
// Citus through Citus's own function, in the coordinator's metadata);
// sets cutover_committed; records the old shards' deferred drop (on Citus
// in pg_dist_cleanup, for Citus's cleanup); and commits.
func (d *Decision) Commit(ctx context.Context, f CutoverFlip) error {
	if f.MoveID != d.id {
		return fmt.Errorf("decision of move %d used for move %d", d.id, f.MoveID)
	}
	tx := d.tx
	if err := d.decide(ctx, tx, f); err != nil {
		return err
	}
	d.done = true
	return tx.Commit(ctx)
}

func (d *Decision) decide(ctx context.Context, tx pgx.Tx, f CutoverFlip) error {
	c := d.c
	if f.Lease == nil {
		return fmt.Errorf("commit cutover of move %d: no lease", f.MoveID)
	}
	// The checks, in one round trip (the decision runs inside the write
	// pause): the catalog-write lock, the move row's lock and state, the
	// lease, and on Citus the placements as they are now.
	var phase string
	var cancel, held bool
	var epoch int64
	var riders []riderState
	on := len(f.ShardIDs)
	checks := &pgx.Batch{}
	checks.Queue("SELECT pg_advisory_xact_lock($1)", metadataLockKey)
	checks.Queue("SELECT phase, cancel_requested, cutover_epoch FROM shardmover.moves WHERE id = $1 FOR UPDATE", f.MoveID)
	checks.Queue(leaseHeldSQL, f.Lease.args()...)
	checks.Queue(`SELECT id, phase, cancel_requested FROM shardmover.moves WHERE carried_by = $1 AND phase <> ALL($2)
		ORDER BY id FOR UPDATE`, f.MoveID, terminalPhases())
	if c.flavor == Citus {
		// Someone else (Citus's own rebalancer) may have moved the group.
		checks.Queue(`SELECT count(*) FROM pg_catalog.pg_dist_placement WHERE shardid = ANY($1) AND groupid = $2`,
			f.ShardIDs, f.SourceGroup)
	}
	if err := readBatch(tx.SendBatch(ctx, checks), func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&phase, &cancel, &epoch); err != nil {
			return fmt.Errorf("lock move %d: %w", f.MoveID, err)
		}
		if err := br.QueryRow().Scan(&held); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		riders, err = pgx.CollectRows(rows, pgx.RowToStructByPos[riderState])
		if err != nil {
			return fmt.Errorf("lock the moves move %d carries: %w", f.MoveID, err)
		}
		if c.flavor == Citus {
			if err := br.QueryRow().Scan(&on); err != nil {
				return fmt.Errorf("read placements of move %d: %w", f.MoveID, err)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if Phase(phase) != PhaseCutover {
		return fmt.Errorf("%w: move %d is in phase %s, not cutover", ErrPhaseConflict, f.MoveID, phase)
	}
	if cancel {
		return fmt.Errorf("%w: move %d was cancelled before its decision", ErrPhaseConflict, f.MoveID)
	}
	if epoch != f.Epoch {
		return fmt.Errorf("%w: the cutover attempt of move %d was settled as rolled back before its decision arrived; nothing flipped",
			ErrPhaseConflict, f.MoveID)
	}
	if !held {
		return f.Lease.lostErr()
	}
	if err := checkRiders(f, riders); err != nil {
		return err
	}
	if on != len(f.ShardIDs) {
		return fmt.Errorf("%w: %d of the %d shards of move %d are still placed on group %d (Citus or someone else moved them); nothing flipped",
			ErrPlacementMoved, on, len(f.ShardIDs), f.MoveID, f.SourceGroup)
	}

	// The writes, in one round trip; any failure leaves the transaction
	// uncommitted (Commit commits only when decide returns nil).
	from, to := string(PhaseCutover), string(PhaseCleanup)
	w := &pgx.Batch{}
	if c.flavor == Citus {
		// Citus's function also refuses a shard not placed on the source
		// group, so a catalog changed underneath flips nothing.
		queueAsCitusRebalancer(w, decisionName(f.MoveID), updatePlacementsSQL, f.ShardIDs, f.SourceGroup, f.TargetGroup)
	} else {
		w.Queue(`UPDATE shardmover_catalog.pg_dist_placement SET groupid = $3
			WHERE shardid = ANY($1) AND groupid = $2`, f.ShardIDs, f.SourceGroup, f.TargetGroup)
	}
	w.Queue("UPDATE shardmover.moves SET cutover_committed = true WHERE id = $1 OR (carried_by = $1 AND phase = $2)", f.MoveID, from)
	for i, t := range f.OldTables {
		owner := f.MoveID
		if i < len(f.OldTableMoves) && f.OldTableMoves[i] != 0 {
			owner = f.OldTableMoves[i]
		}
		if c.flavor == Citus {
			w.Queue(citusCleanupSQL, t, f.SourceGroup)
		} else {
			w.Queue(`INSERT INTO shardmover.cleanup (move_id, node_group, object_type, name, policy)
				VALUES ($1, $2, $5, $3, $4)`, owner, f.SourceGroup, t, CleanupDeferred, ObjectTable)
		}
	}
	w.Queue("DELETE FROM shardmover.cleanup WHERE move_id = $1 AND policy = $2", f.MoveID, CleanupOnFailure)
	w.Queue(setPhaseSQL, f.MoveID, from, to, "", PhasePreflight)
	w.Queue(logPhaseSQL, f.MoveID, from, to, "placements flipped")
	w.Queue(setRidersPhaseSQL, ridersPhaseArgs(f.MoveID, from, to, "placements flipped", "")...)
	return readBatch(tx.SendBatch(ctx, w), func(br pgx.BatchResults) error {
		if c.flavor == Citus {
			for i := 0; i < 3; i++ {
				if _, err := br.Exec(); err != nil {
					return fmt.Errorf("flip placements of move %d: %w", f.MoveID, err)
				}
			}
		} else {
			tag, err := br.Exec()
			if err != nil {
				return fmt.Errorf("flip placements: %w", err)
			}
			if int(tag.RowsAffected()) != len(f.ShardIDs) {
				return fmt.Errorf("%w: flip placements of move %d: %d of %d shards were on group %d; the catalog changed underneath, nothing flipped",
					ErrPlacementMoved, f.MoveID, tag.RowsAffected(), len(f.ShardIDs), f.SourceGroup)
			}
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		for _, t := range f.OldTables {
			if _, err := br.Exec(); err != nil {
				if c.flavor == Citus {
					return fmt.Errorf("record the old shard %s for Citus's cleanup: %w", t, err)
				}
				return err
			}
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		tag, err := br.Exec()
		if err := setPhaseResult(f.MoveID, from, tag, err); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("log phase of move %d: %w", f.MoveID, err)
		}
		if tag, err := br.Exec(); err != nil || int(tag.RowsAffected()) != len(f.Riders) {
			return fmt.Errorf("%w: set the phase of the %d moves move %d carries: %d set (%v)", ErrPhaseConflict, len(f.Riders), f.MoveID, tag.RowsAffected(), err)
		}
		return nil
	})
}

// readBatch reads br's results with fn and closes it; the first error wins.
func readBatch(br pgx.BatchResults, fn func(pgx.BatchResults) error) error {
	err := fn(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// decisionName is the application_name of a move's decision transaction.
func decisionName(moveID int64) string { return fmt.Sprintf("shardmover_decide_%d", moveID) }

// Settlement is the settled outcome of a move's cutover decision.
type Settlement struct {
	// Committed: the decision committed; the fence must be committed (and
	// re-established if it is gone).
	Committed bool
	// Epoch is the move's cutover_epoch after settling; a new attempt
	// prepares under it.
	Epoch int64
}

// SettleDecision settles whether move id's cutover decision committed, in
// a way that cannot miss a decision still in flight (docs/design.md 5.1's
// recovery rule). It first ends any session still running the move's
// decision (pg_terminate_backend waits for it to exit: a terminated
// transaction never commits later), then takes the move row's lock, which
// a decision holds until it ends, and reads cutover_committed. When the
// decision did not commit it bumps cutover_epoch in the same transaction,
// so a decision delayed on the network that arrives later is refused.
//
// Only the holder of the move's lease (or a recoverer that took it) may
// call it. A move that does not exist settles as not committed.
func (c *Catalog) SettleDecision(ctx context.Context, id int64) (Settlement, error) {
	var st Settlement
	if _, err := c.pool.Exec(ctx, `SELECT pg_catalog.pg_terminate_backend(pid, 5000::bigint) FROM pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_backend_pid()`, decisionName(id)); err != nil {
		if ctx.Err() != nil || IsUnknownOutcome(err) {
			return st, fmt.Errorf("end the in-flight decision of move %d: %w", id, err)
		}
		// Not allowed to signal it (no pg_signal_backend): the row lock
		// below still waits for it, only without the shortcut.
		c.log.Warn("could not end an in-flight cutover decision", zap.Int64("move_id", id), zap.Error(err))
	}
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '10s'"); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, "SELECT cutover_committed, cutover_epoch FROM shardmover.moves WHERE id = $1 FOR UPDATE", id).
			Scan(&st.Committed, &st.Epoch)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("lock move %d: %w", id, err)
		}
		if st.Committed {
			return nil
		}
		st.Epoch++
		_, err = tx.Exec(ctx, "UPDATE shardmover.moves SET cutover_epoch = $2, updated_at = now() WHERE id = $1", id, st.Epoch)
		return err
	})
	if err != nil {
		return Settlement{}, fmt.Errorf("settle the cutover decision of move %d: %w", id, err)
	}
	return st, nil
}

// IsUnknownOutcome reports whether err may have come after the server
// committed (a broken connection during COMMIT): pgerr.IsUnknownOutcome.
func IsUnknownOutcome(err error) bool { return pgerr.IsUnknownOutcome(err) }

// Lease is the right to run one move: a session advisory lock held on a
// dedicated coordinator connection. When the holder dies, its connection
// drops, the lock is released, and another mover may claim the move.
//
// A move's lock is the two-int4 advisory lock (moveLockClass, move id):
// in pg_locks, classid = moveLockClass, objid = the id, objsubid = 2. The
// class keeps move locks apart from the other classes (LockRebalance,
// LockLeader), and the form is the one every mover version takes, so an
// older and a newer mover never run the same move. The second key is an
// int4, so TryLease refuses (ErrInvalid) a move id outside int32 rather
// than narrowing it: two ids 2^32 apart would share one lock.
type Lease struct {
	conn   *pgx.Conn
	pid    uint32
	class  int32
	key    int32
	MoveID int64
}

// moveLockClass is the first key of move advisory locks.
const moveLockClass int32 = 0x534d

// TryLease claims move id; ok is false when another mover holds it. An id
// that does not fit the lock's int4 key is refused (ErrInvalid).
func (c *Catalog) TryLease(ctx context.Context, id int64) (*Lease, bool, error) {
	key, err := moveLockKey(id)
	if err != nil {
		return nil, false, err
	}
	l, ok, err := c.TryLock(ctx, moveLockClass, key)
	if l != nil {
		l.MoveID = id
	}
	return l, ok, err
}

// moveLockKey is move id's advisory lock key: the id itself, refused when
// it does not fit in int32 (narrowing would give ids 2^32 apart one lock).
func moveLockKey(id int64) (int32, error) {
	if id < math.MinInt32 || id > math.MaxInt32 {
		return 0, invalidf("move %d cannot be leased: move lock keys are 32-bit (ids up to %d)", id, int64(math.MaxInt32))
	}
	return int32(id), nil
}

// Advisory lock classes besides moves.
const (
	// LockRebalance is held by whoever runs a rebalance or drain job.
	LockRebalance int32 = 0x5352
	// LockLeader is held by the leading daemon.
	LockLeader int32 = 0x534c
)

// TryLock takes session advisory lock (class, id) on a dedicated
// coordinator connection; ok is false when another session holds it.
func (c *Catalog) TryLock(ctx context.Context, class, id int32) (*Lease, bool, error) {
	cfg := c.pool.Config().ConnConfig.Copy()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, false, fmt.Errorf("connect to coordinator for a move lease: %w", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, $2::int)", class, id).Scan(&ok); err != nil {
		conn.Close(ctx)
		return nil, false, err
	}
	if !ok {
		conn.Close(ctx)
		return nil, false, nil
	}
	return &Lease{conn: conn, pid: conn.PgConn().PID(), class: class, key: id, MoveID: int64(id)}, true, nil
}

// ErrLeaseLost means a lease's session no longer holds its lock (its
// connection broke, or the coordinator restarted): whoever held it must stop
// acting on what it guarded.
var ErrLeaseLost = errors.New("lease lost")

// Alive reports whether the lease's connection still holds the lock.
func (l *Lease) Alive(ctx context.Context) bool {
	return l.Held(ctx) == nil
}

// Held checks, on the lease's own connection, that its session still holds
// the lock; it returns ErrLeaseLost (wrapped) when it does not or when the
// connection is gone.
func (l *Lease) Held(ctx context.Context) error {
	if l.conn == nil {
		return fmt.Errorf("%w: lock %d/%d is not held", ErrLeaseLost, l.class, l.key)
	}
	var held bool
	err := l.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND classid = $1 AND objid = $2 AND objsubid = 2 AND pid = pg_backend_pid())`, uint32(l.class), uint32(l.key)).Scan(&held)
	if err != nil {
		return fmt.Errorf("%w: lock %d/%d: %v", ErrLeaseLost, l.class, l.key, err)
	}
	if !held {
		return fmt.Errorf("%w: lock %d/%d is no longer held", ErrLeaseLost, l.class, l.key)
	}
	return nil
}

// checkTx checks, inside a coordinator transaction, that the lease's
// session still holds its lock.
func (l *Lease) checkTx(ctx context.Context, tx pgx.Tx) error {
	var held bool
	if err := tx.QueryRow(ctx, leaseHeldSQL, l.args()...).Scan(&held); err != nil {
		return err
	}
	if !held {
		return l.lostErr()
	}
	return nil
}

// leaseHeldSQL reads whether the lease's session still holds its lock
// (its arguments: Lease.args).
const leaseHeldSQL = `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
	AND classid = $1 AND objid = $2 AND objsubid = 2 AND pid = $3)`

func (l *Lease) args() []any { return []any{uint32(l.class), uint32(l.key), l.pid} }

func (l *Lease) lostErr() error {
	return fmt.Errorf("%w: the session holding lock %d/%d (move %d) is gone; nothing changed", ErrLeaseLost, l.class, l.key, l.MoveID)
}

// Release gives the lock up. It unlocks before closing the connection:
// a closed connection's backend drops its locks only when it exits, a
// moment later, and whoever takes the lock next (this process's next
// step, often) must not find it still held.
func (l *Lease) Release(ctx context.Context) {
	if l.conn == nil {
		return
	}
	_, _ = l.conn.Exec(ctx, "SELECT pg_advisory_unlock_all()")
	_ = l.conn.Close(ctx)
}

// UnfinishedJobs lists jobs of the given kinds that still have unfinished
// moves, oldest first.
func (c *Catalog) UnfinishedJobs(ctx context.Context, kinds ...string) ([]Job, error) {
	ok, err := c.journalInstalled(ctx)
	if err != nil || !ok {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, "SELECT "+jobColumns+` FROM shardmover.jobs j
		WHERE kind = ANY($1) AND EXISTS (SELECT 1 FROM shardmover.moves m WHERE m.job_id = j.id
			AND m.phase <> ALL($2))
		ORDER BY id`, kinds, terminalPhases())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanJob)
}

// SetJobState records a job's state without finishing it.
func (c *Catalog) SetJobState(ctx context.Context, id int64, state JobState) error {
	_, err := c.pool.Exec(ctx, "UPDATE shardmover.jobs SET state = $2 WHERE id = $1", id, state)
	return err
}

// DeadLease is a lease that holds nothing: what a mover keeps after losing
// its lease while the coordinator cannot be reached. Held reports it lost;
// Release does nothing.
func DeadLease(moveID int64) *Lease {
	key, _ := moveLockKey(moveID) // 0 when out of range: it is never held anyway
	return &Lease{MoveID: moveID, class: moveLockClass, key: key}
}
