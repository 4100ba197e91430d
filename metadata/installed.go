package metadata

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// Every command installs the catalogs it needs (Install, InstallJournal),
// and the statements that do it are idempotent but not free: ALTER TABLE
// ... ADD COLUMN IF NOT EXISTS takes an ACCESS EXCLUSIVE lock on the
// journal's tables even when the column is there, and CREATE INDEX IF NOT
// EXISTS and CREATE OR REPLACE TRIGGER lock the catalogs they name. Run
// while a daemon or a mover works, that queued the journal's writes (a
// cutover's decision among them) behind the install, and could deadlock
// with them. So the version of the statements that ran is recorded in
// shardmover.installed, and an install whose version is already recorded
// runs none of them.

// installedDDL records, per part of the catalogs, the version of the
// statements that installed it.
const installedDDL = `CREATE TABLE IF NOT EXISTS shardmover.installed (
		part text PRIMARY KEY,
		version text NOT NULL
	)`

// The parts of the catalogs, as shardmover.installed names them.
const (
	partJournal = "journal"
	partCompat  = "compat"
)

// ddlVersion names a list of statements: a hash of their text.
func ddlVersion(stmts []string) string {
	h := sha256.New()
	for _, s := range stmts {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

var (
	journalVersion = ddlVersion(journalDDL)
	compatVersion  = ddlVersion(compatDDL)
)

// installedAlready reports whether every part of want is recorded at its
// version. Any error reading it (no such table yet, no privilege) reads as
// no: the install then runs its statements, as it always did.
func (c *Catalog) installedAlready(ctx context.Context, want map[string]string) bool {
	parts := make([]string, 0, len(want))
	versions := make([]string, 0, len(want))
	for p, v := range want {
		parts = append(parts, p)
		versions = append(versions, v)
	}
	var n int
	err := c.pool.QueryRow(ctx, `SELECT count(*) FROM shardmover.installed i
		JOIN unnest($1::text[], $2::text[]) AS w(part, version) ON w.part = i.part AND w.version = i.version`,
		parts, versions).Scan(&n)
	return err == nil && n == len(want)
}

// recordInstalled records the parts of want at their versions, after the
// transaction that installed them committed. Only an optimization: a
// failure (a role that may not write the table) is logged, and the next
// install runs its statements again.
func (c *Catalog) recordInstalled(ctx context.Context, want map[string]string) {
	b := &pgx.Batch{}
	for p, v := range want {
		b.Queue(`INSERT INTO shardmover.installed (part, version) VALUES ($1, $2)
			ON CONFLICT (part) DO UPDATE SET version = EXCLUDED.version`, p, v)
	}
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() })
	if err != nil {
		c.log.Warn("could not record the installed catalogs' version; the next command installs them again", zap.Error(err))
	}
}
