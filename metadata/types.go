package metadata

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrInvalid marks errors caused by the caller's input or by a refused
// precondition: nothing was changed, and the message says what to do.
var ErrInvalid = errors.New("invalid request")

// ErrNotFound marks a node, table or shard that does not exist.
var ErrNotFound = errors.New("not found")

// Flavor is how the cluster keeps its catalogs.
type Flavor int

const (
	_ Flavor = iota
	// Compat is plain PostgreSQL with catalogs in schema shardmover_catalog.
	Compat
	// Citus has the citus extension and its pg_catalog.pg_dist_* tables.
	Citus
)

func (f Flavor) String() string {
	switch f {
	case Compat:
		return "compat"
	case Citus:
		return "citus"
	}
	return "unknown"
}

// Node is a row of pg_dist_node.
type Node struct {
	ID               int32  `json:"id"`
	GroupID          int32  `json:"group_id"`
	Host             string `json:"host"`
	Port             int    `json:"port"`
	Rack             string `json:"rack"`
	HasMetadata      bool   `json:"has_metadata"`
	IsActive         bool   `json:"is_active"`
	Role             string `json:"role"`
	Cluster          string `json:"cluster"`
	MetadataSynced   bool   `json:"metadata_synced"`
	ShouldHaveShards bool   `json:"should_have_shards"`
}

// Addr is host:port, the only way shardmover names a node to people.
func (n Node) Addr() string { return net.JoinHostPort(n.Host, strconv.Itoa(n.Port)) }

// IsCoordinator reports whether the node is the coordinator (group 0).
func (n Node) IsCoordinator() bool { return n.GroupID == 0 }

// Table is a row of pg_dist_partition, with its distribution column resolved.
type Table struct {
	Schema       string `json:"schema"`
	Name         string `json:"name"`
	Method       string `json:"method"` // "h" for hash
	Column       string `json:"column"`
	ColumnAttNum int    `json:"column_attnum"`
	ColumnType   string `json:"column_type"` // regtype text, e.g. "bigint"
	ColumnTypeID uint32 `json:"column_type_oid"`
	ColocationID int32  `json:"colocation_id"`
	ShardCount   int    `json:"shard_count"`
}

// QualifiedName is schema.name, quoted where needed.
func (t Table) QualifiedName() string { return pgx.Identifier{t.Schema, t.Name}.Sanitize() }

// DisplayName is schema.name without quotes, or name alone in public.
func (t Table) DisplayName() string {
	if t.Schema == "public" {
		return t.Name
	}
	return t.Schema + "." + t.Name
}

// Shard is a row of pg_dist_shard.
type Shard struct {
	ID     int64  `json:"id"`
	Schema string `json:"schema"`
	Table  string `json:"table"`
	Index  int    `json:"index"` // position by range within its table
	Min    int32  `json:"min"`
	Max    int32  `json:"max"`
}

// Name is the shard table's name: <table>_<shardid>.
func (s Shard) Name() string { return s.Table + "_" + strconv.FormatInt(s.ID, 10) }

// Ident is the shard table's schema-qualified identifier.
func (s Shard) Ident() pgx.Identifier { return pgx.Identifier{s.Schema, s.Name()} }

// Placement is a row of pg_dist_placement.
type Placement struct {
	ID      int64 `json:"id"`
	ShardID int64 `json:"shard_id"`
	State   int32 `json:"state"`
	Length  int64 `json:"length"`
	GroupID int32 `json:"group_id"`
}

// Colocation is a row of pg_dist_colocation.
type Colocation struct {
	ID                int32  `json:"id"`
	ShardCount        int    `json:"shard_count"`
	ReplicationFactor int    `json:"replication_factor"`
	ColumnType        string `json:"column_type"`
}

// ShardGroup is the unit of movement: shard index i of every table of one
// colocation group.
type ShardGroup struct {
	ColocationID int32    `json:"colocation_id"`
	Index        int      `json:"index"`
	ShardIDs     []int64  `json:"shard_ids"`
	Tables       []string `json:"tables"`
	GroupID      int32    `json:"group_id"` // node group holding the shards
	NodeID       int32    `json:"node_id"`
	Bytes        int64    `json:"bytes"`      // sum of pg_total_relation_size
	SizeKnown    bool     `json:"size_known"` // false when the node could not be measured
}

// Key names a shard group stably: "<colocationid>:<index>".
func (g ShardGroup) Key() string { return fmt.Sprintf("%d:%d", g.ColocationID, g.Index) }

// Cluster is one consistent snapshot of the catalogs.
type Cluster struct {
	Flavor      Flavor       `json:"flavor"`
	Nodes       []Node       `json:"nodes"`
	Tables      []Table      `json:"tables"`
	Colocations []Colocation `json:"colocations"`
	Shards      []Shard      `json:"shards"`
	Placements  []Placement  `json:"placements"`
	Groups      []ShardGroup `json:"groups"`
	// Warnings lists what could not be measured (an unreachable node).
	Warnings []string `json:"warnings,omitempty"`
}

// MarshalJSON-friendly flavor.
func (f Flavor) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// UnmarshalText parses a flavor name.
func (f *Flavor) UnmarshalText(b []byte) error {
	switch string(b) {
	case "compat":
		*f = Compat
	case "citus":
		*f = Citus
	default:
		return fmt.Errorf("unknown flavor %q", b)
	}
	return nil
}

// Table returns the distributed table with the given name ("t", "public.t").
func (c *Cluster) Table(name string) (Table, error) {
	schema, rel := splitName(name)
	for _, t := range c.Tables {
		if t.Schema == schema && t.Name == rel {
			return t, nil
		}
	}
	return Table{}, fmt.Errorf("%w: %s is not a distributed table", ErrNotFound, name)
}

// TableShards returns the shards of a table ordered by index.
func (c *Cluster) TableShards(t Table) []Shard {
	var out []Shard
	for _, s := range c.Shards {
		if s.Schema == t.Schema && s.Table == t.Name {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// NodeByGroup returns the primary node of a group.
func (c *Cluster) NodeByGroup(group int32) (Node, bool) {
	for _, n := range c.Nodes {
		if n.GroupID == group {
			return n, true
		}
	}
	return Node{}, false
}

// PlacementOf returns the placement of a shard.
func (c *Cluster) PlacementOf(shardID int64) (Placement, bool) {
	for _, p := range c.Placements {
		if p.ShardID == shardID {
			return p, true
		}
	}
	return Placement{}, false
}

// ShardFor returns the shard of table t holding distribution value v. v is
// an int16, int32, int64 (or int) or string, matching the column's type.
func (c *Cluster) ShardFor(t Table, v any) (Shard, error) {
	h, err := HashValue(t.ColumnType, v)
	if err != nil {
		return Shard{}, err
	}
	shards := c.TableShards(t)
	i := sort.Search(len(shards), func(i int) bool { return shards[i].Max >= h })
	if i == len(shards) || !(Range{shards[i].Min, shards[i].Max}).Contains(h) {
		return Shard{}, fmt.Errorf("no shard of %s covers hash %d: the catalog's ranges have a gap", t.DisplayName(), h)
	}
	return shards[i], nil
}

// HashValue hashes v as PostgreSQL hashes a value of the given type.
func HashValue(columnType string, v any) (int32, error) {
	switch columnType {
	case "smallint":
		switch x := v.(type) {
		case int16:
			return HashInt2(x), nil
		}
	case "integer":
		switch x := v.(type) {
		case int32:
			return HashInt4(x), nil
		case int:
			return HashInt4(int32(x)), nil
		}
	case "bigint":
		switch x := v.(type) {
		case int64:
			return HashInt8(x), nil
		case int:
			return HashInt8(int64(x)), nil
		case int32:
			return HashInt8(int64(x)), nil
		}
	case "text", "character varying":
		switch x := v.(type) {
		case string:
			return HashText(x), nil
		}
	default:
		return 0, invalidf("distribution column type %s is not supported (use smallint, integer, bigint, text or varchar)", columnType)
	}
	return 0, invalidf("value %v (%T) does not match distribution column type %s", v, v, columnType)
}

func splitName(name string) (string, string) {
	// A quoted name ("schema"."table", QualifiedName's form) may hold dots.
	if strings.HasPrefix(name, `"`) {
		if id, err := ParseQualifiedName(name); err == nil {
			return id[0], id[1]
		}
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '.' {
			return name[:i], name[i+1:]
		}
	}
	return "public", name
}

// invalidError is a user's mistake: its message is one sentence, and it
// matches ErrInvalid with errors.Is. It is the one invalid-input error type
// of every package (Invalidf): the mover's and the scheduler's refusals are
// this type too.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// Invalidf returns a refused request: its message is the formatted
// sentence, without the sentinel's prefix, and it matches ErrInvalid.
func Invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

func invalidf(format string, args ...any) error { return Invalidf(format, args...) }

// QualifiedName renders a schema-qualified name with both parts quoted
// ("schema"."name"): the form in which the journal stores shard table names,
// so that a dot inside a name can never be mistaken for the separator.
func QualifiedName(id pgx.Identifier) string { return id.Sanitize() }

// ParseQualifiedName reads a QualifiedName back into its parts. Text that
// does not start with a double quote is the journal's older form,
// schema.name unquoted, split at its first dot.
func ParseQualifiedName(s string) (pgx.Identifier, error) {
	if !strings.HasPrefix(s, `"`) {
		schema, name, ok := strings.Cut(s, ".")
		if !ok {
			return nil, fmt.Errorf("%q is not a schema-qualified name", s)
		}
		return pgx.Identifier{schema, name}, nil
	}
	var parts pgx.Identifier
	rest := s
	for {
		if !strings.HasPrefix(rest, `"`) {
			return nil, fmt.Errorf("%q is not a quoted schema-qualified name", s)
		}
		var b strings.Builder
		i := 1
		for {
			j := strings.IndexByte(rest[i:], '"')
			if j < 0 {
				return nil, fmt.Errorf("%q has an unterminated quoted name", s)
			}
			b.WriteString(rest[i : i+j])
			i += j + 1
			if i < len(rest) && rest[i] == '"' { // "" is a quote inside the name
				b.WriteByte('"')
				i++
				continue
			}
			break
		}
		parts = append(parts, b.String())
		rest = rest[i:]
		if rest == "" {
			break
		}
		if rest[0] != '.' {
			return nil, fmt.Errorf("%q is not a quoted schema-qualified name", s)
		}
		rest = rest[1:]
	}
	if len(parts) != 2 {
		return nil, fmt.Errorf("%q has %d parts, want schema and name", s, len(parts))
	}
	return parts, nil
}

// DisplayQualifiedName renders a name stored by QualifiedName for people:
// schema.name, each part quoted only when it must be (a plain lower-case
// identifier is shown as it is). Text it cannot parse is returned as is.
func DisplayQualifiedName(s string) string {
	id, err := ParseQualifiedName(s)
	if err != nil {
		return s
	}
	parts := make([]string, len(id))
	for i, p := range id {
		parts[i] = p
		if !plainIdent(p) {
			parts[i] = pgx.Identifier{p}.Sanitize()
		}
	}
	return strings.Join(parts, ".")
}

func plainIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_' || (r >= 'a' && r <= 'z'):
		case i > 0 && (r >= '0' && r <= '9' || r == '$'):
		default:
			return false
		}
	}
	return true
}
