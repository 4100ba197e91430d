package pgbench

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Options is one pgbench process.
type Options struct {
	// Bin is the pgbench binary.
	Bin string
	// DSN is the node the process enters the cluster through; Name names
	// that node, and the process's log files (LogDir/Name.<pid>[.<thread>]).
	DSN, Name string
	// Mode is the query mode (-M): simple, extended or prepared.
	Mode string
	// Clients is the number of clients (-c), all on one thread (-j 1).
	Clients int
	// Scale is the script's :scale (-s): the scale of the layout.
	Scale int
	// Script is the path of the script file (-f).
	Script string
	// LogDir receives the per-transaction logs (-l).
	LogDir string
	// Limit is -T, only a bound (Stop ends the process); zero is an hour.
	Limit time.Duration
}

// DefaultLimit is Options.Limit's zero value: an hour.
const DefaultLimit = time.Hour

// Proc is one running pgbench process.
type Proc struct {
	name   string
	prefix string // of its per-transaction log files
	cmd    *exec.Cmd
	out    *bytes.Buffer
	done   chan struct{}
	err    error // of cmd.Wait, set when done is closed
}

// Result is what an ended pgbench process left.
type Result struct {
	// Err is its exit: nil when -T or Stop ended it and no client aborted
	// (exit status 2 means some client aborted).
	Err error
	// Output is what it printed (stdout and stderr, interleaved as
	// written): the summary, and the errors of aborted clients.
	Output string
}

// Start runs pgbench as o says (see the package doc). The process is
// killed if ctx ends before it does.
func Start(ctx context.Context, o Options) (*Proc, error) {
	switch {
	case o.Mode != "simple" && o.Mode != "extended" && o.Mode != "prepared":
		return nil, fmt.Errorf("pgbench: query mode %q: use simple, extended or prepared", o.Mode)
	case o.Clients < 1 || o.Scale < 1:
		return nil, fmt.Errorf("pgbench: clients and scale must be at least 1, got %d and %d", o.Clients, o.Scale)
	case o.Name == "" || o.Bin == "" || o.DSN == "" || o.Script == "" || o.LogDir == "":
		return nil, fmt.Errorf("pgbench: Bin, DSN, Name, Script and LogDir are required")
	}
	limit := o.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	p := &Proc{name: o.Name, prefix: filepath.Join(o.LogDir, o.Name), out: &bytes.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, o.Bin, "-n", "-c", strconv.Itoa(o.Clients), "-j", "1",
		"-T", strconv.Itoa(int((limit+time.Second-1)/time.Second)), "-M", o.Mode,
		"-s", strconv.Itoa(o.Scale), "-f", o.Script, "-l", "--log-prefix="+p.prefix, o.DSN)
	// One buffer for both: exec.Cmd then writes to it from one goroutine.
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start pgbench through %s: %w", o.Name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Name is the entry node's name given in Options.
func (p *Proc) Name() string { return p.name }

// Stop sends SIGALRM (the package doc says why that signal) and waits for
// the process to end, at most bound; past it the process is killed and
// Stop says so. A process that had already ended is left as it was.
func (p *Proc) Stop(bound time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGALRM) // fails only when it has already ended
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		p.Kill()
		return fmt.Errorf("pgbench through %s did not end within %s of SIGALRM; killed", p.name, bound)
	}
}

// Kill kills the process unless it has ended, and waits for it: for a
// test's cleanup, when Stop was never reached.
func (p *Proc) Kill() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Wait waits for the process to end and returns its exit and output.
func (p *Proc) Wait() Result {
	<-p.done
	return Result{Err: p.err, Output: p.out.String()}
}

// Transactions reads the process's per-transaction logs (once it has
// ended), each transaction's Node set to its Name.
func (p *Proc) Transactions() ([]Txn, error) {
	<-p.done
	return ReadLogs(p.prefix)
}
