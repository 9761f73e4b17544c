package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"
)

// What dispatch-bench measures besides throughput and latency: the CPU of
// the whole box and of each process that takes part, and what PostgreSQL did
// per delivery. Everything is read from /proc and from PostgreSQL's own
// statistics views; nothing here changes how the service runs.

// clockTick is USER_HZ, the unit of /proc/stat and /proc/<pid>/stat; Linux
// reports 100 per second to user space on every architecture Go supports.
const clockTick = time.Second / 100

// ---------------------------------------------------------------- CPU

// boxCPU is the first line of /proc/stat, every CPU of the machine, and
// its ctxt line.
type boxCPU struct {
	busy     time.Duration // user + nice + system + irq + softirq
	total    time.Duration // busy + idle + iowait + steal
	switches int64         // context switches since boot
}

func readBoxCPU() (boxCPU, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return boxCPU{}, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return boxCPU{}, errors.New("/proc/stat: no cpu line")
	}
	var v [8]int64 // user nice system idle iowait irq softirq steal
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return boxCPU{}, fmt.Errorf("/proc/stat: %w", err)
		}
	}
	busy := v[0] + v[1] + v[2] + v[5] + v[6]
	b := boxCPU{busy: time.Duration(busy) * clockTick, total: time.Duration(busy+v[3]+v[4]+v[7]) * clockTick}
	for l := range strings.Lines(string(data)) {
		if n, ok := strings.CutPrefix(l, "ctxt "); ok {
			b.switches, _ = strconv.ParseInt(strings.TrimSpace(n), 10, 64)
			break
		}
	}
	return b, nil
}

// selfCPU is the user+system CPU this process has used (getrusage), with
// microsecond resolution.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pidCPU is utime+stime of a process from /proc/<pid>/stat.
func pidCPU(pid int) (time.Duration, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// utime and stime are the 14th and 15th fields, the 12th and 13th
	// after the parenthesized command name (which may hold spaces).
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * clockTick, true
}

// pidPeakRSS is a process's VmHWM in bytes, 0 if unknown.
func pidPeakRSS(pid int) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _, _ := strings.Cut(strings.TrimSpace(v), " ")
			n, _ := strconv.ParseInt(kb, 10, 64)
			return n << 10
		}
	}
	return 0
}

// The processes bench attributes CPU to, besides itself and its children.
const (
	groupPGBench = "postgres-bench" // backends connected to the bench database
	groupPGBack  = "postgres-bg"    // postmaster, walwriter, checkpointer, autovacuum, ...
	groupSQS     = "sqsfake"
)

// otherCPU sums the CPU so far of the PostgreSQL processes (split into the
// bench database's backends and the server's own background processes) and
// of the SQS stand-in, found by command name in /proc. Other databases'
// backends (other users of the server) are left out: they are the rest of
// the box.
func otherCPU(benchDB string) map[string]map[int]time.Duration {
	out := map[string]map[int]time.Duration{groupPGBench: {}, groupPGBack: {}, groupSQS: {}}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", d.Name())
		comm, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil {
			continue
		}
		var group string
		switch strings.TrimSpace(string(comm)) {
		case "sqsfake":
			group = groupSQS
		case "postgres":
			// A backend's command line reads "postgres: [cluster: ]user
			// database host(port) state"; the background processes name
			// their role instead.
			cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
			title := " " + strings.ReplaceAll(string(cmdline), "\x00", " ") + " "
			switch {
			case strings.Contains(title, " "+benchDB+" "):
				group = groupPGBench
			case strings.Contains(title, "(") || strings.Contains(title, "[local]"):
				continue // another database's client
			default:
				group = groupPGBack
			}
		default:
			continue
		}
		if cpu, ok := pidCPU(pid); ok {
			out[group][pid] = cpu
		}
	}
	return out
}

// cpuSample is everything CPU at one moment.
type cpuSample struct {
	at       time.Time
	box      boxCPU
	self     time.Duration
	children []time.Duration // the split-mode processes, in order
	proxy    time.Duration   // the SQS counting proxy's process
	other    map[string]map[int]time.Duration
}

func sampleCPU(benchDB string, children []int, proxy int) cpuSample {
	s := cpuSample{at: time.Now(), self: selfCPU(), other: otherCPU(benchDB)}
	s.box, _ = readBoxCPU()
	s.proxy, _ = pidCPU(proxy)
	for _, pid := range children {
		cpu, _ := pidCPU(pid)
		s.children = append(s.children, cpu)
	}
	return s
}

// cpuUse is the CPU spent between two samples.
type cpuUse struct {
	box, boxTotal time.Duration
	switches      int64 // context switches on the whole box
	self          time.Duration
	children      []time.Duration
	proxy         time.Duration // the SQS counting proxy: the benchmark's, not the service's
	pgBench       time.Duration
	pgBackground  time.Duration
	sqs           time.Duration
}

func (a cpuSample) until(b cpuSample) cpuUse {
	u := cpuUse{box: b.box.busy - a.box.busy, boxTotal: b.box.total - a.box.total,
		switches: b.box.switches - a.box.switches, self: b.self - a.self, proxy: b.proxy - a.proxy}
	for i := range b.children {
		u.children = append(u.children, b.children[i]-a.children[i])
	}
	// A process that started during the run counts from zero; one that
	// ended during it is lost (the service's connections live throughout).
	diff := func(group string) time.Duration {
		var d time.Duration
		for pid, cpu := range b.other[group] {
			d += cpu - a.other[group][pid]
		}
		return d
	}
	u.pgBench, u.pgBackground, u.sqs = diff(groupPGBench), diff(groupPGBack), diff(groupSQS)
	return u
}

// ---------------------------------------------------------------- PostgreSQL

// pgCounters is what PostgreSQL counted for the bench database, from
// pg_stat_statements when the server has it loaded, else from
// pg_stat_database.
type pgCounters struct {
	source string
	// pg_stat_statements: statements executed (BEGIN and COMMIT included)
	// and the busiest statements by calls.
	statements int64
	byQuery    map[int64]pgStatement
	// pg_stat_database.
	xacts, returned, fetched, inserted, updated, deleted int64
	// pg_database_size of the bench database, and the server's WAL
	// position (pg_current_wal_lsn() as bytes since 0/0).
	dbSize, walLSN int64
}

type pgStatement struct {
	query string
	calls int64
}

const (
	pgSourceStatements = "pg_stat_statements"
	pgSourceDatabase   = "pg_stat_database"
)

// pgStats reads the bench database's counters. It tries pg_stat_statements
// first (CREATE EXTENSION works only where shared_preload_libraries loads
// it; without, reading the view fails and pg_stat_database is used).
type pgStats struct {
	cfg    *pgx.ConnConfig // connects to the bench database
	source string
	// The server's version and its autovacuum setting ("on", "off"; ""
	// when unread): the shared development server runs without
	// autovacuum, production never does, and bytes per delivery depend on
	// whether the space of dead rows is reused.
	version, autovacuum string
}

func newPGStats(ctx context.Context, cfg *pgx.ConnConfig) *pgStats {
	p := &pgStats{cfg: cfg, source: pgSourceDatabase}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return p
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_ = conn.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('autovacuum')").
		Scan(&p.version, &p.autovacuum)
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return p
	}
	if _, err := conn.Exec(ctx, "SELECT 1 FROM pg_stat_statements LIMIT 1"); err != nil {
		return p // "must be loaded via shared_preload_libraries"
	}
	p.source = pgSourceStatements
	return p
}

// read takes a snapshot. Call the last one after the service has closed its
// connections: a backend hands its pg_stat_database counts over only now
// and then, and at the latest when it exits.
func (p *pgStats) read(ctx context.Context) (pgCounters, error) {
	conn, err := pgx.ConnectConfig(ctx, p.cfg)
	if err != nil {
		return pgCounters{}, fmt.Errorf("bench: PostgreSQL statistics: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	c := pgCounters{source: p.source}
	if p.source == pgSourceStatements {
		rows, err := conn.Query(ctx, `SELECT queryid, query, calls FROM pg_stat_statements
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			  AND query NOT LIKE '%pg_stat_%' AND queryid IS NOT NULL`)
		if err != nil {
			return c, fmt.Errorf("bench: pg_stat_statements: %w", err)
		}
		c.byQuery = map[int64]pgStatement{}
		for rows.Next() {
			var id int64
			var s pgStatement
			if err := rows.Scan(&id, &s.query, &s.calls); err != nil {
				return c, fmt.Errorf("bench: pg_stat_statements: %w", err)
			}
			c.byQuery[id] = s
			c.statements += s.calls
		}
		if err := rows.Err(); err != nil {
			return c, fmt.Errorf("bench: pg_stat_statements: %w", err)
		}
	}
	err = conn.QueryRow(ctx, `SELECT xact_commit + xact_rollback, tup_returned, tup_fetched,
			tup_inserted, tup_updated, tup_deleted,
			pg_database_size(current_database()), (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint
		FROM pg_stat_database WHERE datname = current_database()`).
		Scan(&c.xacts, &c.returned, &c.fetched, &c.inserted, &c.updated, &c.deleted, &c.dbSize, &c.walLSN)
	if err != nil {
		return c, fmt.Errorf("bench: pg_stat_database: %w", err)
	}
	return c, nil
}

// waitIdle waits until no other connection to the bench database is left,
// so that their counts have reached pg_stat_database.
func (p *pgStats) waitIdle(ctx context.Context, within time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, p.cfg)
	if err != nil {
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()
			  AND backend_type = 'client backend'`).Scan(&n)
		if err != nil || n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// pgUse is what PostgreSQL did between two snapshots.
type pgUse struct {
	source                                               string
	statements                                           int64
	top                                                  []pgStatement // by calls, most first
	xacts, returned, fetched, inserted, updated, deleted int64
	dbBytes, walBytes                                    int64 // the bench database's growth; the server's WAL
}

func (a pgCounters) until(b pgCounters) pgUse {
	u := pgUse{source: b.source, statements: b.statements - a.statements,
		xacts: b.xacts - a.xacts, returned: b.returned - a.returned, fetched: b.fetched - a.fetched,
		inserted: b.inserted - a.inserted, updated: b.updated - a.updated, deleted: b.deleted - a.deleted,
		dbBytes: b.dbSize - a.dbSize, walBytes: b.walLSN - a.walLSN}
	for id, s := range b.byQuery {
		if calls := s.calls - a.byQuery[id].calls; calls > 0 {
			u.top = append(u.top, pgStatement{query: s.query, calls: calls})
		}
	}
	slices.SortFunc(u.top, func(x, y pgStatement) int { return cmp.Compare(y.calls, x.calls) })
	if len(u.top) > 8 {
		u.top = u.top[:8]
	}
	return u
}

// pgSegments returns, per socket inode, the TCP data segments that the
// connections of the given processes to PostgreSQL's port on loopback have
// sent so far (tcpi_data_segs_out). pgx sends each request with one write
// and waits for the answer (a pipelined batch is one write too), and on
// loopback with TCP_NODELAY one write goes out as one segment, so the
// change over a run counts round trips. A child's sockets are read through
// pidfd_getfd, which a process may do for its children (unless a seccomp
// profile forbids it).
func pgSegments(pids []int, port uint16) (map[uint64]uint32, error) {
	out := map[uint64]uint32{}
	for _, pid := range pids {
		pidfd := -1 // this process reads its own sockets directly
		if pid != os.Getpid() {
			var err error
			if pidfd, err = unix.PidfdOpen(pid, 0); err != nil {
				return nil, fmt.Errorf("pidfd_open: %w", err)
			}
		}
		dir := "/proc/" + strconv.Itoa(pid) + "/fd"
		entries, err := os.ReadDir(dir)
		if err != nil {
			if pidfd >= 0 {
				unix.Close(pidfd)
			}
			return nil, err
		}
		for _, e := range entries {
			link, err := os.Readlink(filepath.Join(dir, e.Name()))
			ino, ok := strings.CutPrefix(link, "socket:[")
			if err != nil || !ok {
				continue
			}
			inode, err1 := strconv.ParseUint(strings.TrimSuffix(ino, "]"), 10, 64)
			target, err2 := strconv.Atoi(e.Name())
			if err1 != nil || err2 != nil {
				continue
			}
			if segs, ok := pgSocketSegments(pidfd, target, port); ok {
				out[inode] = segs
			}
		}
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
	}
	return out, nil
}

// pgSocketSegments reads socket target of the process behind pidfd (of
// this process when pidfd is -1: the descriptor may be closed and reused
// meanwhile, which the peer check catches).
func pgSocketSegments(pidfd, target int, port uint16) (uint32, bool) {
	fd := target
	if pidfd >= 0 {
		var err error
		if fd, err = unix.PidfdGetfd(pidfd, target, 0); err != nil {
			return 0, false // closed meanwhile, or not allowed
		}
		defer unix.Close(fd)
	}
	peer, err := unix.Getpeername(fd)
	if err != nil {
		return 0, false
	}
	var ip net.IP
	switch sa := peer.(type) {
	case *unix.SockaddrInet4:
		if sa.Port != int(port) {
			return 0, false
		}
		ip = sa.Addr[:]
	case *unix.SockaddrInet6:
		if sa.Port != int(port) {
			return 0, false
		}
		ip = sa.Addr[:]
	default:
		return 0, false
	}
	if !ip.IsLoopback() {
		return 0, false
	}
	info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0, false
	}
	return info.Data_segs_out, true
}

// segmentsSent is the segments sent between two samples by the sockets of
// the second; a connection opened meanwhile counts from its start.
func segmentsSent(a, b map[uint64]uint32) int64 {
	var n int64
	for ino, segs := range b {
		n += int64(segs - a[ino]) // uint32: wraps correctly
	}
	return n
}

// ---------------------------------------------------------------- memory

// procStatus returns a field of /proc/self/status ("" when unavailable).
func procStatus(field string) string {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// peakRSS is the process's peak resident set (VmHWM) in bytes, 0 if unknown.
func peakRSS() int64 {
	kb, _, _ := strings.Cut(procStatus("VmHWM"), " ")
	n, err := strconv.ParseInt(kb, 10, 64)
	if err != nil {
		return 0
	}
	return n << 10
}

// ---------------------------------------------------------------- profiles

// benchProfiles writes the pprof profiles asked for of this process: CPU
// over the load, and blocking and mutex contention (sampled, so cheap
// enough to leave on, but off unless asked).
type benchProfiles struct {
	cpu          *os.File
	block, mutex string
}

func startProfiles(cpuPath, blockPath, mutexPath string) (*benchProfiles, error) {
	p := &benchProfiles{block: blockPath, mutex: mutexPath}
	if cpuPath != "" {
		f, err := os.Create(cpuPath)
		if err != nil {
			return nil, fmt.Errorf("cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("cpuprofile: %w", err)
		}
		p.cpu = f
	}
	if blockPath != "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond)) // one sample per 10 µs blocked
	}
	if mutexPath != "" {
		runtime.SetMutexProfileFraction(10)
	}
	return p, nil
}

func (p *benchProfiles) stop() error {
	var errs []error
	if p.cpu != nil {
		pprof.StopCPUProfile()
		errs = append(errs, p.cpu.Close())
	}
	write := func(name, path string) {
		if path == "" {
			return
		}
		f, err := os.Create(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("bench: %sprofile: %w", name, err))
			return
		}
		errs = append(errs, pprof.Lookup(name).WriteTo(f, 0), f.Close())
	}
	write("block", p.block)
	write("mutex", p.mutex)
	runtime.SetBlockProfileRate(0)
	runtime.SetMutexProfileFraction(0)
	return errors.Join(errs...)
}

// rssSample is a process's resident set at one moment, and the part of it
// that is anonymous memory (heap, stacks, the runtime's own); the rest is
// file pages, the binary's code and data the process has touched.
type rssSample struct{ rss, anon int64 }

// readRSS reads pid's /proc/<pid>/statm: resident pages, and of them
// those backed by a file or shared memory; the rest is anonymous. statm
// reads the kernel's counters, where smaps_rollup walks the process's
// page tables: sampled every rssEvery, that walk took a third of this
// process's CPU at 200 deliveries/s, which the whole box's figure counted.
func readRSS(pid int) (rssSample, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return rssSample{}, false
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return rssSample{}, false
	}
	resident, err1 := strconv.ParseInt(f[1], 10, 64)
	shared, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || shared > resident {
		return rssSample{}, false
	}
	page := int64(os.Getpagesize())
	return rssSample{rss: resident * page, anon: (resident - shared) * page}, true
}

// rssEvery is how often the children's resident sets are sampled.
const rssEvery = 50 * time.Millisecond

// rssSampler samples each child's resident set over the load and keeps the
// highest sample of each. VmHWM is the exact peak, but does not say what
// it is made of; the highest sample does, within rssEvery of it.
type rssSampler struct {
	stop   chan struct{}
	done   chan struct{}
	top    map[int]rssSample // by pid; read after done
	rounds atomic.Int64      // samples of every pid taken so far
}

func startRSSSampler(pids []int) *rssSampler {
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{}), top: make(map[int]rssSample, len(pids))}
	go func() {
		defer close(s.done)
		t := time.NewTicker(rssEvery)
		defer t.Stop()
		for {
			for _, pid := range pids {
				if v, ok := readRSS(pid); ok && v.rss > s.top[pid].rss {
					s.top[pid] = v
				}
			}
			s.rounds.Add(1)
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// highest stops the sampling and returns each child's highest sample.
func (s *rssSampler) highest() map[int]rssSample {
	close(s.stop)
	<-s.done
	return s.top
}
