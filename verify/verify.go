package verify

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardmover/shardmover/internal/ratelimit"
	"github.com/shardmover/shardmover/metadata"
)

// DefaultMaxKeys is how many differing keys a difference lists.
const DefaultMaxKeys = 10

// Options selects what Run verifies and how gently.
type Options struct {
	// Exactly one of ShardID, Group and All.
	ShardID int64
	Group   *GroupKey
	All     bool
	// BytesPerSecond and RowsPerSecond pace the data reads (0: no limit).
	BytesPerSecond int64
	RowsPerSecond  int64
	// MaxKeys bounds the differing keys listed per shard (default 10).
	MaxKeys int
	// BatchPages is the number of heap pages read per batch (default 1024,
	// fewer when throttled to a low byte rate).
	BatchPages int64
}

// GroupKey names a shard group: colocation id and shard index.
type GroupKey struct {
	ColocationID int32
	Index        int
}

func (g GroupKey) String() string { return fmt.Sprintf("%d:%d", g.ColocationID, g.Index) }

// ParseGroup reads a shard group written <colocationid>:<index>.
func ParseGroup(s string) (GroupKey, error) {
	c, i, ok := strings.Cut(strings.TrimSpace(s), ":")
	cid, err1 := strconv.ParseInt(c, 10, 32)
	idx, err2 := strconv.ParseInt(i, 10, 32)
	if !ok || err1 != nil || err2 != nil || cid < 0 || idx < 0 {
		return GroupKey{}, metadata.Invalidf("--group %q is not a shard group: write it as COLOCATION:INDEX, e.g. 1:0", s)
	}
	return GroupKey{ColocationID: int32(cid), Index: int(idx)}, nil
}

// Validate checks the selection and limits without connecting.
func (o Options) Validate() error {
	n := 0
	if o.ShardID != 0 {
		n++
	}
	if o.Group != nil {
		n++
	}
	if o.All {
		n++
	}
	switch {
	case n != 1:
		return metadata.Invalidf("give exactly one of --shard ID, --group COLOCATION:INDEX and --all")
	case o.ShardID < 0:
		return metadata.Invalidf("--shard must be a positive shard id, got %d", o.ShardID)
	case o.BytesPerSecond < 0 || o.RowsPerSecond < 0:
		return metadata.Invalidf("--throttle must be positive")
	case o.MaxKeys < 0:
		return metadata.Invalidf("the number of keys to list must not be negative")
	}
	return nil
}

// Report is what Run found.
type Report struct {
	OK      bool                   `json:"ok"`
	Catalog metadata.CatalogReport `json:"catalog"`
	// DataCompared is false for All: the catalogs only.
	DataCompared bool          `json:"data_compared"`
	Shards       []ShardResult `json:"shards,omitempty"`
}

// Side is one copy of a shard's data.
type Side struct {
	Node     string `json:"node"`
	Table    string `json:"table"`
	Rows     int64  `json:"rows"`
	Checksum string `json:"checksum"`
}

// ShardResult is the data comparison of one shard.
type ShardResult struct {
	ShardID int64  `json:"shard_id"`
	Table   string `json:"table"`
	// Compared is false when the shard has no other copy (or no single
	// placement): then Live alone is filled, or nothing.
	Compared bool  `json:"compared"`
	Live     *Side `json:"live,omitempty"`
	// Copy is the fenced old copy compared with, and the move that left it.
	Copy      *Side      `json:"copy,omitempty"`
	MoveID    int64      `json:"move_id,omitempty"`
	MovedAt   *time.Time `json:"moved_at,omitempty"`
	Match     bool       `json:"match"`
	Differing []KeyDiff  `json:"differing_keys,omitempty"`
	Message   string     `json:"message"`
}

// KeyDiff is one differing key.
type KeyDiff struct {
	Key string `json:"key"`
	// What: "changed" (both have the row, its contents differ),
	// "missing" (only the old copy has it), "added" (only the live table).
	What string `json:"what"`
}

// Problem reports whether the result counts against OK.
func (r ShardResult) Problem() bool { return r.Compared && !r.Match }

// Run verifies the catalogs and, for a shard or group, its data.
func Run(ctx context.Context, cat *metadata.Catalog, opts Options) (Report, error) {
	if err := opts.Validate(); err != nil {
		return Report{}, err
	}
	if opts.MaxKeys == 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	var rep Report
	var shards []metadata.Shard
	var cl *metadata.Cluster
	if !opts.All {
		var err error
		cl, err = cat.Snapshot(ctx, metadata.SnapshotOptions{SkipSizes: true})
		if err != nil {
			return Report{}, err
		}
		if shards, err = selectShards(cl, opts); err != nil {
			return Report{}, err
		}
	}
	cr, err := cat.VerifyCatalog(ctx)
	if err != nil {
		return Report{}, err
	}
	rep.Catalog = cr
	rep.OK = cr.OK()
	if opts.All {
		return rep, nil
	}
	rep.DataCompared = true
	moves, err := cat.Moves(ctx, metadata.MoveFilter{})
	if err != nil {
		return Report{}, err
	}
	cleanups, err := cat.Cleanups(ctx, 0)
	if err != nil {
		return Report{}, err
	}
	r := &reader{cat: cat, opts: opts, bytes: ratelimit.New(opts.BytesPerSecond), rows: ratelimit.New(opts.RowsPerSecond)}
	for _, s := range shards {
		res, err := r.compareShard(ctx, cl, moves, cleanups, s)
		if err != nil {
			return Report{}, fmt.Errorf("verify shard %d: %w", s.ID, err)
		}
		if res.Problem() {
			rep.OK = false
		}
		rep.Shards = append(rep.Shards, res)
	}
	return rep, nil
}

func selectShards(cl *metadata.Cluster, opts Options) ([]metadata.Shard, error) {
	if opts.ShardID != 0 {
		for _, s := range cl.Shards {
			if s.ID == opts.ShardID {
				return []metadata.Shard{s}, nil
			}
		}
		return nil, fmt.Errorf("%w: there is no shard %d; `shardmover status` lists the tables", metadata.ErrNotFound, opts.ShardID)
	}
	for _, g := range cl.Groups {
		if g.ColocationID != opts.Group.ColocationID || g.Index != opts.Group.Index {
			continue
		}
		ids := map[int64]bool{}
		for _, id := range g.ShardIDs {
			ids[id] = true
		}
		var out []metadata.Shard
		for _, s := range cl.Shards {
			if ids[s.ID] {
				out = append(out, s)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
		return out, nil
	}
	return nil, fmt.Errorf("%w: there is no shard group %s; `shardmover status -o json` lists the groups", metadata.ErrNotFound, opts.Group)
}

// fencedCopy finds the old copy of shard s kept by the newest done move that
// carried it to group, through that move's deferred cleanup record (the
// fenced name carries the id of the move's stream, metadata.Move.StreamID).
func fencedCopy(moves []metadata.Move, cleanups []metadata.CleanupRecord, s metadata.Shard, group int32) (metadata.Move, metadata.CleanupRecord, bool) {
	for i := len(moves) - 1; i >= 0; i-- {
		m := moves[i]
		if m.Phase != "done" || m.TargetGroup != group || !containsID(m.ShardIDs, s.ID) {
			continue
		}
		want := metadata.QualifiedName(pgx.Identifier{s.Schema, metadata.FencedName(s.Name(), m.StreamID())})
		for _, c := range cleanups {
			if c.MoveID == nil || *c.MoveID != m.ID || c.Policy != metadata.CleanupDeferred || c.ObjectType != "table" {
				continue
			}
			if id, err := metadata.ParseQualifiedName(c.Name); err == nil && metadata.QualifiedName(id) == want {
				return m, c, true
			}
		}
		return metadata.Move{}, metadata.CleanupRecord{}, false
	}
	return metadata.Move{}, metadata.CleanupRecord{}, false
}

func containsID(ids []int64, id int64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func (r *reader) compareShard(ctx context.Context, cl *metadata.Cluster, moves []metadata.Move, cleanups []metadata.CleanupRecord,
	s metadata.Shard) (ShardResult, error) {
	res := ShardResult{ShardID: s.ID, Table: metadata.DisplayQualifiedName(metadata.QualifiedName(s.Ident()))}
	var placements []metadata.Placement
	for _, p := range cl.Placements {
		if p.ShardID == s.ID {
			placements = append(placements, p)
		}
	}
	if len(placements) != 1 {
		res.Message = fmt.Sprintf("not compared: shard %d has %d placements (see the catalog findings)", s.ID, len(placements))
		return res, nil
	}
	live, ok := cl.NodeByGroup(placements[0].GroupID)
	if !ok {
		res.Message = fmt.Sprintf("not compared: its placement names node group %d, which has no node", placements[0].GroupID)
		return res, nil
	}
	liveConn, err := r.cat.ConnectNode(ctx, live.Host, live.Port)
	if err != nil {
		return res, err
	}
	defer liveConn.Close(ctx)
	liveSum, found, err := r.checksum(ctx, liveConn, s.Ident())
	if err != nil {
		return res, fmt.Errorf("checksum %s on %s: %w", res.Table, live.Addr(), err)
	}
	if !found {
		res.Message = fmt.Sprintf("not compared: %s does not exist on %s (see the catalog findings)", res.Table, live.Addr())
		return res, nil
	}
	res.Live = &Side{Node: live.Addr(), Table: res.Table, Rows: liveSum.rows, Checksum: liveSum.String()}
	m, rec, ok := fencedCopy(moves, cleanups, s, placements[0].GroupID)
	if !ok {
		res.Message = "not compared: no other copy of this shard is kept (no finished move's fenced copy awaits deferred drop)"
		return res, nil
	}
	old, ok := cl.NodeByGroup(rec.NodeGroup)
	if !ok {
		res.Message = fmt.Sprintf("not compared: the old copy of move %d is on node group %d, which has no node", m.ID, rec.NodeGroup)
		return res, nil
	}
	oldIdent, err := metadata.ParseQualifiedName(rec.Name)
	if err != nil {
		return res, err
	}
	oldConn, err := r.cat.ConnectNode(ctx, old.Host, old.Port)
	if err != nil {
		return res, err
	}
	defer oldConn.Close(ctx)
	oldSum, found, err := r.checksum(ctx, oldConn, oldIdent)
	if err != nil {
		return res, fmt.Errorf("checksum %s on %s: %w", oldIdent.Sanitize(), old.Addr(), err)
	}
	oldName := metadata.DisplayQualifiedName(metadata.QualifiedName(oldIdent))
	if !found {
		res.Message = fmt.Sprintf("not compared: the old copy %s of move %d is recorded but missing on %s", oldName, m.ID, old.Addr())
		return res, nil
	}
	movedAt := rec.CreatedAt
	res.Compared = true
	res.Copy = &Side{Node: old.Addr(), Table: oldName, Rows: oldSum.rows, Checksum: oldSum.String()}
	res.MoveID, res.MovedAt = m.ID, &movedAt
	if liveSum == oldSum {
		res.Match = true
		res.Message = fmt.Sprintf("matches the old copy kept by move %d on %s: %d rows", m.ID, old.Addr(), liveSum.rows)
		return res, nil
	}
	diffs, note, err := r.differingKeys(ctx, liveConn, s.Ident(), oldConn, oldIdent)
	if err != nil {
		return res, fmt.Errorf("find differing keys of %s: %w", res.Table, err)
	}
	res.Differing = diffs
	res.Message = fmt.Sprintf("differs from the old copy kept by move %d on %s (%d rows live, %d in the copy); writes since the move at %s also explain a difference",
		m.ID, old.Addr(), liveSum.rows, oldSum.rows, movedAt.UTC().Format(time.RFC3339))
	if note != "" {
		res.Message += "; " + note
	}
	return res, nil
}
