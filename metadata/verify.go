package metadata

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Kinds of catalog findings (VerifyCatalog). The first seven are problems
// (an object finding is information when it says a table's objects could
// not be compared); kept and in_flight are information.
const (
	// FindingPlacement: a shard with no placement or more than one, or a
	// placement on a node group with no node, an inactive node, or no shard.
	FindingPlacement = "placement"
	// FindingRange: a table's hash ranges leave a gap or overlap.
	FindingRange = "range"
	// FindingTable: a shard table missing on the node its placement names,
	// or present on a node it does not name.
	FindingTable = "table"
	// FindingUnknownShard: a table <table>_<digits> of a distributed table
	// whose shard id pg_dist_shard does not know.
	FindingUnknownShard = "unknown_shard"
	// FindingOrphan: a fenced copy <shard>_moved_<moveid> whose move is
	// finished (or unknown) and no deferred cleanup record names it.
	FindingOrphan = "orphan"
	// FindingObject: a shard placement that lacks an object (trigger,
	// foreign key, policy, extended statistics, storage parameter) that the
	// other shards of its table have, has one they do not, or has a
	// different access method, row-level security or definition
	// (verifyobjects.go).
	FindingObject = "object"
	// FindingUnreachable: a node that could not be checked.
	FindingUnreachable = "unreachable"
	// FindingKept: a fenced old copy recorded for deferred drop (fine).
	FindingKept = "kept"
	// FindingInFlight: a copy that an unfinished move owns (its target copy,
	// or its fence during the cutover) (fine).
	FindingInFlight = "in_flight"
)

// Finding is one result of VerifyCatalog.
type Finding struct {
	Kind    string `json:"kind"`
	Problem bool   `json:"problem"`
	ShardID int64  `json:"shard_id,omitempty"`
	Node    string `json:"node,omitempty"`
	// Table is the schema-qualified table concerned, for people
	// (DisplayQualifiedName).
	Table string `json:"table,omitempty"`
	// Object names the object of an object finding, for people:
	// `trigger "audit"`, `storage parameter fillfactor=70`.
	Object  string `json:"object,omitempty"`
	MoveID  int64  `json:"move_id,omitempty"`
	Message string `json:"message"`
	// Since is when the deferred cleanup record of a kept copy was written:
	// the move's decision.
	Since *time.Time `json:"since,omitempty"`
}

// CatalogReport is what VerifyCatalog found.
type CatalogReport struct {
	Nodes    int       `json:"nodes_checked"`
	Shards   int       `json:"shards_checked"`
	Findings []Finding `json:"findings"`
}

// OK reports whether no finding is a problem.
func (r CatalogReport) OK() bool {
	for _, f := range r.Findings {
		if f.Problem {
			return false
		}
	}
	return true
}

// Problems returns the findings that are problems.
func (r CatalogReport) Problems() []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Problem {
			out = append(out, f)
		}
	}
	return out
}

const maxFencedIdentBytes = 63

// FencedName is the fenced name of an old shard table after move moveID:
// <name>_moved_<moveid>. A name that would pass PostgreSQL's 63 bytes keeps
// a prefix cut at a character boundary and adds a hash of the whole name
// before the suffix. It must stay the same function as the mover's
// (mover/move.go movedName), which names the tables it fences.
func FencedName(name string, moveID int64) string {
	suffix := "_moved_" + strconv.FormatInt(moveID, 10)
	if len(name)+len(suffix) <= maxFencedIdentBytes {
		return name + suffix
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	tag := fmt.Sprintf("_%08x", h.Sum32())
	keep := maxFencedIdentBytes - len(suffix) - len(tag)
	for keep > 0 && !utf8.RuneStart(name[keep]) {
		keep--
	}
	return name[:keep] + tag + suffix
}

var fencedRE = regexp.MustCompile(`^(.+)_moved_([0-9]+)$`)

// catalogState is what VerifyCatalog reads from the coordinator.
type catalogState struct {
	nodes      []Node
	tables     []Table
	shards     []Shard
	placements []Placement
	moves      []Move
	cleanups   []CleanupRecord
}

// VerifyCatalog checks the catalogs against themselves and against the
// nodes (docs/design.md section 1): exactly one placement per shard, on an
// active registered node; each hash-distributed table's ranges cover the
// int32 space without gap or overlap; every shard table exists on the node
// its placement names and on no other primary node; no table of a
// distributed table's name with an unknown shard id; no fenced copy
// (<shard>_moved_<moveid>) that no deferred cleanup record keeps and no
// unfinished move owns; every placement has the objects (triggers, foreign
// keys, policies, statistics, storage parameters, access method, row-level
// security) the other shards of its table have (verifyobjects.go). It
// changes nothing. A node that cannot be reached is a finding (a problem
// when it is active), not an error.
func (c *Catalog) VerifyCatalog(ctx context.Context) (CatalogReport, error) {
	if err := c.requireInstalled(ctx); err != nil {
		return CatalogReport{}, err
	}
	var st catalogState
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		if st.nodes, err = readNodes(ctx, tx, c.t("pg_dist_node")); err != nil {
			return err
		}
		if st.tables, err = c.readTables(ctx, tx); err != nil {
			return err
		}
		if st.shards, err = c.readShards(ctx, tx); err != nil {
			return err
		}
		st.placements, err = c.readPlacements(ctx, tx)
		return err
	})
	if err != nil {
		return CatalogReport{}, fmt.Errorf("read catalogs: %w", err)
	}
	if st.moves, err = c.Moves(ctx, MoveFilter{}); err != nil {
		return CatalogReport{}, fmt.Errorf("read the journal's moves: %w", err)
	}
	if st.cleanups, err = c.Cleanups(ctx, 0); err != nil {
		return CatalogReport{}, fmt.Errorf("read the journal's cleanup records: %w", err)
	}
	// On Citus a move's old shards wait for Citus's deferred cleanup.
	citusKept, err := c.citusDeferredDrops(ctx)
	if err != nil {
		return CatalogReport{}, err
	}
	st.cleanups = append(st.cleanups, citusKept...)
	rep := CatalogReport{Shards: len(st.shards)}
	rep.Findings = append(rep.Findings, checkPlacements(st)...)
	rep.Findings = append(rep.Findings, checkRanges(st)...)
	found, checked, objs, nodeFindings := c.scanNodes(ctx, st)
	rep.Nodes = len(checked)
	rep.Findings = append(rep.Findings, nodeFindings...)
	rep.Findings = append(rep.Findings, checkPresence(st, found, checked)...)
	for _, t := range st.tables {
		rep.Findings = append(rep.Findings, compareObjects(t.DisplayName(), objs[t.QualifiedName()])...)
	}
	return rep, nil
}

func primaryNodeOfGroup(nodes []Node, group int32) (Node, bool) {
	for _, n := range nodes {
		if n.GroupID == group && (n.Role == "primary" || n.Role == "") {
			return n, true
		}
	}
	return Node{}, false
}

func shardDisplay(s Shard) string { return DisplayQualifiedName(QualifiedName(s.Ident())) }

func checkPlacements(st catalogState) []Finding {
	var out []Finding
	byShard := map[int64][]Placement{}
	for _, p := range st.placements {
		byShard[p.ShardID] = append(byShard[p.ShardID], p)
	}
	known := map[int64]bool{}
	for _, s := range st.shards {
		known[s.ID] = true
		ps := byShard[s.ID]
		switch {
		case len(ps) == 0:
			out = append(out, Finding{Kind: FindingPlacement, Problem: true, ShardID: s.ID, Table: shardDisplay(s),
				Message: fmt.Sprintf("shard %d has no placement", s.ID)})
		case len(ps) > 1:
			groups := make([]string, len(ps))
			for i, p := range ps {
				groups[i] = strconv.Itoa(int(p.GroupID))
			}
			out = append(out, Finding{Kind: FindingPlacement, Problem: true, ShardID: s.ID, Table: shardDisplay(s),
				Message: fmt.Sprintf("shard %d has %d placements (node groups %s); shardmover keeps exactly one", s.ID, len(ps), strings.Join(groups, ", "))})
		}
		for _, p := range ps {
			n, ok := primaryNodeOfGroup(st.nodes, p.GroupID)
			switch {
			case !ok:
				out = append(out, Finding{Kind: FindingPlacement, Problem: true, ShardID: s.ID, Table: shardDisplay(s),
					Message: fmt.Sprintf("placement %d of shard %d names node group %d, which has no registered node", p.ID, s.ID, p.GroupID)})
			case !n.IsActive:
				out = append(out, Finding{Kind: FindingPlacement, Problem: true, ShardID: s.ID, Table: shardDisplay(s), Node: n.Addr(),
					Message: fmt.Sprintf("placement %d of shard %d is on %s, which is not active", p.ID, s.ID, n.Addr())})
			}
		}
	}
	for _, p := range st.placements {
		if !known[p.ShardID] {
			out = append(out, Finding{Kind: FindingPlacement, Problem: true, ShardID: p.ShardID,
				Message: fmt.Sprintf("placement %d names shard %d, which pg_dist_shard does not have", p.ID, p.ShardID)})
		}
	}
	return out
}

// checkRanges checks that each hash-distributed table's shards tile the
// int32 space: the first starts at MinInt32, each next one starts right
// after the previous one ends (64-bit arithmetic, as HashRanges computes
// them), and the last ends at MaxInt32.
func checkRanges(st catalogState) []Finding {
	var out []Finding
	for _, t := range st.tables {
		if t.Method != "h" {
			continue
		}
		var shards []Shard
		for _, s := range st.shards {
			if s.Schema == t.Schema && s.Table == t.Name {
				shards = append(shards, s)
			}
		}
		sort.Slice(shards, func(i, j int) bool {
			if shards[i].Min != shards[j].Min {
				return shards[i].Min < shards[j].Min
			}
			return shards[i].ID < shards[j].ID
		})
		name := t.DisplayName()
		if len(shards) == 0 {
			out = append(out, Finding{Kind: FindingRange, Problem: true, Table: name,
				Message: fmt.Sprintf("table %s has no shards", name)})
			continue
		}
		next := int64(math.MinInt32) // the first hash value not yet covered
		for _, s := range shards {
			lo, hi := int64(s.Min), int64(s.Max)
			switch {
			case lo > hi:
				out = append(out, Finding{Kind: FindingRange, Problem: true, Table: name, ShardID: s.ID,
					Message: fmt.Sprintf("shard %d of %s has an empty range [%d, %d]", s.ID, name, lo, hi)})
				continue
			case lo > next:
				out = append(out, Finding{Kind: FindingRange, Problem: true, Table: name, ShardID: s.ID,
					Message: fmt.Sprintf("table %s has a gap: no shard covers hashes [%d, %d]", name, next, lo-1)})
			case lo < next:
				out = append(out, Finding{Kind: FindingRange, Problem: true, Table: name, ShardID: s.ID,
					Message: fmt.Sprintf("table %s has an overlap: shard %d starts at %d, but hashes up to %d are already covered", name, s.ID, lo, next-1)})
			}
			if hi+1 > next {
				next = hi + 1
			}
		}
		if next <= math.MaxInt32 {
			out = append(out, Finding{Kind: FindingRange, Problem: true, Table: name,
				Message: fmt.Sprintf("table %s has a gap: no shard covers hashes [%d, %d]", name, next, int64(math.MaxInt32))})
		}
	}
	return out
}

// scanNodes lists the tables of every primary node in the schemas of the
// distributed tables and classifies those that look like shards or fenced
// copies. found maps a known shard id to the node groups holding its table;
// checked holds the groups whose node answered. On the same connection it
// reads, in one batch, the objects of the shard tables there that their
// placement names and no unfinished move holds: objs maps a distributed
// table (Table.QualifiedName) to its shards' objects.
func (c *Catalog) scanNodes(ctx context.Context, st catalogState) (map[int64]map[int32]bool, map[int32]bool, map[string][]shardObjects, []Finding) {
	found := map[int64]map[int32]bool{}
	checked := map[int32]bool{}
	objs := map[string][]shardObjects{}
	var out []Finding
	placedOn := map[int64]int32{}
	for _, p := range st.placements {
		placedOn[p.ShardID] = p.GroupID
	}
	moving := map[int64]bool{}
	for _, m := range st.moves {
		if !m.Terminal() {
			for _, id := range m.ShardIDs {
				moving[id] = true
			}
		}
	}
	schemaSet := map[string]bool{}
	tablesBySchema := map[string][]Table{}
	for _, t := range st.tables {
		schemaSet[t.Schema] = true
		tablesBySchema[t.Schema] = append(tablesBySchema[t.Schema], t)
	}
	schemas := make([]string, 0, len(schemaSet))
	for s := range schemaSet {
		schemas = append(schemas, s)
	}
	sort.Strings(schemas)
	shardByKey := map[string]Shard{} // schema \x00 table \x00 id
	for _, s := range st.shards {
		shardByKey[s.Schema+"\x00"+s.Table+"\x00"+strconv.FormatInt(s.ID, 10)] = s
	}
	movesByID := map[int64]Move{}
	for _, m := range st.moves {
		movesByID[m.ID] = m
	}
	kept := map[string]CleanupRecord{} // group \x00 qualified name
	for _, r := range st.cleanups {
		if r.Policy == CleanupDeferred && r.ObjectType == ObjectTable {
			kept[strconv.Itoa(int(r.NodeGroup))+"\x00"+normalizeQualified(r.Name)] = r
		}
	}
	for _, n := range st.nodes {
		if n.Role != "primary" && n.Role != "" {
			continue
		}
		if len(schemas) == 0 {
			checked[n.GroupID] = true
			continue
		}
		conn, rels, err := c.nodeTables(ctx, n, schemas)
		if err != nil {
			out = append(out, Finding{Kind: FindingUnreachable, Problem: n.IsActive, Node: n.Addr(),
				Message: fmt.Sprintf("could not check %s: %v", n.Addr(), err)})
			continue
		}
		checked[n.GroupID] = true
		var placedHere []Shard // shard tables whose objects to read here
		for _, r := range rels {
			schema, rel := r.schema, r.name
			qualified := QualifiedName(pgx.Identifier{schema, rel})
			display := DisplayQualifiedName(qualified)
			if t, id, ok := shardLike(tablesBySchema[schema], rel); ok {
				// On Citus a move's old shards keep their names until
				// Citus's deferred cleanup drops them.
				if rec, ok := kept[strconv.Itoa(int(n.GroupID))+"\x00"+qualified]; ok {
					var moveID int64
					if rec.MoveID != nil {
						moveID = *rec.MoveID
					}
					out = append(out, Finding{Kind: FindingKept, Node: n.Addr(), Table: display, MoveID: moveID,
						Message: fmt.Sprintf("%s on %s is an old copy of a moved shard, recorded for Citus's deferred cleanup", display, n.Addr())})
					continue
				}
				if s, known := shardByKey[schema+"\x00"+t.Name+"\x00"+id]; known {
					if found[s.ID] == nil {
						found[s.ID] = map[int32]bool{}
					}
					found[s.ID][n.GroupID] = true
					if r.kind == "r" && placedOn[s.ID] == n.GroupID && !moving[s.ID] {
						placedHere = append(placedHere, s)
					}
				} else {
					out = append(out, Finding{Kind: FindingUnknownShard, Problem: true, Node: n.Addr(), Table: display,
						Message: fmt.Sprintf("%s on %s looks like a shard of %s, but pg_dist_shard has no shard %s of it", display, n.Addr(), t.DisplayName(), id)})
				}
				continue
			}
			m := fencedRE.FindStringSubmatch(rel)
			if m == nil || !fencedOfTable(tablesBySchema[schema], m[1]) {
				continue
			}
			moveID, err := strconv.ParseInt(m[2], 10, 64)
			if err != nil {
				continue
			}
			if rec, ok := kept[strconv.Itoa(int(n.GroupID))+"\x00"+qualified]; ok {
				since := rec.CreatedAt
				out = append(out, Finding{Kind: FindingKept, Node: n.Addr(), Table: display, MoveID: moveID, Since: &since,
					Message: fmt.Sprintf("%s on %s is the old copy kept by move %d since %s, recorded for deferred drop", display, n.Addr(), moveID, since.UTC().Format(time.RFC3339))})
				continue
			}
			if mv, ok := movesByID[moveID]; ok && !mv.Terminal() {
				out = append(out, Finding{Kind: FindingInFlight, Node: n.Addr(), Table: display, MoveID: moveID,
					Message: fmt.Sprintf("%s on %s is the fence of move %d, which is still %s", display, n.Addr(), moveID, mv.Phase)})
				continue
			}
			why := fmt.Sprintf("move %d is not in the journal", moveID)
			if mv, ok := movesByID[moveID]; ok {
				why = fmt.Sprintf("move %d is %s and no deferred cleanup record names it", moveID, mv.Phase)
			}
			out = append(out, Finding{Kind: FindingOrphan, Problem: true, Node: n.Addr(), Table: display, MoveID: moveID,
				Message: fmt.Sprintf("%s on %s is an orphaned fenced copy: %s", display, n.Addr(), why)})
		}
		read, notRead, err := readShardObjects(ctx, conn, n.Addr(), placedHere)
		conn.Close(ctx)
		if err != nil {
			out = append(out, Finding{Kind: FindingUnreachable, Problem: n.IsActive, Node: n.Addr(),
				Message: fmt.Sprintf("could not read the objects of the shards on %s: %v", n.Addr(), err)})
			continue
		}
		out = append(out, notRead...)
		for _, so := range read {
			key := pgx.Identifier{so.shard.Schema, so.shard.Table}.Sanitize()
			objs[key] = append(objs[key], so)
		}
	}
	return found, checked, objs, out
}

// normalizeQualified renders a journal name (quoted, or the older unquoted
// form) as QualifiedName does.
func normalizeQualified(s string) string {
	id, err := ParseQualifiedName(s)
	if err != nil {
		return s
	}
	return QualifiedName(id)
}

// shardLike reports whether rel is <table>_<digits> for a distributed table
// of its schema, and returns the table and the digits.
func shardLike(tables []Table, rel string) (Table, string, bool) {
	for _, t := range tables {
		rest, ok := strings.CutPrefix(rel, t.Name+"_")
		if !ok || rest == "" || strings.Trim(rest, "0123456789") != "" {
			continue
		}
		if _, err := strconv.ParseInt(rest, 10, 64); err != nil {
			continue
		}
		return t, rest, true
	}
	return Table{}, "", false
}

// fencedOfTable reports whether base (a fenced name without its
// _moved_<id> suffix) was made from a shard name of one of the tables:
// <table>_<digits>, or, for a long name, a prefix of it followed by
// FencedName's _<8 hex digits> hash.
func fencedOfTable(tables []Table, base string) bool {
	for _, t := range tables {
		if _, _, ok := shardLike([]Table{t}, base); ok {
			return true
		}
		if i := strings.LastIndexByte(base, '_'); i >= 0 && len(base)-i == 9 && strings.Trim(base[i+1:], "0123456789abcdef") == "" {
			prefix := base[:i]
			if strings.HasPrefix(t.Name+"_", prefix) || strings.HasPrefix(prefix, t.Name+"_") {
				return true
			}
		}
	}
	return false
}

// nodeRel is a table on a node: its schema, name and relkind.
type nodeRel struct{ schema, name, kind string }

// nodeTables connects to a node and lists the ordinary and partitioned
// tables of the given schemas there. It returns the connection open, for
// the caller to read more and close.
func (c *Catalog) nodeTables(ctx context.Context, n Node, schemas []string) (*pgx.Conn, []nodeRel, error) {
	conn, err := c.ConnectNode(ctx, n.Host, n.Port)
	if err != nil {
		return nil, nil, err
	}
	rows, err := conn.Query(ctx, `SELECT ns.nspname, cl.relname, cl.relkind::text FROM pg_class cl
		JOIN pg_namespace ns ON ns.oid = cl.relnamespace
		WHERE cl.relkind IN ('r', 'p') AND ns.nspname = ANY($1) ORDER BY 1, 2`, schemas)
	if err != nil {
		conn.Close(ctx)
		return nil, nil, err
	}
	rels, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (nodeRel, error) {
		var x nodeRel
		err := r.Scan(&x.schema, &x.name, &x.kind)
		return x, err
	})
	if err != nil {
		conn.Close(ctx)
		return nil, nil, err
	}
	return conn, rels, nil
}

// checkPresence compares where shard tables are with where placements say
// they are, on the node groups that answered.
func checkPresence(st catalogState, found map[int64]map[int32]bool, checked map[int32]bool) []Finding {
	var out []Finding
	placed := map[int64]map[int32]bool{}
	for _, p := range st.placements {
		if placed[p.ShardID] == nil {
			placed[p.ShardID] = map[int32]bool{}
		}
		placed[p.ShardID][p.GroupID] = true
	}
	// A target copy an unfinished move is building: shard -> target group.
	inFlight := map[int64]map[int32]int64{}
	for _, m := range st.moves {
		if m.Terminal() {
			continue
		}
		for _, id := range m.ShardIDs {
			if inFlight[id] == nil {
				inFlight[id] = map[int32]int64{}
			}
			inFlight[id][m.TargetGroup] = m.ID
			inFlight[id][m.SourceGroup] = m.ID
		}
	}
	groups := make([]int32, 0, len(checked))
	for g := range checked {
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i] < groups[j] })
	for _, s := range st.shards {
		name := shardDisplay(s)
		for _, g := range groups {
			n, _ := primaryNodeOfGroup(st.nodes, g)
			has := found[s.ID][g]
			switch {
			case placed[s.ID][g] && !has:
				out = append(out, Finding{Kind: FindingTable, Problem: true, ShardID: s.ID, Node: n.Addr(), Table: name,
					Message: fmt.Sprintf("the placement of shard %d names %s, but %s does not exist there", s.ID, n.Addr(), name)})
			case !placed[s.ID][g] && has:
				if mv, ok := inFlight[s.ID][g]; ok {
					out = append(out, Finding{Kind: FindingInFlight, ShardID: s.ID, Node: n.Addr(), Table: name, MoveID: mv,
						Message: fmt.Sprintf("%s on %s belongs to move %d, which is not finished", name, n.Addr(), mv)})
					continue
				}
				out = append(out, Finding{Kind: FindingTable, Problem: true, ShardID: s.ID, Node: n.Addr(), Table: name,
					Message: fmt.Sprintf("%s also exists on %s, which no placement of shard %d names", name, n.Addr(), s.ID)})
			}
		}
	}
	return out
}
