package mover

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/shardmover/shardmover/metadata"
)

// Store is everything the mover asks of the coordinator: the journal it
// records moves in and the cluster it reads and connects to. The engine
// declares what it uses instead of taking metadata's whole catalog (and its
// pool); *metadata.Catalog satisfies it, and tests may wrap one to inject
// faults at a journal write.
type Store interface {
	Journal
	ClusterReader
}

// Journal is the move journal: moves, jobs, leases, cleanup records and the
// cutover decision (docs/design.md 6).
type Journal interface {
	InstallJournal(ctx context.Context) error

	CreateJob(ctx context.Context, kind, strategy string, specs []metadata.MoveSpec) (metadata.Job, []metadata.Move, error)
	FinishJob(ctx context.Context, id int64, state metadata.JobState, errText string) error
	FinishLeaderJob(ctx context.Context, l *metadata.Leadership, id int64, state metadata.JobState, errText string) error
	VerifyLeadership(ctx context.Context, l *metadata.Leadership) error

	Move(ctx context.Context, id int64) (metadata.Move, error)
	Moves(ctx context.Context, f metadata.MoveFilter) ([]metadata.Move, error)
	TryLease(ctx context.Context, id int64) (*metadata.Lease, bool, error)
	SetPhaseLeased(ctx context.Context, lease *metadata.Lease, id int64, from, to, msg, errText string) error
	SetProgress(ctx context.Context, id, bytesCopied, bytesTotal int64, sourceLSN, appliedLSN string) error
	SetCarryOverDue(ctx context.Context, lease *metadata.Lease, id int64, due bool) error
	RequestCancel(ctx context.Context, id int64) (metadata.Move, error)
	Carry(ctx context.Context, lead int64, riders []int64) error
	Stream(ctx context.Context, lead int64) ([]metadata.Move, error)
	DropRiders(ctx context.Context, lease *metadata.Lease, lead int64, from metadata.Phase, riders []int64, why string) error

	AddCleanup(ctx context.Context, moveID int64, nodeGroup int32, objType metadata.ObjectKind, name, policy string) error
	RemoveCleanup(ctx context.Context, id int64) error
	Cleanups(ctx context.Context, moveID int64) ([]metadata.CleanupRecord, error)

	OpenDecision(ctx context.Context, id int64) (*metadata.Decision, error)
	CommitCutover(ctx context.Context, f metadata.CutoverFlip) error
	SettleDecision(ctx context.Context, id int64) (metadata.Settlement, error)
}

// ClusterReader reads the cluster's layout and opens sessions on its
// nodes; on Citus it also answers what Citus allows right now.
type ClusterReader interface {
	Flavor() metadata.Flavor
	Nodes(ctx context.Context) ([]metadata.Node, error)
	Snapshot(ctx context.Context, opts metadata.SnapshotOptions) (*metadata.Cluster, error)
	PlacementGroupsOf(ctx context.Context, ids []int64) (map[int64][]int32, error)
	DropUnlessPlaced(ctx context.Context, shard int64, group int32, drop func(context.Context) error) error
	SetSourceFilenodes(ctx context.Context, id int64, nodes []int64) error
	SourceFilenodes(ctx context.Context, id int64) ([]int64, error)
	NodeSettings(host string, port int) metadata.ConnSettings
	ConnectNode(ctx context.Context, host string, port int) (*pgx.Conn, error)

	WhyNotMovable(ctx context.Context, id int64) (string, error)
	CitusBusy(ctx context.Context) (string, error)
	CleanupCitusOrphans(ctx context.Context) error
	EnsureReferenceTables(ctx context.Context) error
}

var _ Store = (*metadata.Catalog)(nil)
