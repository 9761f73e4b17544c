package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// What a run reports: one line per figure, with where it comes from.

// cpuModel names the machine's CPU, from /proc/cpuinfo.
func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1 // nearest rank
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func rate(n int, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(n)/d.Seconds(), 'f', 0, 64) + "/s"
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

func perDelivery(d time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond)/float64(n), 'f', 2, 64) + " ms"
}

func perDeliveryN(v int64, n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(v)/float64(n), 'f', 2, 64)
}

// bytesPer is v bytes per delivery.
func bytesPer(v int64, n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(v)/float64(n), 'f', 0, 64) + " B"
}

// sqsRequestPrice is what SQS charges per request in US dollars (standard
// and FIFO queues cost $0.40 and $0.50 per million after the free tier;
// a request of up to 64 KiB counts once).
const sqsRequestPrice = 0.50 / 1e6

func mib(b int64) string { return mibN(b) + " MiB" }

// mibN is b in MiB, without the unit.
func mibN(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) }

func (r benchResult) write(w io.Writer, o benchOptions, dbName string) {
	creates := "single creates"
	if o.batch > 1 {
		creates = fmt.Sprintf("batches of %d", o.batch)
	}
	mode := fmt.Sprintf("throughput: %d jobs, %d clients", r.jobs, o.clients)
	from := "create request sent"
	if o.rate > 0 {
		mode = fmt.Sprintf("fixed rate: %g jobs/s for %s (%d jobs, open loop)", o.rate, o.duration, r.jobs)
		from = "create scheduled"
	}
	system := "dispatch all as a child process"
	if o.split {
		system = "dispatch api + dispatch router as child processes"
	}
	if o.floor {
		system = "the floor service (net/http and pgx: insert, POST, update; no queue, no dispatch) as a child process"
	}
	n := r.deliveries
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "dispatch-bench\t%s, %s, pool concurrency %d, %s\n", mode, creates, o.concurrency, system)
	fmt.Fprintf(tw, "machine\t%s, %d CPUs, GOMAXPROCS %d, %s/%s, %s\n",
		cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
	// No third cell: the header lines do not widen the figures' column.
	pgVersion, _, _ := strings.Cut(r.pgVersion, " ") // "15.20 (Debian 15.20-0+deb12u1)"
	switch r.autovacuum {
	case "on":
		fmt.Fprintf(tw, "PostgreSQL\t%s, autovacuum on (as in production)\n", pgVersion)
	case "":
		fmt.Fprintf(tw, "PostgreSQL\t%s, autovacuum unknown (SHOW autovacuum failed)\n", pgVersion)
	default:
		fmt.Fprintf(tw, "PostgreSQL\t%s, autovacuum %s (production runs it on: without it the space of dead rows is not reused, so bytes per delivery are higher)\n",
			pgVersion, r.autovacuum)
	}
	if o.database != "" {
		fmt.Fprintf(tw, "database\t%s, given with -database and kept; it held %d jobs when the load began\n", dbName, r.jobsHeld)
	} else {
		fmt.Fprintf(tw, "database\t%s, a fresh one, dropped at the end\n", dbName)
	}
	fmt.Fprintf(tw, "jobs created\t%s\t(%d in %s", rate(r.jobs, r.createdIn), r.jobs, r.createdIn.Round(time.Millisecond))
	if o.rate > 0 {
		fmt.Fprintf(tw, "; the schedule ran late by at most %s", ms(r.maxLag))
	}
	fmt.Fprintf(tw, ")\n")
	fmt.Fprintf(tw, "deliveries\t%s\t(%d in %s, end to end; %d requests, %d duplicates, %d bad signatures)\n",
		rate(r.jobs, r.deliveredIn), r.jobs, r.deliveredIn.Round(time.Millisecond), r.deliveries, r.duplicates, r.badSignatures)
	fmt.Fprintf(tw, "latency p50\t%s\t(%s → first delivery)\n", ms(percentile(r.latencies, 50)), from)
	fmt.Fprintf(tw, "latency p95\t%s\t\n", ms(percentile(r.latencies, 95)))
	fmt.Fprintf(tw, "latency p99\t%s\t\n", ms(percentile(r.latencies, 99)))
	fmt.Fprintf(tw, "latency max\t%s\t\n", ms(percentile(r.latencies, 100)))
	fmt.Fprintf(tw, "create answered\t%s\t(p50; p99 %s, max %s: %s → 201)\n",
		ms(percentile(r.answers, 50)), ms(percentile(r.answers, 99)), ms(percentile(r.answers, 100)), from)

	c := r.cpu
	if c.boxTotal > 0 {
		idle := 100 * float64(c.boxTotal-c.box) / float64(c.boxTotal)
		fmt.Fprintf(tw, "CPU per delivery\t%s\t(whole box: user+nice+system+irq+softirq from /proc/stat over %s; the box was %.0f%% idle)\n",
			perDelivery(c.box, n), r.deliveredIn.Round(time.Millisecond), idle)
	}
	const own = "load generator and receiver"
	fmt.Fprintf(tw, "  this process\t%s\t(getrusage: %s)\n", perDelivery(c.self, n), own)
	attributed := c.self
	for i, ch := range r.children {
		if i < len(c.children) {
			fmt.Fprintf(tw, "  %s\t%s\t(child process, /proc/<pid>/stat)\n", ch.name, perDelivery(c.children[i], n))
			attributed += c.children[i]
		}
	}
	// Printed even when idle: in `all` most jobs never reach the queue.
	without := ""
	if c.boxTotal > 0 {
		without = "; the whole box without it: " + perDelivery(max(c.box-c.proxy, 0), n)
	}
	fmt.Fprintf(tw, "  SQS counting proxy\t%s\t(this benchmark's, in front of SQS for the SQS requests line, not the service's; /proc/<pid>/stat%s)\n",
		perDelivery(c.proxy, n), without)
	attributed += c.proxy
	fmt.Fprintf(tw, "  PostgreSQL\t%s\t(%s this database's backends, %s the server's background processes)\n",
		perDelivery(c.pgBench+c.pgBackground, n), perDelivery(c.pgBench, n), perDelivery(c.pgBackground, n))
	fmt.Fprintf(tw, "  SQS stand-in\t%s\t(sqsfake; includes anyone else's use of it)\n", perDelivery(c.sqs, n))
	attributed += c.pgBench + c.pgBackground + c.sqs
	if c.boxTotal > 0 {
		fmt.Fprintf(tw, "  rest of the box\t%s\t(other processes, interrupts, kernel threads: noise when it is large)\n",
			perDelivery(max(c.box-attributed, 0), n))
	}

	if c.switches > 0 {
		fmt.Fprintf(tw, "context switches\t%s\t(per delivery, whole box: ctxt from /proc/stat, a CPU going from one thread to another)\n",
			perDeliveryN(c.switches, n))
	}

	if r.pgRoundTrips >= 0 {
		fmt.Fprintf(tw, "PG round trips\t%s\t(per delivery: requests the service's connections sent, as TCP data segments from TCP_INFO)\n",
			perDeliveryN(r.pgRoundTrips, n))
	} else {
		fmt.Fprintf(tw, "PG round trips\t-\t(unknown: PostgreSQL on a Unix socket, or pidfd_getfd not allowed)\n")
	}
	p := r.pg
	switch p.source {
	case pgSourceStatements:
		fmt.Fprintf(tw, "PG statements\t%s\t(per delivery, pg_stat_statements, BEGIN/COMMIT included; %s transactions, %s rows inserted, %s updated, %s deleted)\n",
			perDeliveryN(p.statements, n), perDeliveryN(p.xacts, n), perDeliveryN(p.inserted, n), perDeliveryN(p.updated, n), perDeliveryN(p.deleted, n))
		for _, st := range p.top {
			fmt.Fprintf(tw, "  %s\t%s\n", perDeliveryN(st.calls, n), oneLine(st.query, 110))
		}
	default:
		fmt.Fprintf(tw, "PG transactions\t%s\t(per delivery, pg_stat_database of %s; pg_stat_statements is not loaded; each is at least one round trip)\n",
			perDeliveryN(p.xacts, n), dbName)
		fmt.Fprintf(tw, "  rows written\t%s\t(per delivery: %s inserted, %s updated, %s deleted; %s fetched, %s returned)\n",
			perDeliveryN(p.inserted+p.updated+p.deleted, n), perDeliveryN(p.inserted, n), perDeliveryN(p.updated, n),
			perDeliveryN(p.deleted, n), perDeliveryN(p.fetched, n), perDeliveryN(p.returned, n))
	}

	fmt.Fprintf(tw, "PG bytes\t%s\t(per delivery, tables+indexes: growth of pg_database_size(%s) from before the load to after the service stopped)\n",
		bytesPer(p.dbBytes, n), dbName)
	fmt.Fprintf(tw, "  WAL\t%s\t(per delivery: pg_current_wal_lsn() over the same span; the server's WAL, so other databases' writes are included)\n",
		bytesPer(p.walBytes, n))

	if r.sqsUnknown {
		fmt.Fprintf(tw, "SQS requests\t-\t(unknown: the counting proxy did not answer)\n")
	} else {
		var sqsTotal int64
		for _, a := range r.sqs {
			sqsTotal += a.Requests
		}
		cost := "-"
		if n > 0 {
			cost = fmt.Sprintf("$%.2f", float64(sqsTotal)/float64(n)*sqsRequestPrice*1e6)
		}
		fmt.Fprintf(tw, "SQS requests\t%s\t(per delivery, the service's, counted by a proxy in front of the SQS endpoint; %s per million deliveries at $0.50 per million requests)\n",
			perDeliveryN(sqsTotal, n), cost)
		for _, a := range r.sqs {
			each := ""
			if sqsBatchActions[a.action] && a.Requests > 0 {
				each = fmt.Sprintf("(%s messages each)", strconv.FormatFloat(float64(a.Messages)/float64(a.Requests), 'f', 2, 64))
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", a.action, perDeliveryN(a.Requests, n), each)
		}
	}

	if r.peakRSS > 0 {
		fmt.Fprintf(tw, "peak RSS\t%s\t(VmHWM of this process: %s)\n", mib(r.peakRSS), own)
	}
	for _, ch := range r.children {
		of := ""
		if ch.top.rss > 0 {
			// What the peak is made of: the heap is only part of it.
			of = fmt.Sprintf("; the highest sample %s: %s anonymous (heap, stacks, runtime), %s file pages (the binary's)",
				mib(ch.top.rss), mibN(ch.top.anon), mibN(ch.top.rss-ch.top.anon))
		}
		fmt.Fprintf(tw, "  %s\t%s\t(VmHWM%s)\n", ch.name, mib(ch.peakRSS), of)
	}
	tw.Flush()
}

// oneLine squeezes a statement's whitespace and cuts it to n runes.
func oneLine(q string, n int) string {
	q = strings.Join(strings.Fields(q), " ")
	if r := []rune(q); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return q
}
