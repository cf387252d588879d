package hotpart

import (
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricTop is how many partitions the Collector exports.
const MetricTop = 5

var (
	rateDesc = prometheus.NewDesc("cerulean_hot_partition_entities_per_second",
		"Entity operations per second over the last minute of the busiest partitions (at most 5; the target is 2,000 per partition).",
		[]string{"account", "table", "partition_key"}, nil)
	errorDesc = prometheus.NewDesc("cerulean_hot_partition_error_entities_per_second",
		"Bound on the error of cerulean_hot_partition_entities_per_second for the same partition (the sketch's).",
		[]string{"account", "table", "partition_key"}, nil)
	targetDesc = prometheus.NewDesc("cerulean_partition_target_entities_per_second",
		"A partition's throughput target, entities per second (Azure Table storage's).", nil, nil)
)

// Collector returns a prometheus.Collector of the MetricTop busiest partitions of all
// tables: their names are label values, but never more than MetricTop series at a
// time, so the cardinality stays bounded (a partition that cools leaves the output).
func (t *Tracker) Collector() prometheus.Collector { return collector{t} }

type collector struct{ t *Tracker }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rateDesc
	ch <- errorDesc
	ch <- targetDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(targetDesc, prometheus.GaugeValue, Target)
	for _, tr := range c.t.Top(MetricTop) {
		p := tr.Partitions[0]
		labels := []string{label(tr.Account), label(tr.Table), label(p.PartitionKey)}
		ch <- prometheus.MustNewConstMetric(rateDesc, prometheus.GaugeValue, p.EntitiesPerSec, labels...)
		ch <- prometheus.MustNewConstMetric(errorDesc, prometheus.GaugeValue, p.ErrorPerSec, labels...)
	}
}

// maxLabel bounds a label value's length: a PartitionKey may be 1 KiB.
const maxLabel = 128

// label makes s a valid label value of at most maxLabel bytes (cut at a rune).
func label(s string) string {
	s = string([]rune(s)) // invalid UTF-8 becomes U+FFFD
	if len(s) <= maxLabel {
		return s
	}
	cut := maxLabel
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
