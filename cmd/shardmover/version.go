package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// versionInfo is what `shardmover version` prints.
type versionInfo struct {
	// Version is the module version the binary was built at ("devel" for a
	// build without one, such as `go build` in a checkout without a tag
	// Go can use).
	Version string `json:"version"`
	// Commit, CommitTime and Dirty come from the VCS stamp Go records when
	// it builds in a checkout; absent otherwise.
	Commit     string `json:"commit,omitempty"`
	CommitTime string `json:"commit_time,omitempty"`
	Dirty      *bool  `json:"dirty,omitempty"`
	Go         string `json:"go"`
	Platform   string `json:"platform"`
	// GoThreads is how many threads run Go code at once (GOMAXPROCS: half
	// the CPUs unless the environment sets it, internal/procs), of CPUs.
	GoThreads  int     `json:"go_threads"`
	CPUs       int     `json:"cpus"`
	PostgreSQL support `json:"postgresql"`
	Citus      support `json:"citus"`
}

// support names the server versions shardmover is meant for.
type support struct {
	Versions []string `json:"versions"`
	Note     string   `json:"note"`
}

// Supported versions. PostgreSQL 15 is what the tests run; nothing checks
// the server's version when connecting, so nothing else is claimed. Citus
// 12 and 13 are the versions whose catalogs and functions shardmover uses
// (docs/design.md section 3); the tests run 13.
var (
	supportedPostgres = support{Versions: []string{"15"},
		Note: "tested with PostgreSQL 15; other versions are not tested, and the server's version is not checked when connecting"}
	supportedCitus = support{Versions: []string{"12", "13"},
		Note: "the Citus catalogs and functions shardmover uses are those of Citus 12 and 13; tests run Citus 13"}
)

// readVersion builds versionInfo from the binary's build information.
func readVersion(bi *debug.BuildInfo, ok bool) versionInfo {
	v := versionInfo{Version: "devel", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		GoThreads: runtime.GOMAXPROCS(0), CPUs: runtime.NumCPU(), PostgreSQL: supportedPostgres, Citus: supportedCitus}
	if !ok || bi == nil {
		return v
	}
	if mv := bi.Main.Version; mv != "" && mv != "(devel)" {
		v.Version = mv
	}
	if bi.GoVersion != "" {
		v.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.CommitTime = s.Value
		case "vcs.modified":
			dirty := s.Value == "true"
			v.Dirty = &dirty
		}
	}
	return v
}

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print shardmover's version, commit, Go version and the PostgreSQL and Citus versions it supports",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := readVersion(debug.ReadBuildInfo())
			w := cmd.OutOrStdout()
			if g.output == "json" {
				return writeJSON(w, v)
			}
			fmt.Fprintf(w, "shardmover %s\n", v.Version)
			if v.Commit != "" {
				c := v.Commit
				if v.Dirty != nil && *v.Dirty {
					c += " (dirty: built with uncommitted changes)"
				}
				if v.CommitTime != "" {
					c += ", committed " + v.CommitTime
				}
				fmt.Fprintf(w, "commit:     %s\n", c)
			} else {
				fmt.Fprintln(w, "commit:     unknown (not built from a version-controlled checkout)")
			}
			fmt.Fprintf(w, "go:         %s %s\n", v.Go, v.Platform)
			fmt.Fprintf(w, "threads:    %d for Go code, of %d CPUs (half unless GOMAXPROCS is set)\n", v.GoThreads, v.CPUs)
			fmt.Fprintf(w, "postgresql: %s (%s)\n", strings.Join(v.PostgreSQL.Versions, ", "), v.PostgreSQL.Note)
			fmt.Fprintf(w, "citus:      %s (%s)\n", strings.Join(v.Citus.Versions, ", "), v.Citus.Note)
			return nil
		},
	}
}
