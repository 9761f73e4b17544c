package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// The claim finds its jobs by primary key whatever the statistics say.
// With statistics taken while almost every job was COMPLETED and a backlog
// of PENDING jobs since, PostgreSQL planned the claim as a scan of every
// PENDING job through idx_dispatch_status hashed against the ids, and split
// mode stalled at 300 deliveries/s until the next autoanalyze.
func TestClaimIsPlannedByPrimaryKeyWithStaleStatistics(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	ctx := t.Context()
	insert := func(n int, status string) []int64 {
		t.Helper()
		ids := make([]int64, n)
		for i, j := range createJobs(t, st, n) {
			ids[i] = j.ID
		}
		if _, err := pool.Exec(ctx, `UPDATE dispatch_job SET status = $2 WHERE id = ANY($1)`, ids, status); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	for range 40 {
		insert(100, "COMPLETED")
	}
	if _, err := pool.Exec(ctx, `ANALYZE dispatch_job`); err != nil {
		t.Fatal(err)
	}
	var backlog []int64
	for range 30 {
		backlog = append(backlog, insert(100, "PENDING")...) // not analyzed: the statistics say PENDING is rare
	}
	ids := backlog[:50]
	now := time.Now()
	times := func(t time.Time) []time.Time {
		out := make([]time.Time, len(ids))
		for i := range out {
			out[i] = t
		}
		return out
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// A custom plan, as PostgreSQL makes for a statement's first runs and
	// whenever it finds one cheaper than the generic plan.
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_custom_plan`); err != nil {
		t.Fatal(err)
	}
	var plan []byte
	if err := tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+store.ClaimManySQL(st, ids),
		ids, times(now), times(now.Add(time.Minute)), times(now.Add(time.Second)), slices.Min(ids), slices.Max(ids)).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	// Each partition holding jobs is read by its primary key. (An empty
	// partition, analyzed while empty, may be planned through any index:
	// every one costs nothing. Once it holds rows, their analysis replans
	// the statement.)
	rows, err := tx.Query(ctx, `SELECT DISTINCT tableoid::regclass::text FROM dispatch_job`)
	if err != nil {
		t.Fatal(err)
	}
	filled, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	reads := jobIndexes(t, plan)
	for _, part := range filled {
		if got := reads[part]; got != part+"_pkey" {
			t.Errorf("the claim reads %s through %q, want its primary key only:\n%s", part, got, plan)
		}
	}
}

// Claims and finishes read dispatch_job by primary key however small the
// table was when their connection first ran them. As prepared statements,
// PostgreSQL gave the finish a generic plan after five runs on a small
// table, a sequential scan joined to the batch, and kept it while the table
// grew: 1,612 such scans in one 50,000-job bench run. The test runs a
// connection through that history and counts the rows it read by
// sequential scans once the table had grown.
func TestHotStatementsKeepPrimaryKeyPlansAsTheTableGrows(t *testing.T) {
	t.Parallel()
	url := storetest.NewDatabase(t)
	st, pool := oneConnection(t, url) // one connection runs it all
	for range 10 {                    // on a table of a few rows
		completeJob(t, st, createJob(t, st).ID, now())
	}
	var grown []dispatch.Job
	for range 50 {
		grown = append(grown, createJobs(t, st, 100)...)
	}
	for _, j := range grown[:10] {
		completeJob(t, st, j.ID, now())
	}
	pool.Close()
	// Each of the last ten deliveries would have read all 5,010 rows, by a
	// sequential scan or by a whole index joined to the batch.
	if seqRead, idxRead := rowsRead(t, url, "dispatch_job"); seqRead+idxRead >= int64(len(grown)) {
		t.Errorf("sequential scans read %d rows of dispatch_job and index scans %d; the deliveries after it grew should find their jobs by primary key",
			seqRead, idxRead)
	}
}

// A delivery's statements are planned once per connection, not on every
// run: planning each for its arguments cost 23 % of PostgreSQL's CPU under
// full load. The searches of the console are the exception, planned for
// their arguments every time, and they leave the connection as they found
// it.
func TestDeliveryStatementsArePlannedOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := storetest.NewDatabase(t)
	st, pool := oneConnection(t, url) // one connection runs it all
	defer pool.Close()
	const deliveries = 20
	for range deliveries {
		completeJob(t, st, createJob(t, st).ID, now())
	}
	type prepared struct {
		statement              string
		generic, custom, total int64
	}
	plans := func() []prepared {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements
			WHERE statement NOT LIKE '%pg_prepared_statements%'`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (prepared, error) {
			var p prepared
			err := r.Scan(&p.statement, &p.generic, &p.custom)
			p.total = p.generic + p.custom
			return p, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	var runs int64
	for _, p := range plans() {
		runs += p.total
		if p.custom > 0 {
			t.Errorf("a delivery statement was planned for its arguments %d times in %d runs:\n%s", p.custom, p.total, p.statement)
		}
	}
	if runs < 3*deliveries { // a create, a claim and a finish each
		t.Fatalf("%d prepared statement runs for %d deliveries; the test no longer sees the delivery path", runs, deliveries)
	}

	// The console's search, on the same connection.
	for range 3 {
		if _, total, err := st.SearchJobs(ctx, dispatch.JobFilter{Statuses: []dispatch.Status{dispatch.StatusCompleted}}, 0, 10); err != nil || total != deliveries {
			t.Fatalf("SearchJobs: %d jobs, %v; want %d", total, err, deliveries)
		}
	}
	var searched bool
	for _, p := range plans() {
		if !strings.Contains(p.statement, "SELECT count(*) FROM (SELECT 1 FROM dispatch_job") {
			continue
		}
		searched = true
		if p.generic > 0 || p.custom != 3 {
			t.Errorf("the search's count ran %d generic plans and %d custom ones; want a plan for its arguments each time", p.generic, p.custom)
		}
	}
	if !searched {
		t.Error("the search's count is not among the connection's prepared statements")
	}
	for setting, want := range map[string]string{"plan_cache_mode": "force_custom_plan", "enable_seqscan": "on", "statement_timeout": "5s"} {
		got, err := store.BrowseSetting(ctx, st, setting)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("inside a search's transaction %s = %q, want %q", setting, got, want)
		}
	}
	for setting, want := range map[string]string{"plan_cache_mode": "force_generic_plan", "enable_seqscan": "off"} {
		var got string
		if err := pool.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("after a search the connection has %s = %q, want %q", setting, got, want)
		}
	}
}

// The publisher takes its batch of due jobs by key, whatever the
// statistics say. As a generic plan, a LIMIT given as a parameter was
// reckoned at a tenth of the backlog the statistics showed, and the batch
// was joined to a read of the whole primary key.
func TestPublishDueReadsOnlyTheJobsItTakes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := storetest.NewDatabase(t)
	const backlog, batch, rounds = 5000, 100, 3
	st, pool := oneConnection(t, url)
	for range backlog / 100 {
		createJobs(t, st, 100) // no hand-off in this Store: every job waits for the outbox
	}
	if _, err := pool.Exec(ctx, `ANALYZE dispatch_job`); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	seq0, idx0 := rowsRead(t, url, "dispatch_job")
	st, pool = oneConnection(t, url) // a new connection plans with the backlog in the statistics
	sent := 0
	for range rounds {
		n, err := st.PublishDue(ctx, time.Now().Add(time.Second), batch, func(due []dispatch.Unsent) ([]int64, error) {
			ids := make([]int64, len(due))
			for i, u := range due {
				ids[i] = u.ID
			}
			return ids, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		sent += n
	}
	if sent != rounds*batch {
		t.Fatalf("published %d jobs, want %d", sent, rounds*batch)
	}
	pool.Close()
	// Each round reads its batch through the outbox index and updates it
	// by primary key: a few hundred rows. A join to the whole primary key
	// reads the backlog every round.
	seq, idx := rowsRead(t, url, "dispatch_job")
	if seq, idx = seq-seq0, idx-idx0; seq+idx >= backlog {
		t.Errorf("%d rounds of %d read %d rows of dispatch_job by sequential scan and %d through indexes; want about %d",
			rounds, batch, seq, idx, 2*rounds*batch)
	}
}

// The planner settings follow DATABASE_URL: the pool's pair (generic
// plans, no sequential scans) only in pgx's default mode and when the URL
// names neither; a generic plan free to scan the table is never set up.
func TestPlannerSettingsFollowDatabaseURL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := storetest.NewDatabase(t)
	for _, c := range []struct{ param, planMode, seqscan string }{
		{"", "force_generic_plan", "off"},
		{"enable_seqscan=on", "auto", "on"},
		{"plan_cache_mode=force_custom_plan", "force_custom_plan", "on"},
		{"default_query_exec_mode=exec", "auto", "on"},
		{"default_query_exec_mode=simple_protocol", "auto", "on"},
	} {
		u := url
		if c.param != "" {
			u = withParam(url, c.param)
		}
		pool, err := store.Connect(ctx, u, 1)
		if err != nil {
			t.Fatal(err)
		}
		var planMode, seqscan string
		err = pool.QueryRow(ctx, "SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan')").Scan(&planMode, &seqscan)
		pool.Close()
		if err != nil {
			t.Fatal(err)
		}
		if planMode != c.planMode || seqscan != c.seqscan {
			t.Errorf("with %q: plan_cache_mode %s, enable_seqscan %s; want %s, %s", c.param, planMode, seqscan, c.planMode, c.seqscan)
		}
	}
}

// The service's connections never compile a plan (JIT): with sequential
// scans off, a statement over a table of a few rows (a router's report,
// the partition list) is costed past jit_above_cost, and compiling it took
// PostgreSQL 80-770 ms of CPU each time. A URL that names jit keeps it.
func TestConnectionsDoNotCompilePlans(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := storetest.NewDatabase(t)
	for param, want := range map[string]string{"": "off", "jit=on": "on"} {
		u := url
		if param != "" {
			u = withParam(url, param)
		}
		pool, err := store.Connect(ctx, u, 1)
		if err != nil {
			t.Fatal(err)
		}
		var jit string
		var available bool
		var plan []string
		err = pool.QueryRow(ctx, "SELECT current_setting('jit'), pg_jit_available()").Scan(&jit, &available)
		if err == nil {
			var rows pgx.Rows
			if rows, err = pool.Query(ctx, `EXPLAIN (ANALYZE) SELECT COALESCE(max(hi), 0) FROM dispatch_partition WHERE parent = 'dispatch_job'`); err == nil {
				plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
		}
		pool.Close()
		if err != nil {
			t.Fatal(err)
		}
		if jit != want {
			t.Errorf("with %q: jit = %s, want %s", param, jit, want)
		}
		// With jit on (and a server that can compile), the same statement is
		// compiled: what the setting saves.
		if compiled := slices.ContainsFunc(plan, func(l string) bool { return strings.HasPrefix(l, "JIT:") }); compiled != (jit == "on" && available) {
			t.Errorf("with %q: the statement over the partition list compiled %v, want %v:\n%s", param, compiled, jit == "on" && available, strings.Join(plan, "\n"))
		}
	}
}

// A fan-out reads the subscriptions that match its event, not all of them:
// the jobs are written from the match's rows. Joining them back to
// dispatch_subscription made PostgreSQL hash the whole table once an event
// had a few dozen subscribers.
func TestPublishEventReadsOnlyMatchingSubscriptions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := storetest.NewDatabase(t)
	st, pool := oneConnection(t, url)
	const subscriptions, subscribers = 5000, 50
	if _, err := pool.Exec(ctx, `
		INSERT INTO dispatch_subscription (id, name, url, event_types, max_retries, retry_strategy, status, created_at, updated_at)
		SELECT g, 'sub', 'https://example.com/hook/' || g,
			CASE WHEN g <= $1 THEN ARRAY['order.created'] ELSE ARRAY['invoice.' || g] END,
			5, 'exponential', 'ACTIVE', now(), now()
		FROM generate_series(1, $2) g`, subscribers, subscriptions); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE dispatch_subscription`); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if e, _ := publish(t, st, "order.created", `{}`, nil, ""); len(e.Jobs) != subscribers {
			t.Fatalf("%d jobs, want %d", len(e.Jobs), subscribers)
		}
	}
	pool.Close()
	if seq, idx := rowsRead(t, url, "dispatch_subscription"); seq+idx >= subscriptions {
		t.Errorf("three fan-outs read %d subscriptions by sequential scan and %d through indexes; they should read the %d that match",
			seq, idx, subscribers)
	}
}

// Reading an event's jobs (its page, a publish repeated with its key) looks
// only in the partitions from the event's on: its jobs were made with it.
// Without a bound on the id, it probed every partition's event index, one
// a day of history.
func TestAnEventsJobsAreReadFromItsPartitionOn(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	ctx := t.Context()
	if err := store.StartHistoryAt(ctx, st, time.Now().Add(-5*24*time.Hour), 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateSubscription(ctx, newSubscription("*")); err != nil {
		t.Fatal(err)
	}
	e, _ := publish(t, st, "order.created", `{}`, nil, "")
	got, err := st.GetEvent(ctx, e.ID)
	if err != nil || len(got.Jobs) != 1 || got.Jobs[0].ID != e.Jobs[0].ID {
		t.Fatalf("GetEvent = %+v, %v; want its one job %d", got.Jobs, err, e.Jobs[0].ID)
	}
	parts := jobPartitions(t, pool)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // EXPLAIN only
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	plan := planText(t, tx, "EXPLAIN "+store.EventJobsSQL(st, e.ID), e.ID)
	named := partitionsNamed(plan)
	// Five days before the event hold nothing of it.
	if parts < 6 || len(named) > parts-5 {
		t.Errorf("of %d partitions, reading an event's jobs names %d (want none of the 5 days before it):\n%s", parts, len(named), plan)
	}
}

// rowsRead is how many rows of table sequential scans and index scans have
// read in the database at url, once every other connection to it has gone:
// a backend reports its table statistics as it exits, so close the pools
// first.
func rowsRead(t *testing.T, url, table string) (seq, idx int64) {
	t.Helper()
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	deadline := time.Now().Add(10 * time.Second)
	for {
		var others int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&others); err != nil {
			t.Fatal(err)
		}
		if others == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := admin.QueryRow(ctx, `SELECT coalesce(seq_tup_read, 0), coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables
		WHERE relname = $1`, table).Scan(&seq, &idx); err != nil {
		t.Fatal(err)
	}
	return seq, idx
}

// jobIndexes lists the indexes through which an EXPLAIN (FORMAT JSON) plan
// reads dispatch_job j; a sequential scan appears as "Seq Scan".
func jobIndexes(t *testing.T, plan []byte) map[string]string {
	t.Helper()
	reads := map[string]string{} // partition of dispatch_job → how the statement reads it
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			rel, _ := v["Relation Name"].(string)
			alias, _ := v["Alias"].(string)
			if strings.HasPrefix(rel, "dispatch_job") && (alias == "j" || strings.HasPrefix(alias, "j_")) {
				how := fmt.Sprint(v["Node Type"])
				if name, ok := v["Index Name"].(string); ok {
					how = name
				}
				if strings.HasSuffix(fmt.Sprint(v["Node Type"]), "Scan") {
					reads[rel] = strings.Trim(reads[rel]+","+how, ",")
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	var doc any
	if err := json.Unmarshal(plan, &doc); err != nil {
		t.Fatal(err)
	}
	walk(doc)
	return reads
}

// Migrating leaves the pool's connections with their planner settings:
// tern ends each migration with RESET ALL, and the connection that ran
// them, had it been one of the pool's, served traffic with generic plans
// free to scan dispatch_job whole.
func TestMigratingKeepsThePoolsSessionSettings(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := storetest.NewEmptyDatabase(t)
	pool, err := store.Connect(ctx, withParam(url, "pool_max_conns=1"), 1) // the one connection migrations could take
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for setting, want := range map[string]string{"plan_cache_mode": "force_generic_plan", "enable_seqscan": "off"} {
		var got string
		if err := pool.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("after migrating, the pool's connection has %s = %q, want %q", setting, got, want)
		}
	}
}

// oneConnection opens a Store over a pool of one connection to the database
// at url, so that every statement runs on the connection whose plans a test
// watches. Close the pool to have the connection report its statistics.
func oneConnection(t *testing.T, url string) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	pool, err := store.Connect(t.Context(), withParam(url, "pool_max_conns=1"), 1)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(pool, store.Options{NodeID: 1, Sealer: newSealer(t, make([]byte, 32), nil)})
	if err != nil {
		pool.Close()
		t.Fatal(err)
	}
	return st, pool
}

// withParam adds a query parameter to a database URL.
func withParam(url, param string) string {
	if strings.Contains(url, "?") {
		return url + "&" + param
	}
	return url + "?" + param
}

// explained is a statement's plan as the console's reads are planned (for
// their arguments, sequential scans allowed): every node, flattened, and
// the partitions of dispatch_job that hold rows (an empty partition may be
// planned any way: reading it costs nothing).
type explained struct {
	plan   []byte
	nodes  []map[string]any
	filled []string
}

// explain runs EXPLAIN (FORMAT JSON, and ANALYZE with analyze) of sql.
func explain(t *testing.T, pool *pgxpool.Pool, analyze bool, sql string, args ...any) explained {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = on; SET LOCAL plan_cache_mode = force_custom_plan`); err != nil {
		t.Fatal(err)
	}
	opts := "FORMAT JSON"
	if analyze {
		opts = "ANALYZE, FORMAT JSON"
	}
	var e explained
	if err := tx.QueryRow(ctx, "EXPLAIN ("+opts+") "+sql, args...).Scan(&e.plan); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, `SELECT DISTINCT tableoid::regclass::text FROM dispatch_job`)
	if err != nil {
		t.Fatal(err)
	}
	if e.filled, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(e.plan, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			e.nodes = append(e.nodes, v)
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return e
}

// onFilled reports whether node reads a partition of dispatch_job that
// holds rows.
func (e explained) onFilled(node map[string]any) bool {
	return slices.Contains(e.filled, fmt.Sprint(node["Relation Name"]))
}

// A send confirmation reads only the jobs it confirms, by primary key, in
// its generic plan too (the one a pool connection keeps). Joined with its
// batch, it once walked every job in the batch's id range against the
// whole batch: 1.2 s a call on a table of 5,000,000 jobs.
func TestConfirmSentReadsOnlyTheJobsItConfirms(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	st.HandOffTo(stuckHandoff{}) // jobs stored marked queued, under a send lease
	ctx := t.Context()
	var jobs []dispatch.Job
	for range 20 {
		jobs = append(jobs, createJobs(t, st, 200)...)
	}
	if _, err := pool.Exec(ctx, `ANALYZE dispatch_job`); err != nil {
		t.Fatal(err)
	}
	// Every tenth job of the range: 400 confirmations among 4,000 jobs.
	var ids, marks []string
	var confirmed []int64
	for i := 0; i < len(jobs); i += 10 {
		confirmed = append(confirmed, jobs[i].ID)
		ids = append(ids, dispatch.FormatID(jobs[i].ID))
		marks = append(marks, `"`+jobs[i].QueuedAt.UTC().Format(time.RFC3339Nano)+`"`)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // EXPLAIN ANALYZE updates; nothing is kept
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan; PREPARE confirm AS `+store.ConfirmSentSQL(st, confirmed)); err != nil {
		t.Fatal(err)
	}
	defer pool.Exec(ctx, `DEALLOCATE ALL`) //nolint:errcheck // the connection goes back clean
	var plan []byte
	if err := tx.QueryRow(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE confirm('{%s}', '{%s}')`,
		strings.Join(ids, ","), strings.Join(marks, ","))).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(plan, &doc); err != nil {
		t.Fatal(err)
	}
	// Rows a node of dispatch_job looked at: those it returned plus those
	// its filter threw away, on every loop.
	var looked float64
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if name, _ := v["Relation Name"].(string); strings.HasPrefix(name, "dispatch_job") {
				rows, _ := v["Actual Rows"].(float64)
				removed, _ := v["Rows Removed by Filter"].(float64)
				loops, _ := v["Actual Loops"].(float64)
				looked += (rows + removed) * loops
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	if limit := float64(3 * len(ids)); looked > limit || looked == 0 {
		t.Errorf("confirming %d jobs looked at %.0f rows of dispatch_job, want at most %.0f:\n%s", len(ids), looked, limit, plan)
	}
}

var partitionName = regexp.MustCompile(`^dispatch_job_(p\d{8}t\d{6}|legacy)$`)

// The claim's generic plan (the one a pool connection keeps) names only the
// partitions of its batch. With its id bounds as parameters it named every
// partition, and PostgreSQL 15 locks each partition a generic plan names,
// with all its indexes, before setting any aside: 432 locks a claim on a
// month of daily partitions, twice the time of the same claim on an empty
// database.
func TestClaimsGenericPlanNamesOnlyItsPartitions(t *testing.T) {
	t.Parallel()
	st, pool := setup(t)
	ctx := t.Context()
	if err := store.StartHistoryAt(ctx, st, time.Now().Add(-5*24*time.Hour), 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	jobs := createJobs(t, st, 20)
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	parts := jobPartitions(t, pool)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // EXPLAIN only
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan; PREPARE claim(bigint[], timestamptz[], timestamptz[], timestamptz[], bigint, bigint) AS `+
		store.ClaimManySQL(st, ids)); err != nil {
		t.Fatal(err)
	}
	defer pool.Exec(ctx, `DEALLOCATE ALL`) //nolint:errcheck // the connection goes back clean
	lits := make([]string, len(ids))
	for i, id := range ids {
		lits[i] = dispatch.FormatID(id)
	}
	plan := planText(t, tx, fmt.Sprintf(`EXPLAIN EXECUTE claim('{%s}', '{}', '{}', '{}', %d, %d)`,
		strings.Join(lits, ","), slices.Min(ids), slices.Max(ids)))
	named := partitionsNamed(plan)
	if parts < 5 || len(named) != 1 {
		t.Errorf("of %d partitions, the claim's generic plan names %d (want only its batch's):\n%s", parts, len(named), plan)
	}
}

// jobPartitions is how many partitions dispatch_job has.
func jobPartitions(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_inherits WHERE inhparent = 'dispatch_job'::regclass`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// partitionsNamed is the set of dispatch_job's partitions a plan names.
func partitionsNamed(plan string) map[string]bool {
	named := map[string]bool{}
	for _, f := range strings.Fields(plan) {
		if partitionName.MatchString(f) {
			named[f] = true
		}
	}
	return named
}

// planText runs an EXPLAIN in tx and returns its text, a line per node.
func planText(t *testing.T, tx pgx.Tx, explain string, args ...any) string {
	t.Helper()
	rows, err := tx.Query(t.Context(), explain, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}
