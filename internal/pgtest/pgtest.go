// Package pgtest gives tests the PostgreSQL servers scripts/test starts — a throwaway
// primary and two shared streaming standbys of it — and starts private servers for tests
// that must crash, stop, hang or restart one (the shared ones are never disturbed): standbys
// of the shared primary, and primaries of their own with standbys of them. Only tests
// import it.
//
// scripts/test exports:
//
//	CERULEAN_TEST_POSTGRES_URL                  the primary
//	CERULEAN_TEST_POSTGRES_REPLICA_URL          a standby that replays at once
//	CERULEAN_TEST_POSTGRES_DELAYED_REPLICA_URL  a standby that replays each commit late
//	CERULEAN_TEST_POSTGRES_REPLICA_DELAY        how late, a Go duration ("2s")
//	CERULEAN_TEST_POSTGRES_BIN                  the PostgreSQL binaries (pg_ctl, pg_basebackup)
//	CERULEAN_TEST_POSTGRES_AS                   the command prefix that runs them as the
//	                                            cluster's owner ("runuser -u postgres --"
//	                                            as root, else empty)
//
// A test that needs a variable that is not set skips, except in CI (CI=true), where
// scripts/test always starts the servers and a missing one is a failure.
package pgtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The environment scripts/test sets.
const (
	envPrimary        = "CERULEAN_TEST_POSTGRES_URL"
	envReplica        = "CERULEAN_TEST_POSTGRES_REPLICA_URL"
	envDelayedReplica = "CERULEAN_TEST_POSTGRES_DELAYED_REPLICA_URL"
	envReplicaDelay   = "CERULEAN_TEST_POSTGRES_REPLICA_DELAY"
	envBin            = "CERULEAN_TEST_POSTGRES_BIN"
	envAs             = "CERULEAN_TEST_POSTGRES_AS"
)

// waitLimit bounds every wait for a server (to start, to stream, to let go of its slot):
// generous, because it only ends a test that would otherwise hang.
const waitLimit = 60 * time.Second

// missing skips the test (fails it in CI) for want of what scripts/test provides.
func missing(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (scripts/test starts PostgreSQL and sets it)", what)
	}
	t.Skipf("%s; scripts/test starts PostgreSQL and sets it", what)
}

func getenv(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		missing(t, name+" is not set")
	}
	return v
}

// PrimaryURL returns the URL of the test database on the primary
// (CERULEAN_TEST_POSTGRES_URL), or skips the test without one (fails it in CI).
func PrimaryURL(t testing.TB) string {
	t.Helper()
	return getenv(t, envPrimary)
}

// DatabaseURL returns url (a PostgreSQL URL) with its database replaced by db.
func DatabaseURL(u, db string) (string, error) {
	parsed, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	parsed.Path, parsed.RawPath = "/"+db, ""
	return parsed.String(), nil
}

// CreateDatabase creates the database name on the primary (CERULEAN_TEST_POSTGRES_URL)
// and returns its URL; when the test ends it is dropped, its connections ended (cleanups
// run last registered first: after those of whatever the test started on it later).
// Without a primary the test skips (fails in CI).
func CreateDatabase(t testing.TB, name string) string {
	t.Helper()
	primary := PrimaryURL(t)
	u, err := DatabaseURL(primary, name)
	if err != nil {
		t.Fatalf("%s: %v", envPrimary, err)
	}
	run := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		c, err := pgx.Connect(ctx, primary)
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		_, err = c.Exec(ctx, sql)
		return err
	}
	ident := pgx.Identifier{name}.Sanitize()
	if err := run("create database " + ident); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := run("drop database if exists " + ident + " with (force)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return u
}

// ReplicaURLs returns the URLs of the test database on the two shared standbys of the
// primary — prompt replays each commit at once, delayed replays it delay after the
// primary committed it (recovery_min_apply_delay) — or skips the test without them
// (fails it in CI). Tests only read from them: a test that stops a standby starts its
// own with StartStandby.
func ReplicaURLs(t testing.TB) (prompt, delayed string, delay time.Duration) {
	t.Helper()
	prompt = getenv(t, envReplica)
	delayed = getenv(t, envDelayedReplica)
	d := getenv(t, envReplicaDelay)
	delay, err := time.ParseDuration(d)
	if err != nil {
		t.Fatalf("%s=%q: %v", envReplicaDelay, d, err)
	}
	return prompt, delayed, delay
}

// StandbyOptions configures StartStandby.
type StandbyOptions struct {
	// ApplyDelay is the standby's recovery_min_apply_delay: it receives the WAL at once
	// but replays each commit only this long after the primary made it. Zero replays at
	// once.
	ApplyDelay time.Duration
	// Primary is the server to make a standby of: a private primary (StartPrimary).
	// Nil: the shared primary (CERULEAN_TEST_POSTGRES_URL).
	Primary *Server
}

// A Server is a private PostgreSQL server on 127.0.0.1 — a standby (StartStandby) or a
// primary (StartPrimary) — removed when its test ends. Its methods must be called from
// the test's goroutine (they end the test with t.Fatal on failure).
type Server struct {
	t       testing.TB
	primary string   // a standby's primary's URL; a primary's own URL
	bin     string   // the PostgreSQL binaries
	as      []string // the prefix that runs them as the cluster's owner
	dir     string   // the server's directory: data/, postgres.log, the socket
	port    int
	standby bool
	frozen  []int // the processes Freeze stopped, until Thaw
}

// A Standby is a private streaming hot standby (StartStandby).
type Standby = Server

// slots numbers the replication slots of this process's standbys.
var slots atomic.Int64

// StartStandby makes a new standby of the primary (CERULEAN_TEST_POSTGRES_URL) with
// pg_basebackup -R, starts it on a free port on 127.0.0.1, and returns once it accepts
// connections, is in recovery and streams from the primary. It has its own replication
// slot, so the primary keeps the WAL it has not received while it is down: after Kill and
// Start it catches up whatever happened meanwhile. When the test ends the standby is
// stopped, its slot dropped and its files removed.
//
// The base backup copies the whole primary cluster, every database in it: about 2 s on the
// test primary. A test should not hold more than a few: each takes one of the primary's
// max_wal_senders and max_replication_slots (10 each by default; the shared standbys take
// two), two senders while it copies.
func StartStandby(t testing.TB, opts StandbyOptions) *Standby {
	t.Helper()
	s := &Standby{t: t, standby: true}
	if opts.Primary != nil {
		s.primary = opts.Primary.URL("postgres")
	} else {
		s.primary = PrimaryURL(t)
	}
	s.bin, s.as = tools(t)

	// The directory belongs to the cluster's owner, who must be able to reach it: a
	// directory of its own under the system's temporary directory (t.TempDir's parent is
	// private to the user running the test).
	dir, err := os.MkdirTemp("", "cerulean-standby-")
	if err != nil {
		t.Fatalf("standby directory: %v", err)
	}
	s.dir = dir
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove standby directory: %v", err)
		}
	})
	uid, gid := s.owner()
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatalf("standby directory: %v", err)
	}

	slot := fmt.Sprintf("pgtest_%d_%d", os.Getpid(), slots.Add(1))
	if opts.Primary == nil {
		// A private primary goes with its test, slots and all.
		t.Cleanup(func() { s.dropSlot(slot) })
	}
	began := time.Now()
	// pg_basebackup takes the dbname of -d as a connection string and ignores the
	// database; -R writes primary_conninfo (and primary_slot_name) and standby.signal.
	if out, err := s.run("pg_basebackup", "-d", s.primary, "-D", s.data(), "-R",
		"-X", "stream", "-c", "fast", "--no-sync", "-C", "-S", slot); err != nil {
		t.Fatalf("pg_basebackup: %v\n%s", err, out)
	}

	conf, err := s.config(opts, uid, gid)
	if err != nil {
		t.Fatalf("standby configuration: %v", err)
	}
	s.firstStart(conf)
	s.wait(true)
	t.Logf("standby of the primary on 127.0.0.1:%d (apply delay %v) streaming after %v",
		s.port, opts.ApplyDelay, time.Since(began).Round(time.Millisecond))
	return s
}

// firstStart starts the server for the first time, on a free port, with the settings conf
// (postgresql.conf lines) added.
func (s *Server) firstStart(conf string) {
	s.t.Helper()
	s.t.Cleanup(s.stop)
	var (
		out []byte
		err error
	)
	for range 5 {
		if s.port, err = freePort(); err != nil {
			s.t.Fatalf("free port: %v", err)
		}
		// postgresql.auto.conf is read last, so these settings win over any copied
		// from the primary (its port among them).
		if err = appendFile(filepath.Join(s.data(), "postgresql.auto.conf"),
			fmt.Sprintf("%sport = %d\n", conf, s.port)); err != nil {
			s.t.Fatalf("server configuration: %v", err)
		}
		if out, err = s.pgctl("-w", "-t", "60", "start"); err == nil {
			return
		}
		// Most likely another process took the port between freePort and the start.
	}
	s.t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, s.log())
}

// PrimaryOptions configures StartPrimary.
type PrimaryOptions struct {
	// Database, if not empty, is created on the primary once it runs.
	Database string
}

// StartPrimary makes a new PostgreSQL cluster of its own (initdb; superuser postgres,
// trusted on 127.0.0.1 and the socket, replication included), starts it on a free port on
// 127.0.0.1 and returns once it accepts connections. Standbys of it come from
// StartStandby with StandbyOptions.Primary. A test may stop it (Stop, Kill), hang it
// (Freeze) and start it again without disturbing any other. fsync is off: it is
// throwaway, and a crash of the test machine is not what it is for. When the test ends it
// is stopped and its files removed.
func StartPrimary(t testing.TB, opts PrimaryOptions) *Server {
	t.Helper()
	s := &Server{t: t}
	s.bin, s.as = tools(t)
	dir, err := os.MkdirTemp("", "cerulean-primary-")
	if err != nil {
		t.Fatalf("primary directory: %v", err)
	}
	s.dir = dir
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove primary directory: %v", err)
		}
	})
	uid, gid := s.owner()
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatalf("primary directory: %v", err)
	}
	began := time.Now()
	if out, err := s.run("initdb", "-D", s.data(), "-U", "postgres", "--auth=trust", "--no-sync",
		"-E", "UTF8", "--locale=C"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	s.firstStart(fmt.Sprintf("listen_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\n"+
		"wal_level = replica\nmax_wal_senders = 10\nmax_replication_slots = 10\nhot_standby = on\n"+
		"fsync = off\nmax_connections = 200\n", s.dir))
	s.primary = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
	s.wait(false)
	if opts.Database != "" {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		c, err := pgx.Connect(ctx, s.primary)
		if err != nil {
			t.Fatalf("connect to the private primary: %v", err)
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, "create database "+pgx.Identifier{opts.Database}.Sanitize()); err != nil {
			t.Fatalf("create database %s: %v", opts.Database, err)
		}
	}
	t.Logf("private primary on 127.0.0.1:%d after %v", s.port, time.Since(began).Round(time.Millisecond))
	return s
}

// URL returns the URL of database db on the server, with the primary URL's user,
// password and parameters.
func (s *Server) URL(db string) string {
	u, err := url.Parse(s.primary)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, url.PathEscape(db))
	}
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	u.Path = "/" + db
	u.RawPath = ""
	return u.String()
}

// Port returns the server's port; it keeps it across Kill, Stop and Start.
func (s *Server) Port() int { return s.port }

// Kill stops the server the way a crash would (pg_ctl stop -m immediate: no shutdown
// checkpoint, open connections cut). It returns once the server is gone.
func (s *Server) Kill() {
	s.t.Helper()
	if out, err := s.pgctl("-w", "-t", "60", "-m", "immediate", "stop"); err != nil {
		s.t.Fatalf("pg_ctl stop: %v\n%s", err, out)
	}
}

// Stop shuts the server down the way an operator would (pg_ctl stop -m fast: sessions
// ended, a shutdown checkpoint, which a primary sends its standbys before it exits). It
// returns once the server is gone.
func (s *Server) Stop() {
	s.t.Helper()
	if out, err := s.pgctl("-w", "-t", "60", "-m", "fast", "stop"); err != nil {
		s.t.Fatalf("pg_ctl stop: %v\n%s", err, out)
	}
}

// Start starts the server again on the same port after Kill or Stop and returns once it
// accepts connections (a standby: and is in recovery; it resumes streaming from the
// primary by itself, within wal_retrieve_retry_interval, 5 s by default, and catches up
// from its slot).
func (s *Server) Start() {
	s.t.Helper()
	if out, err := s.pgctl("-w", "-t", "60", "start"); err != nil {
		s.t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, s.log())
	}
	s.wait(false)
}

// Freeze hangs the server as a host cut off without a connection reset looks: its
// postmaster and every process of it are stopped (SIGSTOP). The kernel still completes
// TCP handshakes on its port and takes what clients send, but nothing answers. Thaw
// resumes it; the test's cleanup does too.
func (s *Server) Freeze() {
	s.t.Helper()
	if s.frozen != nil {
		s.t.Fatal("pgtest: Freeze of a frozen server")
	}
	pm := s.postmaster()
	// The postmaster first, so that it starts no process meanwhile.
	s.frozen = []int{pm}
	if err := syscall.Kill(pm, syscall.SIGSTOP); err != nil {
		s.t.Fatalf("SIGSTOP postmaster %d: %v", pm, err)
	}
	for _, pid := range children(pm) {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err == nil {
			s.frozen = append(s.frozen, pid)
		}
	}
}

// Thaw resumes a server Freeze stopped.
func (s *Server) Thaw() {
	s.t.Helper()
	for i := len(s.frozen) - 1; i >= 0; i-- { // the postmaster last
		_ = syscall.Kill(s.frozen[i], syscall.SIGCONT)
	}
	s.frozen = nil
}

// postmaster is the server's postmaster's process id (postmaster.pid's first line).
func (s *Server) postmaster() int {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join(s.data(), "postmaster.pid"))
	if err != nil {
		s.t.Fatalf("postmaster.pid: %v", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		s.t.Fatalf("postmaster.pid: %v", err)
	}
	return pid
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		fields := strings.Fields(rest)
		if len(fields) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil && ppid == pid {
			if child, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
				out = append(out, child)
			}
		}
	}
	return out
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// stop stops the server if it runs (the test's cleanup), resuming it first if frozen.
func (s *Server) stop() {
	if s.frozen != nil {
		s.Thaw()
	}
	if _, err := s.pgctl("status"); err != nil {
		return // not running (killed, or never started)
	}
	if out, err := s.pgctl("-w", "-t", "60", "-m", "immediate", "stop"); err != nil {
		s.t.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
}

// config returns the settings the standby needs beyond what the base backup copied: its
// own address and socket, the apply delay, and the settings a hot standby must have at
// least as high as the primary's (read from the primary, as its configuration file may
// live outside its data directory). It also writes a trusting pg_hba.conf when the backup
// brought none, for the same reason.
func (s *Server) config(opts StandbyOptions, uid, gid int) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	c, err := pgx.Connect(ctx, s.primary)
	if err != nil {
		return "", fmt.Errorf("connect to the primary: %w", err)
	}
	defer c.Close(context.Background())
	rows, err := c.Query(ctx, `select name, setting from pg_settings where name in
		('max_connections', 'max_worker_processes', 'max_wal_senders',
		 'max_prepared_transactions', 'max_locks_per_transaction') order by name`)
	if err != nil {
		return "", fmt.Errorf("primary settings: %w", err)
	}
	var b strings.Builder
	var name, setting string
	if _, err := pgx.ForEachRow(rows, []any{&name, &setting}, func() error {
		fmt.Fprintf(&b, "%s = %s\n", name, setting)
		return nil
	}); err != nil {
		return "", fmt.Errorf("primary settings: %w", err)
	}
	fmt.Fprintf(&b, "listen_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\n", s.dir)
	fmt.Fprintf(&b, "hot_standby = on\nrecovery_min_apply_delay = '%dms'\n", opts.ApplyDelay.Milliseconds())

	for _, f := range []struct{ name, text string }{
		{"postgresql.conf", ""},
		{"pg_hba.conf", "local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n"},
	} {
		path := filepath.Join(s.data(), f.name)
		if _, err := os.Stat(path); err == nil {
			continue
		}
		if err := os.WriteFile(path, []byte(f.text), 0o600); err != nil {
			return "", err
		}
		if err := os.Chown(path, uid, gid); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

// wait waits until the server accepts connections — a standby: and is in recovery, and
// with streaming, until its WAL receiver streams from the primary.
func (s *Server) wait(streaming bool) {
	s.t.Helper()
	deadline := time.Now().Add(waitLimit)
	var last string
	for {
		inRecovery, status, err := s.state()
		switch {
		case err != nil:
			last = err.Error()
		case !s.standby:
			if inRecovery {
				s.t.Fatalf("primary on 127.0.0.1:%d is in recovery", s.port)
			}
			return
		case !inRecovery:
			s.t.Fatalf("standby on 127.0.0.1:%d is not in recovery", s.port)
		case !streaming || status == "streaming":
			return
		default:
			last = fmt.Sprintf("WAL receiver status %q", status)
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("server on 127.0.0.1:%d not ready after %v: %s\n%s", s.port, waitLimit, last, s.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// state reports whether the standby is in recovery and its WAL receiver's status ("" when
// it has none).
func (s *Server) state() (inRecovery bool, status string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return false, "", err
	}
	defer c.Close(context.Background())
	err = c.QueryRow(ctx, `select pg_is_in_recovery(),
		coalesce((select status from pg_stat_wal_receiver), '')`).Scan(&inRecovery, &status)
	return inRecovery, status, err
}

// dropSlot drops the standby's replication slot on the primary (once the standby is
// stopped; the primary may take a moment to notice its WAL sender lost the standby), so
// the primary stops keeping WAL for it.
func (s *Server) dropSlot(slot string) {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	c, err := pgx.Connect(ctx, s.primary)
	if err != nil {
		s.t.Errorf("drop replication slot %s: %v", slot, err)
		return
	}
	defer c.Close(context.Background())
	for {
		var pid *int32
		err := c.QueryRow(ctx, `select active_pid from pg_replication_slots where slot_name = $1`, slot).Scan(&pid)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return // never made (pg_basebackup failed), or dropped
		case err != nil:
		case pid != nil:
			_, err = c.Exec(ctx, `select pg_terminate_backend($1)`, *pid)
		default:
			_, err = c.Exec(ctx, `select pg_drop_replication_slot($1)`, slot)
		}
		if ctx.Err() != nil {
			s.t.Errorf("drop replication slot %s: %v", slot, err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// owner returns the user and group the standby's files belong to: those its server runs
// as.
func (s *Server) owner() (uid, gid int) {
	s.t.Helper()
	if len(s.as) == 0 {
		return os.Getuid(), os.Getgid()
	}
	ids := make([]int, 2)
	for i, flag := range []string{"-u", "-g"} {
		cmd := exec.Command(s.as[0], append(slices.Clone(s.as[1:]), "id", flag)...)
		out, err := cmd.Output()
		if err == nil {
			ids[i], err = strconv.Atoi(strings.TrimSpace(string(out)))
		}
		if err != nil {
			s.t.Fatalf("%s id %s: %v", strings.Join(s.as, " "), flag, err)
		}
	}
	return ids[0], ids[1]
}

// run runs one of the PostgreSQL programs as the cluster's owner, in the standby's
// directory (the owner may not be allowed into the test's).
func (s *Server) run(program string, args ...string) ([]byte, error) {
	argv := append(slices.Clone(s.as), filepath.Join(s.bin, program))
	argv = append(argv, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = s.dir
	return cmd.CombinedOutput()
}

// pgctl runs pg_ctl on the standby. Its server writes to postgres.log (with -l, pg_ctl's
// own output closes when it returns, so CombinedOutput does not wait for the server).
func (s *Server) pgctl(args ...string) ([]byte, error) {
	return s.run("pg_ctl", append([]string{"-D", s.data(), "-l", filepath.Join(s.dir, "postgres.log")}, args...)...)
}

// log returns the end of the standby's server log, for failure messages.
func (s *Server) log() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
	if err != nil {
		return "(no server log: " + err.Error() + ")"
	}
	const tail = 4000
	if len(b) > tail {
		b = b[len(b)-tail:]
	}
	return "server log:\n" + string(b)
}

// tools returns the directory of the PostgreSQL programs and the prefix that runs them as
// the cluster's owner: CERULEAN_TEST_POSTGRES_BIN and CERULEAN_TEST_POSTGRES_AS, else
// Debian's newest /usr/lib/postgresql/*/bin, run through runuser as the postgres user
// when the test runs as root (PostgreSQL refuses to run as root).
func tools(t testing.TB) (bin string, as []string) {
	t.Helper()
	bin = os.Getenv(envBin)
	if bin == "" {
		dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		version := func(dir string) float64 {
			v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
			return v
		}
		slices.SortFunc(dirs, func(a, b string) int { return cmp.Compare(version(a), version(b)) })
		if len(dirs) == 0 {
			missing(t, envBin+" is not set and there is no /usr/lib/postgresql/*/bin")
		}
		bin = dirs[len(dirs)-1]
	}
	if prefix, ok := os.LookupEnv(envAs); ok {
		as = strings.Fields(prefix)
	} else if os.Getuid() == 0 {
		as = []string{"runuser", "-u", "postgres", "--"}
	}
	return bin, as
}

// freePort returns a port on 127.0.0.1 that nothing listens on now (a server may still
// lose it to another process before it binds it; StartStandby then tries another).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
