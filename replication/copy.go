package replication

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/shardmover/shardmover/internal/ratelimit"
)

// CopyOptions configures Copy.
type CopyOptions struct {
	// SourceDSN and TargetDSN are libpq connection strings (never logged).
	SourceDSN, TargetDSN string
	// Snapshot is the exported snapshot (Snapshot.Name). Its holder must
	// stay idle until Copy returns.
	Snapshot string
	// Tables to copy; each target table has the same name and columns.
	Tables []pgx.Identifier
	// Workers is the number of concurrent copies (one source and one target
	// connection each): with Adaptive, the most that may run.
	Workers int
	// Adaptive starts with one copy stream and adds another while each
	// added stream raises the copy's throughput by at least a tenth,
	// measured over one-second windows (the first is warm-up), up to
	// Workers; when one does not, the stream added last stops after its
	// current task and the number stays. So a copy is never slower than a
	// single stream by more than one window of contention, and runs wider
	// only where the nodes (or a shared rate limit) let more streams pay.
	// A worker connects (and imports the snapshot) only when it first
	// becomes active.
	Adaptive bool
	// RangesPerTable splits a table of at least 2*MinRangeBytes into up to
	// that many ctid block ranges, copied concurrently; each range is at
	// least MinRangeBytes. 1 disables splitting.
	RangesPerTable int
	MinRangeBytes  int64
	// BytesPerSecond caps this copy's total rate (all workers together); 0
	// means unlimited. Ignored when Limiter is set.
	BytesPerSecond int64
	// Limiter, when set, paces this copy's workers instead of
	// BytesPerSecond. Share one limiter between copies running at the same
	// time to cap their total rate: a lone copy then gets all of it.
	Limiter *ratelimit.Limiter
	// TruncateTarget empties each target table before copying into it, so
	// a failed copy can simply be run again (with a new snapshot).
	TruncateTarget bool
	// Progress, when set, receives bytes streamed so far and bytes expected
	// (the tables' on-disk size: an estimate). It is called from one
	// goroutine at a time, about every 250ms and once at the end with
	// done == total.
	Progress func(done, total int64)
	// Logger receives one line per table. Nil means none.
	Logger *zap.Logger
}

// DefaultCopyOptions returns the defaults; fill in DSNs, snapshot and tables.
func DefaultCopyOptions() CopyOptions {
	return CopyOptions{Workers: 4, RangesPerTable: 4, MinRangeBytes: 64 << 20}
}

// CopyResult reports what Copy did.
type CopyResult struct {
	Tables  []TableCopy
	Rows    int64
	Bytes   int64 // COPY stream bytes
	Elapsed time.Duration
	// Streams is the most copy streams that ran at once.
	Streams int
}

// TableCopy reports one table.
type TableCopy struct {
	Table pgx.Identifier
	// Format is "binary", or "text" when a column's binary form embeds
	// type OIDs that differ between servers (arrays or composites of
	// non-built-in types).
	Format        string
	Ranges        int
	Rows, Bytes   int64
	ExpectedBytes int64
}

// rampGain is how much more throughput one more stream must bring for an
// adaptive copy to keep it; rampWindow is how long each measurement runs.
const (
	rampGain   = 1.1
	rampWindow = time.Second
)

// ramp decides an adaptive copy's number of streams from the throughput
// measured over each window: it climbs one stream at a time while each
// step pays and settles at the last step that did.
type ramp struct {
	max      int
	warm     bool    // the first window (connections, first rows) is done
	prevRate float64 // throughput at the current number, 0 before measured
	settled  bool
}

// observe gets the bytes copied over the last window with k streams
// active, and returns how many streams should be active next.
func (r *ramp) observe(k int, bytes int64) int {
	switch {
	case r.settled:
		return k
	case !r.warm:
		r.warm = true
		return k
	}
	rate := float64(bytes)
	if r.prevRate > 0 && rate < r.prevRate*rampGain {
		r.settled = true
		return k - 1
	}
	r.prevRate = rate
	if k >= r.max {
		r.settled = true
		return k
	}
	r.warm = false // the new stream's start is warm-up again
	return k + 1
}

type copyTask struct {
	table  int // index into result tables
	out    string
	in     string
	weight int64
}

// Copy copies every table from the exported snapshot on the source into the
// target, streaming COPY ... TO STDOUT into COPY ... FROM STDIN through a
// pipe (never holding a table in memory), several tables and ctid ranges at
// a time. Each worker imports the snapshot once, in a REPEATABLE READ
// transaction, when it first becomes active (so the snapshot's holder must
// stay idle until Copy returns). The target tables should be empty
// (or TruncateTarget set); on error the target holds partial data.
func Copy(ctx context.Context, opts CopyOptions) (CopyResult, error) {
	started := time.Now()
	def := DefaultCopyOptions()
	if opts.Workers <= 0 {
		opts.Workers = def.Workers
	}
	if opts.RangesPerTable <= 0 {
		opts.RangesPerTable = def.RangesPerTable
	}
	if opts.MinRangeBytes <= 0 {
		opts.MinRangeBytes = def.MinRangeBytes
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	if err := validateSnapshot(opts.Snapshot); err != nil {
		return CopyResult{}, err
	}
	if len(opts.Tables) == 0 {
		return CopyResult{}, permanent(errors.New("copy: no tables given"))
	}
	srcCfg, err := parseDSN("source", opts.SourceDSN)
	if err != nil {
		return CopyResult{}, err
	}
	tgtCfg, err := parseDSN("target", opts.TargetDSN)
	if err != nil {
		return CopyResult{}, err
	}
	log = log.With(zap.String("source", addr(srcCfg)), zap.String("target", addr(tgtCfg)))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var (
		connMu sync.Mutex
		conns  []*pgconn.PgConn
	)
	defer func() {
		for _, c := range conns {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c.Close(cctx)
			cancel()
		}
	}()
	open := func(cfg *pgconn.Config, which string) (*pgconn.PgConn, error) {
		cfg = cfg.Copy()
		withSessionParams(cfg, "shardmover_copy")
		cfg.RuntimeParams["statement_timeout"] = "0"
		cfg.RuntimeParams["idle_in_transaction_session_timeout"] = "0"
		if which == "target" {
			// The copy is the base the stream builds on: make it durable.
			cfg.RuntimeParams["synchronous_commit"] = "on"
		}
		c, err := pgconn.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("copy: connect to %s %s: %w", which, addr(cfg), err)
		}
		connMu.Lock()
		conns = append(conns, c)
		connMu.Unlock()
		return c, nil
	}
	openSource := func() (*pgconn.PgConn, error) {
		c, err := open(srcCfg, "source")
		if err != nil {
			return nil, err
		}
		if _, err := c.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '"+opts.Snapshot+"'").ReadAll(); err != nil {
			err = fmt.Errorf("copy: import snapshot %s on %s: %w", opts.Snapshot, addr(srcCfg), err)
			if pgCode(err) == "22023" { // invalid_parameter_value: snapshot gone
				err = fmt.Errorf("%w (the connection that exported it must stay open until the copy has started)", err)
			}
			return nil, err
		}
		return c, nil
	}

	// Plan in the snapshot: columns, format, sizes and ranges.
	planConn, err := openSource()
	if err != nil {
		return CopyResult{}, err
	}
	res := CopyResult{Tables: make([]TableCopy, len(opts.Tables))}
	var tasks []copyTask
	var total int64
	for i, t := range opts.Tables {
		p, err := planTable(ctx, planConn, t)
		if err != nil {
			return CopyResult{}, err
		}
		res.Tables[i] = TableCopy{Table: t, Format: p.format, ExpectedBytes: p.bytes}
		total += p.bytes
		ts := splitTable(t, p, i, opts.RangesPerTable, opts.MinRangeBytes)
		res.Tables[i].Ranges = len(ts)
		tasks = append(tasks, ts...)
	}
	// Largest first, so the long ones overlap the short ones.
	sort.SliceStable(tasks, func(a, b int) bool { return tasks[a].weight > tasks[b].weight })

	workers := min(opts.Workers, len(tasks))
	openTarget := func() (*pgconn.PgConn, error) {
		c, err := open(tgtCfg, "target")
		if err != nil {
			return nil, err
		}
		if _, err := c.Exec(ctx, "SET session_replication_role = replica").ReadAll(); err != nil {
			log.Warn("copy: cannot skip target triggers (session_replication_role needs superuser, or GRANT SET ON PARAMETER session_replication_role on PostgreSQL 15+); they will fire", zap.Error(err))
		}
		return c, nil
	}
	// Worker w's connections: the first worker's are opened here, the
	// others' by each worker when it first becomes active (all at once for
	// a fixed width, when the ramp adds it for an adaptive copy). The
	// snapshot's holder stays idle until Copy returns, so a late worker can
	// still import it.
	srcs := make([]*pgconn.PgConn, workers)
	tgts := make([]*pgconn.PgConn, workers)
	srcs[0] = planConn
	if tgts[0], err = openTarget(); err != nil {
		return CopyResult{}, err
	}
	if opts.TruncateTarget {
		for _, t := range opts.Tables {
			if _, err := tgts[0].Exec(ctx, "TRUNCATE ONLY "+t.Sanitize()).ReadAll(); err != nil {
				return CopyResult{}, fmt.Errorf("copy: truncate %s on target: %w", t.Sanitize(), err)
			}
		}
	}

	var done atomic.Int64
	lim := opts.Limiter
	if lim == nil {
		lim = ratelimit.New(opts.BytesPerSecond) // nil: no limit
	}
	progressDone := make(chan struct{})
	progressStopped := make(chan struct{})
	go func() {
		defer close(progressStopped)
		if opts.Progress == nil {
			return
		}
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-progressDone:
				return
			case <-tick.C:
				opts.Progress(done.Load(), total)
			}
		}
	}()

	var (
		mu       sync.Mutex
		cond     = sync.NewCond(&mu)
		next     int
		firstErr error
		wg       sync.WaitGroup
		active   = workers // streams allowed to take tasks: workers 0..active-1
		widest   = workers
	)
	// take gives worker w its next task, waiting while an adaptive copy
	// has it idle.
	take := func(w int) (copyTask, bool) {
		mu.Lock()
		defer mu.Unlock()
		for w >= active && firstErr == nil && next < len(tasks) {
			cond.Wait()
		}
		if firstErr != nil || next >= len(tasks) {
			cond.Broadcast() // idle workers see the end
			return copyTask{}, false
		}
		next++
		return tasks[next-1], true
	}
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
			cancel()
			cond.Broadcast()
		}
	}
	rampStopped := make(chan struct{})
	if opts.Adaptive && workers > 1 {
		active, widest = 1, 1
		go func() {
			defer close(rampStopped)
			r := ramp{max: workers}
			tick := time.NewTicker(rampWindow)
			defer tick.Stop()
			last := done.Load()
			for !r.settled {
				select {
				case <-progressDone:
					return
				case <-tick.C:
				}
				cur := done.Load()
				mu.Lock()
				if k := r.observe(active, cur-last); k != active {
					active = k
					widest = max(widest, k)
					log.Debug("copy streams", zap.Int("streams", k), zap.Int64("bytes_last_window", cur-last))
					cond.Broadcast()
				}
				mu.Unlock()
				last = cur
			}
		}()
	} else {
		close(rampStopped)
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			src, tgt := srcs[w], tgts[w]
			for {
				t, ok := take(w)
				if !ok {
					return
				}
				if src == nil {
					var err error
					if src, err = openSource(); err == nil {
						tgt, err = openTarget()
					}
					if err != nil {
						fail(err)
						return
					}
				}
				rows, n, err := copyOne(ctx, src, tgt, t, lim, &done)
				if err != nil {
					fail(fmt.Errorf("copy %s: %w", res.Tables[t.table].Table.Sanitize(), err))
					return
				}
				mu.Lock()
				res.Tables[t.table].Rows += rows
				res.Tables[t.table].Bytes += n
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	close(progressDone)
	<-progressStopped
	<-rampStopped
	if firstErr != nil {
		return CopyResult{}, firstErr
	}
	res.Streams = widest
	for _, tc := range res.Tables {
		res.Rows += tc.Rows
		res.Bytes += tc.Bytes
		log.Info("table copied", zap.String("table", tc.Table.Sanitize()), zap.String("format", tc.Format),
			zap.Int("ranges", tc.Ranges), zap.Int64("rows", tc.Rows), zap.Int64("bytes", tc.Bytes))
	}
	if opts.Progress != nil {
		opts.Progress(res.Bytes, res.Bytes)
	}
	res.Elapsed = time.Since(started)
	return res, nil
}

type tablePlan struct {
	cols   []string // quoted
	format string
	bytes  int64 // heap + TOAST
	blocks int64 // main fork
}

// planTable reads, in the snapshot, what copying t needs.
func planTable(ctx context.Context, c *pgconn.PgConn, t pgx.Identifier) (tablePlan, error) {
	name := t.Sanitize()
	param := [][]byte{[]byte(name)}
	oids := []uint32{textOID}
	r := c.ExecParams(ctx, `
		SELECT pg_table_size(c.oid), pg_relation_size(c.oid) / current_setting('block_size')::bigint
		FROM pg_class c WHERE c.oid = to_regclass($1) AND c.relkind = 'r'`, param, oids, nil, nil).Read()
	if r.Err != nil {
		return tablePlan{}, fmt.Errorf("copy: size of %s: %w", name, r.Err)
	}
	if len(r.Rows) != 1 {
		return tablePlan{}, permanent(fmt.Errorf("copy: %s is not a table on the source", name))
	}
	var p tablePlan
	fmt.Sscan(string(r.Rows[0][0]), &p.bytes)
	fmt.Sscan(string(r.Rows[0][1]), &p.blocks)

	// Columns in order, with whether their binary form is portable between
	// servers: array_recv and record_recv check element and field type OIDs,
	// which differ between servers for non-built-in types.
	r = c.ExecParams(ctx, `
		WITH RECURSIVE base(attnum, attname, typ) AS (
			SELECT a.attnum, a.attname, a.atttypid FROM pg_attribute a
			WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
			UNION ALL
			SELECT b.attnum, b.attname, t.typbasetype FROM base b JOIN pg_type t ON t.oid = b.typ WHERE t.typtype = 'd'
		)
		SELECT b.attname,
		       t.typtype <> 'c' AND t.typsend::oid <> 0 AND t.typreceive::oid <> 0
		       AND (t.typsubscript <> 'array_subscript_handler'::regproc OR (e.oid < 16384 AND e.typtype <> 'c'))
		FROM base b JOIN pg_type t ON t.oid = b.typ LEFT JOIN pg_type e ON e.oid = t.typelem
		WHERE t.typtype <> 'd'
		ORDER BY b.attnum`, param, oids, nil, nil).Read()
	if r.Err != nil {
		return tablePlan{}, fmt.Errorf("copy: columns of %s: %w", name, r.Err)
	}
	p.format = "binary"
	for _, row := range r.Rows {
		p.cols = append(p.cols, pgx.Identifier{string(row[0])}.Sanitize())
		if string(row[1]) != "t" {
			p.format = "text"
		}
	}
	if len(p.cols) == 0 {
		return tablePlan{}, permanent(fmt.Errorf("copy: %s has no columns to copy", name))
	}
	return p, nil
}

// splitTable turns a table into copy tasks: one, or ctid block ranges of at
// least minRange bytes each, the first open below and the last open above
// (rows the snapshot sees may sit in blocks added after the size was read).
func splitTable(t pgx.Identifier, p tablePlan, idx, ranges int, minRange int64) []copyTask {
	name := t.Sanitize()
	cols := strings.Join(p.cols, ", ")
	format := "FORMAT " + p.format
	in := fmt.Sprintf("COPY %s (%s) FROM STDIN (%s)", name, cols, format)
	n := 1
	if ranges > 1 && p.blocks > 1 && p.bytes >= 2*minRange {
		n = int(min(int64(ranges), p.bytes/minRange, p.blocks))
	}
	if n <= 1 {
		return []copyTask{{table: idx, out: fmt.Sprintf("COPY %s (%s) TO STDOUT (%s)", name, cols, format), in: in, weight: p.bytes}}
	}
	tasks := make([]copyTask, 0, n)
	for i := 0; i < n; i++ {
		lo, hi := p.blocks*int64(i)/int64(n), p.blocks*int64(i+1)/int64(n)
		var where []string
		if i > 0 {
			where = append(where, fmt.Sprintf("ctid >= '(%d,0)'::tid", lo))
		}
		if i < n-1 {
			where = append(where, fmt.Sprintf("ctid < '(%d,0)'::tid", hi))
		}
		out := fmt.Sprintf("COPY (SELECT %s FROM ONLY %s WHERE %s) TO STDOUT (%s)", cols, name, strings.Join(where, " AND "), format)
		tasks = append(tasks, copyTask{table: idx, out: out, in: in, weight: p.bytes / int64(n)})
	}
	return tasks
}

// pipeDepth is how many 256 KiB buffers a copy task may hold in flight.
const pipeDepth = 8

// copyOne streams one task: CopyTo on the source writes through a buffer
// into a pipe that CopyFrom on the target reads. The pipe holds up to
// pipeDepth buffers, so both servers stay busy.
func copyOne(ctx context.Context, src, tgt *pgconn.PgConn, t copyTask, lim *ratelimit.Limiter, done *atomic.Int64) (rows, n int64, err error) {
	pipe := newChunkPipe(pipeDepth)
	mw := &meteredWriter{ctx: ctx, w: pipe, lim: lim, done: done}
	bw := bufio.NewWriterSize(mw, 256<<10)
	outErr := make(chan error, 1)
	go func() {
		_, err := src.CopyTo(ctx, bw, t.out)
		if err == nil {
			err = bw.Flush()
		} else {
			err = fmt.Errorf("read from source: %w", err)
		}
		pipe.CloseWrite(err) // nil: the reader sees EOF
		outErr <- err
	}()
	tag, inErr := tgt.CopyFrom(ctx, pipe, t.in)
	if inErr != nil {
		pipe.CloseRead(inErr) // unblock the writer
	}
	srcErr := <-outErr
	// A source failure is the cause unless it is the target's own error
	// coming back through the pipe.
	if srcErr != nil && (inErr == nil || !errors.Is(srcErr, inErr)) {
		return 0, 0, srcErr
	}
	if inErr != nil {
		return 0, 0, fmt.Errorf("write to target: %w", inErr)
	}
	return tag.RowsAffected(), mw.n, nil
}

// meteredWriter counts and throttles what goes into the pipe.
type meteredWriter struct {
	ctx  context.Context
	w    io.Writer
	lim  *ratelimit.Limiter
	done *atomic.Int64
	n    int64
}

func (m *meteredWriter) Write(p []byte) (int, error) {
	if err := m.lim.Wait(m.ctx, len(p)); err != nil { // nil lim: no limit
		return 0, err
	}
	n, err := m.w.Write(p)
	m.n += int64(n)
	m.done.Add(int64(n))
	return n, err
}
