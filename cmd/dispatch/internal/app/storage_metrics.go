package app

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dispatchhq/dispatch"
)

// storageCollector exposes what the delivery history takes in the
// database, read at each scrape (a few catalog reads).
type storageCollector struct {
	read                                     func(context.Context) (dispatch.Storage, error)
	dbBytes, rows, bytes, oldest, last, next *prometheus.Desc
	held                                     *prometheus.Desc
}

func newStorageCollector(read func(context.Context) (dispatch.Storage, error)) *storageCollector {
	return &storageCollector{
		read:    read,
		dbBytes: prometheus.NewDesc("dispatch_database_bytes", "Size of the database.", nil, nil),
		rows:    prometheus.NewDesc("dispatch_table_rows", "Rows of a dispatch table (PostgreSQL's estimate, all partitions).", []string{"table"}, nil),
		bytes:   prometheus.NewDesc("dispatch_table_bytes", "Bytes of a dispatch table with its indexes and TOAST, all partitions.", []string{"table"}, nil),
		oldest:  prometheus.NewDesc("dispatch_oldest_job_age_seconds", "Age of the oldest job kept.", nil, nil),
		last:    prometheus.NewDesc("dispatch_history_last_upkeep_timestamp_seconds", "When partition upkeep (creating ahead, dropping past retention) last ran.", nil, nil),
		next:    prometheus.NewDesc("dispatch_history_next_upkeep_timestamp_seconds", "When partition upkeep runs next.", nil, nil),
		held:    prometheus.NewDesc("dispatch_history_held_partitions", "Partitions past retention kept because they still hold live jobs.", nil, nil),
	}
}

func (c *storageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.dbBytes, c.rows, c.bytes, c.oldest, c.last, c.next, c.held} {
		ch <- d
	}
}

// Collect reads the storage figures. A failed read drops them from the
// scrape, and only them: dispatch_backlog_up{source="database"} says the
// database could not be read, and the rest of /metrics still answers,
// which is when its alerts matter.
func (c *storageCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeReadTimeout)
	defer cancel()
	st, err := c.read(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.dbBytes, prometheus.GaugeValue, float64(st.DatabaseBytes))
	for _, t := range st.Tables {
		ch <- prometheus.MustNewConstMetric(c.rows, prometheus.GaugeValue, float64(t.Rows), t.Name)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(t.Bytes), t.Name)
	}
	if st.OldestJobAt != nil {
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, time.Since(*st.OldestJobAt).Seconds())
	}
	if st.LastUpkeep != nil {
		ch <- prometheus.MustNewConstMetric(c.last, prometheus.GaugeValue, float64(st.LastUpkeep.Unix()))
	}
	if st.NextUpkeep != nil {
		ch <- prometheus.MustNewConstMetric(c.next, prometheus.GaugeValue, float64(st.NextUpkeep.Unix()))
	}
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(st.HeldPartitions))
}
