package membudget

import "github.com/prometheus/client_golang/prometheus"

// Holders lists the budget by holder, as the gauge and the start-up log name them.
func (b Budget) Holders() []Holder {
	return []Holder{
		{"limit", b.Limit},
		{"base", Base},
		{"block_cache", b.BlockCache},
		{"memtables", MemTables * b.MemTableSize},
		{"row_cache", b.RowCache},
		{"request_bodies", b.Bodies},
		{"gc_headroom", b.GCHeadroom},
		{"go_limit", b.GoLimit},
	}
}

// Holder is one memory holder's budget.
type Holder struct {
	Name  string
	Bytes int64
}

// Collector exports the budget as the gauge cerulean_memory_budget_bytes, by holder.
func (b Budget) Collector() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cerulean_memory_budget_bytes",
		Help: "Memory each holder may take, derived from --memory-limit (limit): base (the process beside the budgets), block_cache, memtables, row_cache, request_bodies, gc_headroom, go_limit (the Go runtime's soft limit).",
	}, []string{"holder"})
	for _, h := range b.Holders() {
		g.WithLabelValues(h.Name).Set(float64(h.Bytes))
	}
	return g
}
