package scheduler

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardmover/shardmover/metadata"
	"github.com/shardmover/shardmover/mover"
)

// Metrics are the daemon's Prometheus metrics, on their own registry.
type Metrics struct {
	Registry     *prometheus.Registry
	MovesByPhase *prometheus.GaugeVec
	BytesCopied  prometheus.Counter
	Lag          *prometheus.GaugeVec
	CutoverPause prometheus.Histogram
	JobDuration  *prometheus.HistogramVec
	Leader       prometheus.Gauge
	// LeaderChanges counts this daemon's leadership changes: each time it
	// became leader and each time it stopped leading.
	LeaderChanges prometheus.Counter
	// Epoch is the leader epoch the journal records (every daemon).
	Epoch     prometheus.Gauge
	Imbalance prometheus.Gauge
	Triggers  *prometheus.CounterVec
	// SlotRetainedWAL is the WAL each shardmover_* replication slot
	// retains on its node, as last read (every daemon, every 5 polls).
	SlotRetainedWAL *prometheus.GaugeVec

	mu     sync.Mutex
	copied map[int64]int64
}

// NewMetrics registers every metric on a fresh registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		MovesByPhase: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "shardmover_moves",
			Help: "Moves recorded in the journal, by phase."}, []string{"phase"}),
		BytesCopied: prometheus.NewCounter(prometheus.CounterOpts{Name: "shardmover_bytes_copied_total",
			Help: "Bytes copied by snapshot copies of this process."}),
		Lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "shardmover_replication_lag_bytes",
			Help: "Replication lag of running moves in bytes."}, []string{"move_id"}),
		CutoverPause: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "shardmover_cutover_write_pause_seconds",
			Help: "Write pause of committed cutovers.", Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2, 5}}),
		JobDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "shardmover_job_duration_seconds",
			Help: "Duration of rebalance and drain jobs.", Buckets: prometheus.ExponentialBuckets(1, 2, 14)}, []string{"kind"}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "shardmover_leader",
			Help: "1 while this daemon leads the cluster."}),
		LeaderChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: "shardmover_leader_changes_total",
			Help: "Times this daemon became leader or stopped leading."}),
		Epoch: prometheus.NewGauge(prometheus.GaugeOpts{Name: "shardmover_leader_epoch",
			Help: "The leader epoch (fencing token) recorded in the journal."}),
		Imbalance: prometheus.NewGauge(prometheus.GaugeOpts{Name: "shardmover_plan_imbalance",
			Help: "Largest relative distance of a node's utilization from the average after the last plan."}),
		Triggers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shardmover_triggers_total",
			Help: "Rebalance triggers, by source."}, []string{"source"}),
		SlotRetainedWAL: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "shardmover_slot_retained_wal_bytes",
			Help: "WAL retained on its node by each shardmover_* replication slot (pg_current_wal_lsn() - restart_lsn)."},
			[]string{"slot", "node", "move_id"}),
		copied: map[int64]int64{},
	}
	m.Registry.MustRegister(m.MovesByPhase, m.BytesCopied, m.Lag, m.CutoverPause, m.JobDuration, m.Leader, m.LeaderChanges, m.Epoch, m.Imbalance, m.Triggers,
		m.SlotRetainedWAL,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// progress feeds copy bytes and lag from a move's progress reports.
func (m *Metrics) progress(p mover.Progress) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := p.MoveID
	if p.Phase == mover.Copying && p.BytesDone > m.copied[id] {
		m.BytesCopied.Add(float64(p.BytesDone - m.copied[id]))
		m.copied[id] = p.BytesDone
	}
	label := prometheus.Labels{"move_id": itoa64(id)}
	switch {
	case p.Phase == mover.CatchingUp || p.Phase == mover.Cutover:
		m.Lag.With(label).Set(float64(p.LagBytes))
	case p.Phase.Terminal() || p.Phase == mover.Cleanup:
		m.Lag.Delete(label)
		delete(m.copied, id)
	}
}

// setPhases sets the moves-by-phase gauge from the journal's counts;
// every phase is shown, 0 when no move is in it.
func (m *Metrics) setPhases(counts map[string]int64) {
	for p := mover.Scheduled; p <= mover.Cancelled; p++ {
		m.MovesByPhase.WithLabelValues(p.String()).Set(float64(counts[p.String()]))
	}
	for p, n := range counts {
		m.MovesByPhase.WithLabelValues(p).Set(float64(n))
	}
}

// setSlots replaces the retained-WAL gauge with the slots just read: a
// slot that is gone leaves the gauge. A slot that reserves no WAL shows 0.
func (m *Metrics) setSlots(slots []metadata.StatusSlot) {
	m.SlotRetainedWAL.Reset()
	for _, s := range slots {
		m.SlotRetainedWAL.WithLabelValues(s.Name, s.Addr, itoa64(s.MoveID)).Set(float64(s.RetainedWALBytes))
	}
}

func itoa64(v int64) string { return strconv.FormatInt(v, 10) }
