package pgbench

import (
	"slices"
	"time"
)

// Latency sums up transactions' latencies.
type Latency struct {
	// N counts the transactions that did not fail, Failed those that did.
	N, Failed int
	// P99 is the 99th percentile (nearest rank) of the latencies of the
	// transactions that did not fail; Slowest is the slowest of them
	// (the zero Txn for none).
	P99     time.Duration
	Slowest Txn
}

// Stats sums up txns' latencies.
func Stats(txns []Txn) Latency {
	var out Latency
	lat := make([]time.Duration, 0, len(txns))
	for _, x := range txns {
		if x.Failed {
			out.Failed++
			continue
		}
		lat = append(lat, x.Latency)
		if x.Latency > out.Slowest.Latency {
			out.Slowest = x
		}
	}
	out.N = len(lat)
	if len(lat) > 0 {
		slices.Sort(lat)
		out.P99 = lat[(len(lat)*99+99)/100-1]
	}
	return out
}

// Ended returns the transactions that ended in [from, to).
func Ended(txns []Txn, from, to time.Time) []Txn {
	var out []Txn
	for _, x := range txns {
		if !x.End.Before(from) && x.End.Before(to) {
			out = append(out, x)
		}
	}
	return out
}

// TPS is the transactions per second that did not fail and ended in
// [from, to); 0 for an empty window.
func TPS(txns []Txn, from, to time.Time) float64 {
	if !to.After(from) {
		return 0
	}
	n := 0
	for _, x := range Ended(txns, from, to) {
		if !x.Failed {
			n++
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

// Span returns when the first and the last of txns ended (zero times for
// none).
func Span(txns []Txn) (first, last time.Time) {
	for i, x := range txns {
		if i == 0 || x.End.Before(first) {
			first = x.End
		}
		if i == 0 || x.End.After(last) {
			last = x.End
		}
	}
	return first, last
}
