package pgtest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// replayLimit bounds the waits for a standby to show a commit: far above what replay
// takes, so only a standby that does not replay fails.
const replayLimit = 10 * time.Second

// TestPgtestStandby: a private standby replays the primary's writes, refuses its own,
// is unreachable after Kill, and after Start has what was written while it was down and
// replays new writes again.
func TestPgtestStandby(t *testing.T) {
	primary := pgtest.PrimaryURL(t)
	db := createDatabase(t, primary)
	s := pgtest.StartStandby(t, pgtest.StandbyOptions{})
	p := connect(t, withDatabase(primary, db))
	exec(t, p, `create table kv (k int primary key)`)
	exec(t, p, `insert into kv values (1)`)
	waitKeys(t, s.URL(db), replayLimit, 1)

	c := connect(t, s.URL(db))
	_, err := c.Exec(context.Background(), `insert into kv values (9)`)
	if pe := (*pgconn.PgError)(nil); !errors.As(err, &pe) || pe.Code != "25006" { // read_only_sql_transaction
		t.Fatalf("insert on the standby: %v, want SQLSTATE 25006", err)
	}
	c.Close(context.Background())

	port := s.Port()
	s.Kill()
	if c, err := dial(s.URL(db)); err == nil {
		c.Close(context.Background())
		t.Fatal("connected to the standby after Kill")
	}
	exec(t, p, `insert into kv values (2)`) // while it is down: it catches up from its slot

	s.Start()
	if s.Port() != port {
		t.Fatalf("port %d after Start, was %d", s.Port(), port)
	}
	waitKeys(t, s.URL(db), replayLimit, 1, 2)
	exec(t, p, `insert into kv values (3)`)
	waitKeys(t, s.URL(db), replayLimit, 1, 2, 3)
}

// TestPgtestPrivateCluster: a private primary takes writes and its private standby
// replays them; a frozen standby answers nothing (a connection hangs) and, thawed,
// answers again; a stopped primary refuses connections, and started again takes writes
// that its standby replays.
func TestPgtestPrivateCluster(t *testing.T) {
	p := pgtest.StartPrimary(t, pgtest.PrimaryOptions{Database: "app"})
	s := pgtest.StartStandby(t, pgtest.StandbyOptions{Primary: p})
	pc := connect(t, p.URL("app"))
	exec(t, pc, `create table kv (k int primary key)`)
	exec(t, pc, `insert into kv values (1)`)
	waitKeys(t, s.URL("app"), replayLimit, 1)

	s.Freeze()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	c, err := pgx.Connect(ctx, s.URL("app"))
	cancel()
	if err == nil {
		c.Close(context.Background())
		s.Thaw()
		t.Fatal("connected to the standby while it was frozen")
	}
	s.Thaw()
	waitKeys(t, s.URL("app"), replayLimit, 1)

	pc.Close(context.Background())
	p.Stop()
	if c, err := dial(p.URL("app")); err == nil {
		c.Close(context.Background())
		t.Fatal("connected to the primary after Stop")
	}
	p.Start()
	exec(t, connect(t, p.URL("app")), `insert into kv values (2)`)
	waitKeys(t, s.URL("app"), replayLimit, 1, 2)
}

// TestPgtestDelayedStandby: a standby with an apply delay does not show a commit right
// after the primary made it, and does once the delay has passed.
func TestPgtestDelayedStandby(t *testing.T) {
	primary := pgtest.PrimaryURL(t)
	db := createDatabase(t, primary)
	s := pgtest.StartStandby(t, pgtest.StandbyOptions{ApplyDelay: time.Second})
	p := connect(t, withDatabase(primary, db))
	checkDelayed(t, p, s.URL(db), time.Second)
}

// TestPgtestReplicas: the two standbys scripts/test starts are hot standbys streaming
// from the primary, the prompt one replays, and the delayed one replays late by the
// advertised delay.
func TestPgtestReplicas(t *testing.T) {
	primary := pgtest.PrimaryURL(t)
	prompt, delayed, delay := pgtest.ReplicaURLs(t)
	for _, r := range []struct {
		url   string
		delay time.Duration
	}{{prompt, 0}, {delayed, delay}} {
		c := connect(t, r.url)
		var inRecovery bool
		var status, applyDelay string
		if err := c.QueryRow(context.Background(), `select pg_is_in_recovery(),
			coalesce((select status from pg_stat_wal_receiver), ''),
			current_setting('recovery_min_apply_delay')`).Scan(&inRecovery, &status, &applyDelay); err != nil {
			t.Fatalf("%s: %v", r.url, err)
		}
		if !inRecovery || status != "streaming" {
			t.Errorf("%s: in recovery %v, WAL receiver %q; want a streaming standby", r.url, inRecovery, status)
		}
		if d, err := time.ParseDuration(applyDelay); err != nil || d != r.delay {
			t.Errorf("%s: recovery_min_apply_delay %q, want %v", r.url, applyDelay, r.delay)
		}
		c.Close(context.Background())
	}

	// A database of the test's own (CREATE DATABASE replicates), so the shared database's
	// users see nothing of it.
	db := createDatabase(t, primary)
	p := connect(t, withDatabase(primary, db))
	exec(t, p, `create table kv (k int primary key)`)
	exec(t, p, `insert into kv values (1)`)
	waitKeys(t, withDatabase(prompt, db), replayLimit, 1)
	checkDelayed(t, p, withDatabase(delayed, db), delay)
}

// checkDelayed checks that the standby at url, which replays delay late, does not show a
// row the primary (p) just committed, and shows it within delay+replayLimit. A row before
// it is awaited first (and the table created if need be), so the standby is known to
// replay. Reading once right after the commit, on a connection opened before it, leaves a
// margin of the whole delay: robust however loaded the machine.
func checkDelayed(t *testing.T, p *pgx.Conn, url string, delay time.Duration) {
	t.Helper()
	exec(t, p, `create table if not exists kv (k int primary key)`)
	exec(t, p, `insert into kv values (100)`)
	waitKeys(t, url, delay+replayLimit, keys(t, p)...)
	want := keys(t, p)

	c := connect(t, url)
	exec(t, p, `insert into kv values (101)`)
	got := keys(t, c)
	if !slices.Equal(got, want) {
		t.Fatalf("right after the commit, the standby %v behind has keys %v, want %v (not yet the new one)", delay, got, want)
	}
	waitKeys(t, url, delay+replayLimit, append(want, 101)...)
}

// createDatabase creates a database with a unique name on the primary and drops it when
// the test ends (after the test's connections and standbys are gone: cleanups run last
// registered first).
func createDatabase(t *testing.T, primary string) string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	db := "pgtest_" + hex.EncodeToString(b)
	c := connect(t, primary)
	exec(t, c, `create database `+db)
	t.Cleanup(func() {
		c, err := dial(primary)
		if err == nil {
			_, err = c.Exec(context.Background(), `drop database if exists `+db+` with (force)`)
			c.Close(context.Background())
		}
		if err != nil {
			t.Errorf("drop database %s: %v", db, err)
		}
	})
	return db
}

// withDatabase returns url with its database replaced by db.
func withDatabase(u, db string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		panic(err)
	}
	parsed.Path = "/" + db
	return parsed.String()
}

func dial(url string) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return pgx.Connect(ctx, url)
}

// connect opens a connection closed when the test ends.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	c, err := dial(url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func exec(t *testing.T, c *pgx.Conn, sql string) {
	t.Helper()
	if _, err := c.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func keys(t *testing.T, c *pgx.Conn) []int {
	t.Helper()
	ks, err := readKeys(c)
	if err != nil {
		t.Fatalf("read keys: %v", err)
	}
	return ks
}

func readKeys(c *pgx.Conn) ([]int, error) {
	rows, err := c.Query(context.Background(), `select k from kv order by k`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

// waitKeys waits until the table kv at url holds exactly want (the database and table
// may not have been replayed yet: errors are retried too).
func waitKeys(t *testing.T, url string, limit time.Duration, want ...int) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got, err := func() ([]int, error) {
			c, err := dial(url)
			if err != nil {
				return nil, err
			}
			defer c.Close(context.Background())
			return readKeys(c)
		}()
		if err == nil && slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %s has keys %v (error %v), want %v", limit, url, got, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCluster: StartCluster's cluster has a leader and a synchronous standby; after
// kill -9 of the leader's postmaster another node leads, and the old one rejoins as a
// streaming replica.
func TestCluster(t *testing.T) {
	if os.Getenv("CERULEAN_TEST_HA") == "" {
		// The same cluster, killed the same way, runs in e2e's TestHAFailoverKill in CI.
		t.Skip("opt-in: CERULEAN_TEST_HA=1")
	}
	c := pgtest.StartCluster(t, pgtest.ClusterOptions{Database: "cer"})
	old := c.Leader()
	if old == nil {
		t.Fatalf("no leader: %s", c.Describe())
	}
	old.KillPostmaster()
	killed := time.Now()
	l := c.WaitLeader(old, time.Minute)
	t.Logf("%s leads %v after kill -9 of %s's postmaster", l.Name, time.Since(killed).Round(time.Millisecond), old.Name)
	c.WaitHealthy(2 * time.Minute)
	t.Logf("healthy again %v after the kill: %s", time.Since(killed).Round(time.Millisecond), c.Describe())
}
