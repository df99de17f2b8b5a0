// Package metrics holds bgjobs' own Prometheus instruments. They are
// process-wide; /metrics serves them beside asynq's queue collector.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	// Spawned counts accepted jobs by kind.
	Spawned = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bgjobs_jobs_spawned_total", Help: "Jobs accepted, by kind.",
	}, []string{"kind"})
	// Settled counts jobs that ended, by status and kind.
	Settled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bgjobs_jobs_settled_total", Help: "Jobs that reached a terminal state, by status and kind.",
	}, []string{"status", "kind"})
	// DrainSize observes how many notifications each drain handed over.
	DrainSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "bgjobs_drain_notifications", Help: "Notifications handed over per drain.",
		Buckets: []float64{0, 1, 2, 5, 10, 50, 100, 1000},
	})
	// Resumes counts resume outcomes: delivered, failed (retried), held
	// (session busy) or dropped (the agent takes none).
	Resumes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bgjobs_resumes_total", Help: "Resume attempts by result: delivered, failed, held, dropped.",
	}, []string{"result"})
	// ResumeLatency observes the time from a resume's cause to its delivery.
	ResumeLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "bgjobs_resume_latency_seconds", Help: "From the settle (or join) that caused a resume to its delivery.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	// BatchJoins counts batch joins, partial ones apart.
	BatchJoins = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bgjobs_batch_joins_total", Help: "Batch joins; partial=\"true\" for straggler timeouts.",
	}, []string{"partial"})
	// SentBack counts tasks sent back to their queue because their agent
	// held its share (of the turn cap, of a process's work slots): they
	// wait there, not charged an attempt.
	SentBack = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bgjobs_jobs_sent_back_total", Help: "Tasks sent back to their queue because their agent held its share, by share: turn or work.",
	}, []string{"share"})
	// IndexLag is how far the search writer is behind the reports stream.
	IndexLag = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bgjobs_index_lag_seconds", Help: "Age of the oldest report not yet indexed by this process (0 when caught up).",
	})
)

// Register adds every instrument to r.
func Register(r prometheus.Registerer) {
	r.MustRegister(Spawned, Settled, DrainSize, Resumes, ResumeLatency, BatchJoins, SentBack, IndexLag)
}
