package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// initdbArgs are the options every node's data directory is initialised with.
var initdbArgs = []string{"-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"}

// templateDir returns a data directory made by initdb with initdbArgs for
// these binaries, never started, which new nodes copy instead of running
// initdb each: a copy costs a small part of initdb's CPU (here about 0.2 s
// against 1.7 s), and the tests start hundreds of nodes. It is made once per
// binaries, version, options and OS user, under os.TempDir, and shared by
// every process: initdb writes into a private directory that is then renamed
// into place, so a template that is there is whole.
func (c *Cluster) templateDir(ctx context.Context) (string, error) {
	initdb := filepath.Join(c.BinDir, "initdb")
	ver, err := exec.CommandContext(ctx, initdb, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", initdb, err)
	}
	key := strings.Join(append([]string{c.BinDir, strings.TrimSpace(string(ver)), strconv.Itoa(os.Geteuid())}, initdbArgs...), "\x00")
	sum := sha256.Sum256([]byte(key))
	dir := filepath.Join(os.TempDir(), "shardmover-initdb-"+hex.EncodeToString(sum[:8]))
	if fileExists(filepath.Join(dir, "global", "pg_control")) {
		return dir, nil
	}
	work, err := os.MkdirTemp(os.TempDir(), ".shardmover-initdb-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	if err := c.chown(work); err != nil {
		return "", err
	}
	data := filepath.Join(work, "data")
	cmd := exec.CommandContext(ctx, initdb, append([]string{"-D", data}, initdbArgs...)...)
	c.asPostgres(cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("initdb: %v: %s", err, lastLines(string(out), 5))
	}
	if err := os.Rename(data, dir); err != nil && !fileExists(filepath.Join(dir, "global", "pg_control")) {
		return "", fmt.Errorf("keep the initdb template: %w", err)
	}
	return dir, nil // renamed, or another process's template won the race
}

// copyDataDir copies the template's files into the empty directory dst,
// keeping their permissions (PostgreSQL checks them) and giving them to the
// servers' OS user.
func (c *Cluster) copyDataDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(to, info.Mode().Perm()); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			if err := copyFile(p, to, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("initdb template %s: %s is neither a file nor a directory", src, rel)
		}
		return c.chown(to)
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
