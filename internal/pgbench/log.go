package pgbench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Txn is one line of pgbench's per-transaction log.
type Txn struct {
	// Node names the entry node (the log files' name).
	Node string
	// Client is the client that ran it (per process).
	Client int
	// End is when it ended.
	End time.Time
	// Latency is how long it took as the client saw it; zero when it
	// failed.
	Latency time.Duration
	// Failed is set for a transaction pgbench counted as failed
	// (serialization or deadlock error).
	Failed bool
}

// logSuffixRE matches what follows a log prefix: .<pid>, and .<thread>
// for threads past the first.
var logSuffixRE = regexp.MustCompile(`^\.\d+(\.\d+)?$`)

// ReadLogs reads the per-transaction logs pgbench wrote under prefix
// (prefix.<pid>, and prefix.<pid>.<thread> for threads past the first);
// each transaction's Node is prefix's base name. None is an error.
func ReadLogs(prefix string) ([]Txn, error) {
	files, err := filepath.Glob(prefix + ".*")
	if err != nil {
		return nil, fmt.Errorf("pgbench logs %s: %w", prefix, err)
	}
	node := filepath.Base(prefix)
	var out []Txn
	found := 0
	sort.Strings(files)
	for _, f := range files {
		if !logSuffixRE.MatchString(strings.TrimPrefix(f, prefix)) {
			continue
		}
		found++
		fh, err := os.Open(f)
		if err != nil {
			return nil, fmt.Errorf("pgbench log: %w", err)
		}
		txns, err := ParseLog(fh, node)
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, txns...)
	}
	if found == 0 {
		return nil, fmt.Errorf("pgbench wrote no log under %s", prefix)
	}
	return out, nil
}

// ParseLog reads one per-transaction log file, of pgbench 15 without
// --rate or retries. A line is "client_id transaction_no time script_no
// time_epoch time_us": time is the latency in microseconds, or "failed"
// ("serialization" or "deadlock" with --failures-detailed) when the
// transaction failed; time_epoch.time_us is when it ended.
func ParseLog(r io.Reader, node string) ([]Txn, error) {
	var out []Txn
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) != 6 {
			return out, fmt.Errorf("line %d: %q is not a pgbench 15 log line of 6 fields (a --rate or retries column?)", n, sc.Text())
		}
		client, err1 := strconv.Atoi(f[0])
		sec, err2 := strconv.ParseInt(f[4], 10, 64)
		usec, err3 := strconv.ParseInt(f[5], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return out, fmt.Errorf("line %d: malformed pgbench log line %q", n, sc.Text())
		}
		x := Txn{Node: node, Client: client, End: time.Unix(sec, usec*1000)}
		switch f[2] {
		case "failed", "serialization", "deadlock":
			x.Failed = true
		default:
			us, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				return out, fmt.Errorf("line %d: transaction time %q is neither microseconds nor a failure", n, f[2])
			}
			x.Latency = time.Duration(us) * time.Microsecond
		}
		out = append(out, x)
	}
	return out, sc.Err()
}
