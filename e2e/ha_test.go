package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// High availability (issue 44 item 5): a Patroni-managed cluster of three PostgreSQL
// servers with synchronous replication (internal/pgtest.StartCluster), two front ends
// that name all three nodes in one multi-host URL with target_session_attrs=read-write,
// and every node as a read replica. The primary's postgres is made to fail under load;
// Patroni promotes the synchronous standby, and the front ends must find it by themselves.
//
// TestHAFailoverKill (kill -9 of the postmaster) runs wherever PostgreSQL tests do
// (scripts/test installs patroni and etcd-server); TestHAFailoverFreeze (SIGSTOP of the
// primary's every process, until Patroni's leader key expires) is opt-in:
// CERULEAN_TEST_HA=1.

// haFrontEnd is a front end on the cluster: its server, diagnostics address and client.
type haFrontEnd = replicaFrontEnd

// startHAFrontEnds starts n front ends on the cluster's database db, each with every node
// as a read replica.
func startHAFrontEnds(t *testing.T, c *pgtest.Cluster, db string, n int) []*haFrontEnd {
	t.Helper()
	var replicas []string
	for _, node := range c.Nodes {
		replicas = append(replicas, node.URL(db))
	}
	return startFrontEndsOn(t, n, c.URL(db), replicas...)
}

// haRun is what one failover run saw.
type haRun struct {
	mu         sync.Mutex
	acked      []string // RowKeys of acknowledged inserts
	unknown    int      // inserts that failed: committed or not, the client cannot tell
	errs       []string // answers no client may get (500s, 503s without Retry-After, ...)
	stale      []string // Session reads that missed their own acknowledged write
	statuses   map[string]int
	eventualOK atomic.Int64
	eventualNo atomic.Int64
	strongOK   atomic.Int64
	strongNo   atomic.Int64
	sessionOK  atomic.Int64
	lastFail   map[string]time.Time // per worker, the last failed write
	firstOK    map[string]time.Time // per worker, the first acknowledged write after the failure
}

func (r *haRun) note(kind string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var re *azcore.ResponseError
	switch {
	case errors.As(err, &re):
		r.statuses[fmt.Sprintf("%s %d %s", kind, re.StatusCode, re.ErrorCode)]++
		if re.StatusCode != http.StatusServiceUnavailable || re.ErrorCode != "ServerBusy" ||
			re.RawResponse == nil || re.RawResponse.Header.Get("Retry-After") == "" {
			if len(r.errs) < 20 {
				r.errs = append(r.errs, fmt.Sprintf("%s: %v", kind, err))
			}
		}
	default:
		r.statuses[kind+" transport error"]++
		if len(r.errs) < 20 {
			r.errs = append(r.errs, fmt.Sprintf("%s: %v", kind, err))
		}
	}
}

// haFailover runs the load on two front ends — 4 writers inserting, each reading its write
// back at Session level with its token through the other front end, 2 Eventual and 2
// Strong readers — makes the primary fail with fail, and checks what clients saw: every
// acknowledged write is there afterwards, writes resume within 30 s, no Session read
// misses its own write, every error is 503 ServerBusy with Retry-After, Eventual reads
// never fail.
//
// fail may return a function that ends the failure (a frozen primary resumed), called once
// another node leads.
func haFailover(t *testing.T, fail func(leader *pgtest.Node) (end func()), after time.Duration) {
	began := time.Now()
	c := pgtest.StartCluster(t, pgtest.ClusterOptions{Database: "cer"})
	fes := startHAFrontEnds(t, c, "cer", 2)
	leader := c.Leader()
	if leader == nil {
		t.Fatalf("no leader: %s", c.Describe())
	}
	var standbys []string
	for _, n := range c.Nodes {
		if n != leader {
			standbys = append(standbys, replicaSource(t, n.URL("cer")))
		}
	}
	waitReplicas(t, fes, "in rotation", time.Minute, inRotation, standbys...)
	client0, name := newTable(t, fes[0].svc)
	clients := []*aztables.Client{client0, fes[1].svc.NewClient(name)}
	if _, err := client0.AddEntity(ctx(t), []byte(`{"PartitionKey":"e","RowKey":"e","N":1}`), nil); err != nil {
		t.Fatal(err)
	}
	// Every replica has the table and the entity before the Eventual readers start.
	waitReplicas(t, fes, "caught up", time.Minute, func(s replicaState) bool {
		return inRotation(s) && s.ReplayPosition != ""
	}, standbys...)
	time.Sleep(500 * time.Millisecond)

	run := &haRun{statuses: map[string]int{}, lastFail: map[string]time.Time{}, firstOK: map[string]time.Time{}}
	var failedAt atomic.Int64 // UnixNano of the failure, 0 before
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const writers = 4
	for w := range writers {
		wg.Go(func() {
			id := fmt.Sprintf("w%d", w)
			wc, rc := clients[w%2], clients[(w+1)%2] // read back through the other front end
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				rk := fmt.Sprintf("%06d", i)
				h := &readHeaders{}
				cx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
				start := time.Now()
				_, err := wc.AddEntity(withReadHeaders(cx, h), []byte(fmt.Sprintf(`{"PartitionKey":%q,"RowKey":%q,"N":%d}`, id, rk, i)), nil)
				cancel()
				if err != nil {
					run.note("insert", err)
					run.mu.Lock()
					run.unknown++
					run.lastFail[id] = time.Now()
					run.mu.Unlock()
					time.Sleep(50 * time.Millisecond)
					continue
				}
				run.mu.Lock()
				run.acked = append(run.acked, id+"/"+rk)
				if f := failedAt.Load(); f != 0 && start.UnixNano() > f && run.firstOK[id].IsZero() {
					run.firstOK[id] = time.Now()
				}
				run.mu.Unlock()
				// The write, read at Session level with its token through the other
				// front end: it must be there.
				rh := &readHeaders{level: "Session", token: h.session}
				cx, cancel = context.WithTimeout(context.Background(), 40*time.Second)
				_, err = rc.GetEntity(withReadHeaders(cx, rh), id, rk, nil)
				cancel()
				var re *azcore.ResponseError
				switch {
				case err == nil:
					run.sessionOK.Add(1)
				case errors.As(err, &re) && re.StatusCode == http.StatusNotFound:
					run.mu.Lock()
					run.stale = append(run.stale, fmt.Sprintf("%s/%s with token %s: 404 from %s at %s", id, rk, h.session, rh.source, rh.position))
					run.mu.Unlock()
				default:
					run.note("session read", err)
				}
			}
		})
	}
	for r := range 4 {
		wg.Go(func() {
			rc := clients[r%2]
			level, ok, no := "Eventual", &run.eventualOK, &run.eventualNo
			if r >= 2 {
				level, ok, no = "Strong", &run.strongOK, &run.strongNo
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				rh := &readHeaders{level: level}
				cx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
				_, err := rc.GetEntity(withReadHeaders(cx, rh), "e", "e", nil)
				cancel()
				if err != nil {
					no.Add(1)
					run.note(level+" read", err)
					time.Sleep(20 * time.Millisecond)
				} else {
					ok.Add(1)
				}
			}
		})
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	time.Sleep(2 * time.Second) // load before
	end := fail(leader)
	failedAt.Store(time.Now().UnixNano())
	failed := time.Now()
	next := c.WaitLeader(leader, time.Minute)
	promoted := time.Since(failed)
	t.Logf("%s promoted %v after the failure of %s", next.Name, promoted.Round(time.Millisecond), leader.Name)
	if end != nil {
		end()
	}
	// Writes resumed on every writer.
	deadline := time.Now().Add(time.Minute)
	for {
		run.mu.Lock()
		n := len(run.firstOK)
		run.mu.Unlock()
		if n == writers || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(after) // load after
	c.WaitHealthy(2 * time.Minute)
	rejoined := time.Since(failed)
	// Every node but the new leader is a replica in rotation again, the old primary
	// included; the new leader is out, with the reason shown.
	var nowStandbys []string
	for _, n := range c.Nodes {
		if n != next {
			nowStandbys = append(nowStandbys, replicaSource(t, n.URL("cer")))
		}
	}
	waitReplicas(t, fes, "in rotation after the failover", time.Minute, inRotation, nowStandbys...)
	waitReplicas(t, fes, "out of rotation (the new primary)", time.Minute, func(s replicaState) bool {
		return !s.InRotation && strings.Contains(s.Error, "not in recovery")
	}, replicaSource(t, next.URL("cer")))
	close(stop)
	wg.Wait()

	// Every acknowledged write, read back (Strong) through each front end.
	lost := 0
	for _, key := range run.acked {
		pk, rk, _ := strings.Cut(key, "/")
		for i, cl := range clients {
			_, err := cl.GetEntity(withReadHeaders(ctx(t), &readHeaders{level: "Strong"}), pk, rk, nil)
			if err != nil {
				lost++
				if lost <= 10 {
					t.Errorf("acknowledged write %s through front end %d: %v", key, i, err)
				}
			}
		}
	}
	var resume time.Duration
	for _, at := range run.firstOK {
		resume = max(resume, at.Sub(failed))
	}
	keys := make([]string, 0, len(run.statuses))
	for k := range run.statuses {
		keys = append(keys, fmt.Sprintf("%s: %d", k, run.statuses[k]))
	}
	sort.Strings(keys)
	t.Logf("acknowledged writes %d, lost %d; failed writes (outcome unknown to the client) %d; writes resumed on every writer %v after the failure (promotion after %v; old primary back as a streaming standby after %v); Session reads of their own write %d served, %d stale; Eventual reads %d served, %d failed; Strong reads %d served, %d failed (503); errors by kind: %s; test took %v",
		len(run.acked), lost, run.unknown, resume.Round(time.Millisecond), promoted.Round(time.Millisecond), rejoined.Round(time.Millisecond),
		run.sessionOK.Load(), len(run.stale), run.eventualOK.Load(), run.eventualNo.Load(), run.strongOK.Load(), run.strongNo.Load(), strings.Join(keys, ", "), time.Since(began).Round(time.Second))
	if len(run.firstOK) < writers {
		t.Errorf("writes resumed on %d of %d writers within a minute", len(run.firstOK), writers)
	} else if resume > 30*time.Second {
		t.Errorf("writes resumed %v after the failure, want within 30 s", resume)
	}
	for i, s := range run.stale {
		if i == 10 {
			break
		}
		t.Errorf("stale Session read: %s", s)
	}
	if n := run.eventualNo.Load(); n > 0 {
		t.Errorf("%d Eventual reads failed; the standbys should have served them throughout", n)
	}
	for _, e := range run.errs {
		t.Errorf("want 503 ServerBusy with Retry-After: %s", e)
	}
	if len(run.acked) == 0 {
		t.Error("no write was acknowledged")
	}
}

// TestHAFailoverKill: kill -9 of the primary's postmaster under write, Session-read and
// Eventual-read load through two front ends. Patroni (primary_start_timeout 0) fails over
// to the synchronous standby at once.
func TestHAFailoverKill(t *testing.T) {
	postgresURL(t) // skips without PostgreSQL (fails in CI)
	haFailover(t, func(leader *pgtest.Node) func() { leader.KillPostmaster(); return nil }, 3*time.Second)
}

// TestHAFailoverFreeze: the primary's every process stopped (SIGSTOP), as a hung host
// looks; its Patroni's leader key expires after the ttl and Patroni promotes the
// synchronous standby; the old primary, resumed, finds it lost the lock and rejoins as a
// standby. Opt-in (CERULEAN_TEST_HA=1): it takes longer.
func TestHAFailoverFreeze(t *testing.T) {
	postgresURL(t)
	if os.Getenv("CERULEAN_TEST_HA") == "" {
		t.Skip("opt-in: CERULEAN_TEST_HA=1")
	}
	haFailover(t, func(leader *pgtest.Node) func() {
		leader.Freeze()
		return leader.Thaw
	}, 3*time.Second)
}

// TestHAFailoverPositions: session tokens keep their meaning across a failover. A
// position is the primary's WAL insert position, which can run ahead of what reached the
// synchronous standby (WAL of transactions not committed yet, or not yet sent): here the
// primary's WAL senders are stopped, an uncommitted transaction writes ~400 kB of WAL,
// and a Strong read through front end 0 hands out a token at that position. The primary
// then dies, with those 400 kB, and Patroni promotes the standby, whose position is below
// the token. Yet through front end 1, which never saw the token, a Session read with it is
// served (not 503 ServerBusy until enough writes come along) and finds the entity, and the
// writes after the failover, through either front end, get positions above the token:
// positions never go back.
func TestHAFailoverPositions(t *testing.T) {
	postgresURL(t) // skips without PostgreSQL (fails in CI)
	c := pgtest.StartCluster(t, pgtest.ClusterOptions{Database: "cer"})
	fes := startHAFrontEnds(t, c, "cer", 2)
	leader := c.Leader()
	if leader == nil {
		t.Fatalf("no leader: %s", c.Describe())
	}
	client0, name := newTable(t, fes[0].svc)
	client1 := fes[1].svc.NewClient(name)
	if _, err := client0.AddEntity(ctx(t), []byte(`{"PartitionKey":"p","RowKey":"r","N":1}`), nil); err != nil {
		t.Fatal(err)
	}
	// A table with a change feed, written before the failover: its numbering must jump
	// past what the old timeline could have handed out (docs/change-feed-design.md §5).
	lean := bulkClient(t, fes[0].srv)
	feed := tableName(t) + "feed"
	if err := lean.CreateTable(ctx(t), feed, &client.TableSettings{ChangeFeedRetention: 3600}); err != nil {
		t.Fatal(err)
	}
	feedClient := fes[0].svc.NewClient(feed)
	if _, err := feedClient.AddEntity(ctx(t), []byte(`{"PartitionKey":"p","RowKey":"before"}`), nil); err != nil {
		t.Fatal(err)
	}
	c.WaitHealthy(time.Minute) // the standbys have it

	leader.PauseWALSenders()
	conn, err := pgx.Connect(ctx(t), leader.URL("cer"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx(t), "begin; create table ha_junk (x text); insert into ha_junk select repeat('x', 1000) from generate_series(1, 400)"); err != nil {
		t.Fatal(err)
	}
	h := &readHeaders{level: "Strong"}
	if _, err := client0.GetEntity(withReadHeaders(ctx(t), h), "p", "r", nil); err != nil {
		t.Fatal(err)
	}
	token, err := tokenPosition(h.session)
	if err != nil {
		t.Fatal(err)
	}
	leader.KillPostmaster()
	killed := time.Now()
	next := c.WaitLeader(leader, time.Minute)
	var at string
	if err := pgxQueryRow(t, next.URL("cer"), "select pg_current_wal_insert_lsn()::text", &at); err != nil {
		t.Fatal(err)
	}
	t.Logf("token %s (%d) from the old primary %s; %s promoted after %v at %s", h.session, token, leader.Name, next.Name,
		time.Since(killed).Round(time.Millisecond), at)

	// The token, through the front end that never saw it.
	deadline := time.Now().Add(30 * time.Second)
	var served time.Duration
	for {
		rh := &readHeaders{level: "Session", token: h.session}
		_, err := client1.GetEntity(withReadHeaders(ctx(t), rh), "p", "r", nil)
		if err == nil {
			served = time.Since(killed)
			t.Logf("Session read with the old token served by %q at %s, %v after the kill", rh.source, rh.position, served.Round(time.Millisecond))
			break
		}
		var re *azcore.ResponseError
		if !errors.As(err, &re) || re.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("Session read with the old token: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Session read with a token the old primary handed out: still %v 30 s after the failover", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i, fe := range fes {
		t.Logf("front end %d:\n%s", i, logLines(fe.srv, 10, "advanced", "new primary timeline"))
	}
	// Writes after the failover: positions above the token.
	for i, cl := range []*aztables.Client{client0, client1} {
		var wh *readHeaders
		deadline := time.Now().Add(30 * time.Second)
		for {
			wh = &readHeaders{}
			_, err := cl.UpsertEntity(withReadHeaders(ctx(t), wh), []byte(fmt.Sprintf(`{"PartitionKey":"p","RowKey":"w%d"}`, i)), nil)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("write through front end %d after the failover: %v", i, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		pos, err := tokenPosition(wh.session)
		if err != nil {
			t.Fatal(err)
		}
		if pos <= token {
			t.Errorf("a write through front end %d after the failover has position %d, below the old primary's token %d: positions went back", i, pos, token)
		}
	}
	if _, err := feedClient.AddEntity(ctx(t), []byte(`{"PartitionKey":"p","RowKey":"after"}`), nil); err != nil {
		t.Fatal(err)
	}
	recs, _ := readAllChanges(t, lean, feed, client.FromBeginning, 10)
	if len(recs) != 2 || recs[0].RowKey != "before" || recs[1].RowKey != "after" || recs[1].Seq < recs[0].Seq+1<<23 {
		t.Errorf("the change feed across the failover: %+v; want before, then after numbered at least 2^23 higher", recs)
	} else {
		t.Logf("change feed: Seq %d before the failover, %d after", recs[0].Seq, recs[1].Seq)
	}
}

// pgxQueryRow runs one query on the database at url and scans its row into dest.
func pgxQueryRow(t *testing.T, url, sql string, dest ...any) error {
	t.Helper()
	conn, err := pgx.Connect(ctx(t), url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx(t), sql).Scan(dest...)
}
