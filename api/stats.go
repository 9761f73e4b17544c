package api

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/dispatchhq/dispatch"
)

const (
	defaultStatsWindow = time.Hour
	defaultStatsBucket = time.Minute
	maxStatsWindow     = 6 * time.Hour
	minStatsBucket     = 10 * time.Second
	maxStatsBuckets    = 1440
)

type statsBucketView struct {
	Start        string   `json:"start"`
	Attempts     int64    `json:"attempts"`
	Success      int64    `json:"success"`
	Failure      int64    `json:"failure"`
	Timeout      int64    `json:"timeout"`
	NetworkError int64    `json:"networkError"`
	Blocked      int64    `json:"blocked"`
	P50Millis    *float64 `json:"p50Millis"`
	P99Millis    *float64 `json:"p99Millis"`
}

func viewStatsBucket(b dispatch.StatsBucket) statsBucketView {
	return statsBucketView{Start: fmtTime(b.Start), Attempts: b.Attempts(), Success: b.Success, Failure: b.Failure,
		Timeout: b.Timeout, NetworkError: b.NetworkError, Blocked: b.Blocked, P50Millis: b.P50Millis, P99Millis: b.P99Millis}
}

type statsTotalView struct {
	statsBucketView
	// SuccessRate is successes / attempts (nil with no attempts).
	SuccessRate *float64 `json:"successRate"`
	// The jobs that finished in the window: delivered (COMPLETED) or not
	// (ERROR, EXPIRED); JobSuccessRate is delivered / finished (nil with
	// none finished).
	JobsDelivered  int64    `json:"jobsDelivered"`
	JobsFailed     int64    `json:"jobsFailed"`
	JobSuccessRate *float64 `json:"jobSuccessRate"`
}

type statsView struct {
	From    string            `json:"from"`
	To      string            `json:"to"`
	Window  string            `json:"window"`
	Bucket  string            `json:"bucket"`
	Totals  statsTotalView    `json:"totals"`
	Buckets []statsBucketView `json:"buckets"`
}

// stats answers the Overview's series: delivery attempts by outcome and
// latency percentiles per bucket over a window.
func (s *Server) stats(c *gin.Context) {
	window, bucket, err := parseStatsQuery(c.Request.URL.Query())
	if err != nil {
		s.writeError(c, err)
		return
	}
	st, err := s.store.Stats(c.Request.Context(), s.now(), window, bucket)
	if err != nil {
		s.writeError(c, err)
		return
	}
	v := statsView{From: fmtTime(st.From), To: fmtTime(st.To), Window: window.String(), Bucket: bucket.String(),
		Totals: statsTotalView{statsBucketView: viewStatsBucket(st.Total)}, Buckets: make([]statsBucketView, len(st.Buckets))}
	if n := st.Total.Attempts(); n > 0 {
		rate := float64(st.Total.Success) / float64(n)
		v.Totals.SuccessRate = &rate
	}
	v.Totals.JobsDelivered, v.Totals.JobsFailed = st.JobsDelivered(), st.JobsFailed
	if n := st.JobsDelivered() + st.JobsFailed; n > 0 {
		rate := float64(st.JobsDelivered()) / float64(n)
		v.Totals.JobSuccessRate = &rate
	}
	for i, b := range st.Buckets {
		v.Buckets[i] = viewStatsBucket(b)
	}
	writeJSON(c, http.StatusOK, v)
}

func parseStatsQuery(q map[string][]string) (time.Duration, time.Duration, error) {
	var p dispatch.Problems
	for key := range q {
		if key != "window" && key != "bucket" {
			p.Add(key, "unknown query parameter")
		}
	}
	dur := func(name string, def, min, max time.Duration) time.Duration {
		vals := q[name]
		if len(vals) == 0 || vals[0] == "" {
			return def
		}
		d, err := time.ParseDuration(vals[0])
		if err != nil || d < min || d > max {
			p.Add(name, "must be a duration from %s to %s, such as %s", min, max, def)
			return def
		}
		return d
	}
	window := dur("window", defaultStatsWindow, time.Minute, maxStatsWindow)
	bucket := dur("bucket", defaultStatsBucket, minStatsBucket, time.Hour)
	switch {
	case time.Hour%bucket != 0:
		p.Add("bucket", "must divide an hour evenly (10s, 30s, 1m, 5m, 15m, 1h)")
	case bucket > window:
		p.Add("bucket", "must not be longer than the window")
	case window%bucket != 0:
		p.Add("bucket", "must divide the window evenly")
	case window/bucket > maxStatsBuckets:
		p.Add("bucket", "gives more than %d buckets for the window", maxStatsBuckets)
	}
	return window, bucket, p.Err()
}

// OpenBreaker is a target host whose circuit breaker is open.
type OpenBreaker struct {
	Host      string    `json:"host"`
	OpenUntil time.Time `json:"-"`
}

type monitoringView struct {
	Routers  []routerView  `json:"routers"`
	Breakers []breakerView `json:"breakers"`
}

// routerView is a router process's last report: its pools, queues,
// in-flight messages and warnings as it reported them, and whether it is
// up, stopped, or gone (silent for longer than dispatch.RouterGoneAfter).
// A router of a version that did not report its queues, in-flight
// messages or warnings has none of these fields.
type routerView struct {
	ID            string          `json:"id"`
	Host          string          `json:"host"`
	Version       string          `json:"version"`
	State         string          `json:"state"`
	StartedAt     string          `json:"startedAt"`
	ReportedAt    string          `json:"reportedAt"`
	StoppedAt     *string         `json:"stoppedAt,omitempty"`
	SilentSeconds float64         `json:"silentSeconds"`
	Pools         json.RawMessage `json:"pools"`
	Queues        json.RawMessage `json:"queues,omitempty"`
	InFlight      json.RawMessage `json:"inFlight,omitempty"`
	Warnings      json.RawMessage `json:"warnings,omitempty"`
}

type breakerView struct {
	Host      string `json:"host"`
	OpenUntil string `json:"openUntil"`
}

// monitoring answers every router's pools, queues, in-flight messages and
// warnings, as the routers last reported them to the database, and the
// circuit breakers open in this process.
func (s *Server) monitoring(c *gin.Context) {
	routers, err := s.store.Routers(c.Request.Context())
	if err != nil {
		s.writeError(c, err)
		return
	}
	v := monitoringView{Routers: make([]routerView, len(routers)), Breakers: []breakerView{}}
	for i, r := range routers {
		v.Routers[i] = routerView{ID: r.ID, Host: r.Host, Version: r.Version, State: r.State(),
			StartedAt: fmtTime(r.StartedAt), ReportedAt: fmtTime(r.ReportedAt), StoppedAt: fmtTimePtr(r.StoppedAt),
			SilentSeconds: max(r.Silence.Seconds(), 0), Pools: r.Pools, Queues: r.Queues, InFlight: r.InFlight, Warnings: r.Warnings}
	}
	if s.cfg.Breakers != nil {
		for _, b := range s.cfg.Breakers() {
			v.Breakers = append(v.Breakers, breakerView{Host: b.Host, OpenUntil: fmtTime(b.OpenUntil)})
		}
	}
	writeJSON(c, http.StatusOK, v)
}

type storageView struct {
	DatabaseBytes  int64              `json:"databaseBytes"`
	Tables         []tableStorageView `json:"tables"`
	OldestJobAt    *string            `json:"oldestJobAt"`
	Partitions     int                `json:"partitions"`
	LastUpkeep     *string            `json:"lastUpkeep"`
	NextUpkeep     *string            `json:"nextUpkeep"`
	LastDropped    int                `json:"lastDropped"`
	HeldPartitions int                `json:"heldPartitions"`
	LastError      string             `json:"lastError,omitempty"`
}

type tableStorageView struct {
	Name  string `json:"name"`
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
}

// storage answers what the history takes: database size, rows and bytes
// per table, the oldest job kept, and the last and next partition upkeep.
func (s *Server) storage(c *gin.Context) {
	st, err := s.store.Storage(c.Request.Context())
	if err != nil {
		s.writeError(c, err)
		return
	}
	v := storageView{DatabaseBytes: st.DatabaseBytes, Tables: make([]tableStorageView, len(st.Tables)),
		OldestJobAt: fmtTimePtr(st.OldestJobAt), Partitions: st.Partitions, LastUpkeep: fmtTimePtr(st.LastUpkeep),
		NextUpkeep: fmtTimePtr(st.NextUpkeep), LastDropped: st.LastDropped, HeldPartitions: st.HeldPartitions,
		LastError: st.LastError}
	for i, t := range st.Tables {
		v.Tables[i] = tableStorageView{Name: t.Name, Rows: t.Rows, Bytes: t.Bytes}
	}
	writeJSON(c, http.StatusOK, v)
}
