package metadata

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Verifying a shard's objects (VerifyCatalog, FindingObject). Every
// placement of a distributed table should have the same objects beyond its
// columns: the access method, the storage parameters, row-level security
// (enabled, forced) and its policies, the triggers (with their enabled
// state), the foreign keys and the extended statistics. A move that lost
// one leaves a shard that behaves differently from its siblings (a cascade
// that does not happen, a tenant who sees every row, a trigger that does
// not fire), and the rows alone never show it.
//
// Each placement's table is read on its node with ReadTablesDDL, every
// shard table of a node in one batch, on the connection VerifyCatalog
// already holds there. Its objects are normalized so that the shards of a
// table compare equal: the shard's own _<shardid> suffix is stripped from
// names and definitions (Citus names a shard's triggers, foreign keys and
// statistics <name>_<shardid>; compat shards keep whatever names were
// given), and a foreign key's referenced table loses any _<digits> suffix
// (it names a shard of another table, whose id differs from shard to
// shard). Each shard is then compared with the other shards of its table,
// object by object: an object on at least half of them is expected on all
// (a tie counts as expected: what goes wrong is a loss), its most common
// definition is the expected one, and an object on fewer than half is one
// too many where it is. The comment is not compared (Citus puts none on
// shards). Comparing shards with each other rather than with the
// coordinator's table works the same on both flavors; a table with one
// shard has nothing to be compared with.

// objectKey names one object of a shard table, normalized.
type objectKey struct {
	kind string // "trigger", "foreign key", ...
	name string // normalized; "" for the access method and row-level security
}

// describe names the object for people: `trigger "audit"`, `storage
// parameter fillfactor=70`, `the access method`.
func (k objectKey) describe(def string) string {
	switch k.kind {
	case objAccessMethod:
		return "access method " + def
	case objRowSecurity:
		return "row-level security " + def
	case objOption:
		return "storage parameter " + k.name + "=" + def
	case objStatistics: // schema-qualified, quoted where needed
		return k.kind + " " + k.name
	}
	return k.kind + " " + strconv.Quote(k.name)
}

const (
	objAccessMethod = "access method"
	objRowSecurity  = "row-level security"
	objOption       = "storage parameter"
	objPolicy       = "policy"
	objTrigger      = "trigger"
	objForeignKey   = "foreign key"
	objStatistics   = "statistics object"
)

// shardObjects is one placement's objects, normalized.
type shardObjects struct {
	shard Shard
	node  string // host:port
	items map[objectKey]string
}

// objectItems normalizes the objects of d, read from the table of shard
// sh: keys and definitions without the shard's own suffix.
func objectItems(sh Shard, d TableDDL) map[objectKey]string {
	strip := func(s string) string { return stripShardID(s, sh.ID) }
	out := map[objectKey]string{}
	am := d.AccessMethod
	if am == "" {
		am = "heap"
	}
	out[objectKey{kind: objAccessMethod}] = am
	rls := "disabled"
	if d.RowSecurity {
		rls = "enabled"
	}
	if d.ForceRowSecurity {
		rls += " and forced"
	}
	out[objectKey{kind: objRowSecurity}] = rls
	for _, o := range d.Options {
		name, value, _ := strings.Cut(o, "=")
		out[objectKey{objOption, name}] = value
	}
	self := pgx.Identifier{sh.Schema, sh.Table} // as the distributed table
	for _, p := range d.Policies {
		out[objectKey{objPolicy, strip(p.Name)}] = strip(p.create(self))
	}
	for _, tg := range d.Triggers {
		out[objectKey{objTrigger, strip(tg.Name)}] = strip(tg.Def) + " (" + triggerState(tg.Enabled) + ")"
	}
	for _, fk := range d.ForeignKeys {
		ref := pgx.Identifier{fk.RefTable[0], stripDigitsSuffix(fk.RefTable[1])}
		def := fk.render(ref)
		if !fk.Valid {
			def += " NOT VALID"
		}
		out[objectKey{objForeignKey, strip(fk.Name)}] = def
	}
	for _, s := range d.Statistics {
		name := pgx.Identifier{s.Name[0], strip(s.Name[1])}
		out[objectKey{objStatistics, DisplayQualifiedName(QualifiedName(name))}] = strip(s.Def)
	}
	return out
}

func triggerState(enabled string) string {
	switch enabled {
	case "D":
		return "disabled"
	case "R":
		return "enabled on replicas"
	case "A":
		return "enabled always"
	}
	return "enabled"
}

// stripShardID removes every _<id> from s that no digit follows: the
// suffix Citus gives a shard's objects, wherever a name appears in a
// definition (quoted or not).
func stripShardID(s string, id int64) string {
	suffix := "_" + strconv.FormatInt(id, 10)
	var b strings.Builder
	for {
		i := strings.Index(s, suffix)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(suffix)
		b.WriteString(s[:i])
		if end < len(s) && s[end] >= '0' && s[end] <= '9' {
			b.WriteString(s[i:end])
		}
		s = s[end:]
	}
}

// stripDigitsSuffix removes a trailing _<digits> (a shard id) from a
// table name.
func stripDigitsSuffix(name string) string {
	i := strings.LastIndexByte(name, '_')
	if i < 0 || i == len(name)-1 || strings.Trim(name[i+1:], "0123456789") != "" {
		return name
	}
	return name[:i]
}

// readShardObjects reads the objects of shards, all on the node at addr,
// in one batch on conn. A batch that fails (a table with rules, one
// dropped since it was listed) is read again table by table, and a table
// that cannot be read is a finding that is not a problem: its objects are
// not compared.
func readShardObjects(ctx context.Context, conn *pgx.Conn, addr string, shards []Shard) ([]shardObjects, []Finding, error) {
	if len(shards) == 0 {
		return nil, nil, nil
	}
	idents := make([]pgx.Identifier, len(shards))
	for i, s := range shards {
		idents[i] = s.Ident()
	}
	ddls, err := ReadTablesDDL(ctx, conn, idents)
	if err == nil {
		out := make([]shardObjects, len(shards))
		for i, s := range shards {
			out[i] = shardObjects{shard: s, node: addr, items: objectItems(s, ddls[i])}
		}
		return out, nil, nil
	}
	if ctx.Err() != nil || conn.IsClosed() {
		return nil, nil, err
	}
	var out []shardObjects
	var findings []Finding
	for _, s := range shards {
		d, err := ReadTableDDL(ctx, conn, s.Ident())
		if err != nil {
			if ctx.Err() != nil || conn.IsClosed() {
				return nil, nil, err
			}
			msg := err.Error()
			if !errors.Is(err, ErrInvalid) {
				msg = "could not read them: " + msg
			}
			findings = append(findings, Finding{Kind: FindingObject, ShardID: s.ID, Node: addr, Table: shardDisplay(s),
				Message: fmt.Sprintf("the objects of %s on %s are not compared: %s", shardDisplay(s), addr, msg)})
			continue
		}
		out = append(out, shardObjects{shard: s, node: addr, items: objectItems(s, d)})
	}
	return out, findings, nil
}

// compareObjects compares the objects of the shards of one table (see the
// top of this file) and returns a finding for each object a shard lacks,
// has too many or has with another definition, in shard id order.
func compareObjects(table string, shards []shardObjects) []Finding {
	n := len(shards)
	if n < 2 {
		return nil
	}
	sort.Slice(shards, func(i, j int) bool { return shards[i].shard.ID < shards[j].shard.ID })
	// For each object: how many shards have it with each definition.
	defs := map[objectKey]map[string]int{}
	for _, s := range shards {
		for k, d := range s.items {
			if defs[k] == nil {
				defs[k] = map[string]int{}
			}
			defs[k][d]++
		}
	}
	keys := make([]objectKey, 0, len(defs))
	for k := range defs {
		keys = append(keys, k)
	}
	order := map[string]int{objAccessMethod: 0, objOption: 1, objRowSecurity: 2, objPolicy: 3, objTrigger: 4, objForeignKey: 5, objStatistics: 6}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].kind != keys[j].kind {
			return order[keys[i].kind] < order[keys[j].kind]
		}
		return keys[i].name < keys[j].name
	})
	// expected: the object and its most common definition (a tie goes to
	// the smaller text, so the result does not depend on map order).
	type want struct {
		def  string
		have int // shards that have the object
		same int // shards that have it with def
	}
	expected := map[objectKey]want{}
	for _, k := range keys {
		var w want
		for d, c := range defs[k] {
			w.have += c
			if c > w.same || (c == w.same && d < w.def) {
				w.def, w.same = d, c
			}
		}
		expected[k] = w
	}
	var out []Finding
	for _, s := range shards {
		where := fmt.Sprintf("%s on %s", shardDisplay(s.shard), s.node)
		// detail is ": <definition>" for the objects whose description
		// does not hold it.
		detail := func(k objectKey, def string) string {
			if k.kind == objAccessMethod || k.kind == objRowSecurity || k.kind == objOption {
				return ""
			}
			return ": " + def
		}
		add := func(k objectKey, def, msg string) {
			out = append(out, Finding{Kind: FindingObject, Problem: true, ShardID: s.shard.ID, Node: s.node,
				Table: shardDisplay(s.shard), Object: k.describe(def), Message: msg})
		}
		for _, k := range keys {
			w := expected[k]
			def, has := s.items[k]
			switch {
			case 2*w.have >= n && !has:
				add(k, w.def, fmt.Sprintf("%s has no %s, which %d of %d shards of %s have%s",
					where, k.describe(w.def), w.have, n, table, detail(k, w.def)))
			case 2*w.have < n && has:
				add(k, def, fmt.Sprintf("%s has %s, which only %d of %d shards of %s have%s",
					where, k.describe(def), w.have, n, table, detail(k, def)))
			case has && def != w.def:
				if k.kind == objAccessMethod || k.kind == objRowSecurity || k.kind == objOption {
					add(k, def, fmt.Sprintf("%s has %s where %d of %d shards of %s have %s",
						where, k.describe(def), w.same, n, table, k.describe(w.def)))
				} else {
					add(k, def, fmt.Sprintf("%s has %s as %s where %d of %d shards of %s have %s",
						where, k.describe(def), def, w.same, n, table, w.def))
				}
			}
		}
	}
	return out
}
