package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/pgtest"
)

// TestReplicaHungUnderLoad (issue 44): front ends with two replicas — a private standby and
// the shared prompt one — under writes and Session and Eventual reads; the private standby
// hangs (its postmaster and every process of it SIGSTOPped: a host cut off without a
// reset) for CERULEAN_TEST_HANG (default 10 s), then resumes. No read fails, none takes
// longer than 2 s (a read that finds the replica hung waits out --replica-read-timeout and
// runs again elsewhere), the hung replica leaves rotation saying it was slow or
// unreachable, and once resumed it is back in rotation and serves reads again. The
// latencies of the reads while it hung (p50, p99, max) are logged.
func TestReplicaHungUnderLoad(t *testing.T) {
	primary := postgresURL(t)
	prompt, _, promptSrc, _, _ := sharedReplicas(t)
	hang := 10 * time.Second
	if v := os.Getenv("CERULEAN_TEST_HANG"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("CERULEAN_TEST_HANG=%q: %v", v, err)
		}
		hang = d
	}
	u, err := url.Parse(primary)
	if err != nil || strings.Trim(u.Path, "/") == "" {
		t.Fatalf("CERULEAN_TEST_POSTGRES_URL %q: want a URL naming the database (%v)", primary, err)
	}
	standby := pgtest.StartStandby(t, pgtest.StandbyOptions{})
	privateURL := standby.URL(strings.Trim(u.Path, "/"))
	privateSrc := replicaSource(t, privateURL)
	fes := startReplicaFrontEnds(t, 2, privateURL, prompt)
	waitReplicas(t, fes, "in rotation", time.Minute, inRotation, privateSrc, promptSrc)
	const workers = 16
	clients, _ := pairTable(t, fes, workers, privateSrc, promptSrc)

	const (
		before = iota
		hung
		resumed
		phases
	)
	var (
		phase   atomic.Int32
		mu      sync.Mutex
		errs    []string
		served  [phases]map[string]int
		latency [phases][]time.Duration
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for i := range served {
		served[i] = map[string]int{}
	}
	fail := func(format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf("%s: %s", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...)))
		mu.Unlock()
	}
	count := func(p int, src string) int {
		mu.Lock()
		defer mu.Unlock()
		return served[p]["Session "+src] + served[p]["Eventual "+src]
	}
	for w := range workers {
		wg.Go(func() {
			cx, cancel := ctxWithTimeout(10 * time.Minute)
			defer cancel()
			pk, rk := pairPartition(w), strconv.Itoa(w)
			for n := 1; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				wh := &readHeaders{}
				if _, err := clients[rand.IntN(len(clients))].UpsertEntity(withReadHeaders(cx, wh), pairEntity(w, n), nil); err != nil {
					fail("worker %d: upsert: %v", w, err)
					continue
				}
				for _, level := range []string{"Session", "Eventual"} {
					h := &readHeaders{level: level, token: wh.session}
					began := phase.Load()
					start := time.Now()
					resp, err := clients[rand.IntN(len(clients))].GetEntity(withReadHeaders(cx, h), pk, rk, nil)
					took := time.Since(start)
					if err != nil {
						fail("worker %d: %s read after %v: %v", w, level, took, err)
						continue
					}
					var e struct{ N int }
					if err := json.Unmarshal(resp.Value, &e); err != nil {
						fail("worker %d: %s read: %v", w, level, err)
						continue
					}
					if level == "Session" && e.N != n {
						fail("worker %d: Session read from %s returned version %d after version %d was written", w, h.source, e.N, n)
					}
					mu.Lock()
					// A read is counted in the phase it began in; its latency always.
					served[began][level+" "+h.source]++
					latency[began] = append(latency[began], took)
					if took > 2*time.Second {
						errs = append(errs, fmt.Sprintf("worker %d: %s read from %s took %v", w, level, h.source, took))
					}
					mu.Unlock()
				}
			}
		})
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopLoad)
	waitFor := func(what string, limit time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for !cond() {
			if time.Now().After(deadline) {
				stopLoad()
				t.Fatalf("%s: not after %v; reads by phase: %v", what, limit, served)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("the private standby serves reads", time.Minute, func() bool { return count(before, privateSrc) >= 100 })

	phase.Store(hung)
	standby.Freeze()
	frozeAt := time.Now()
	waitReplicas(t, fes, "out of rotation while hung", 30*time.Second, func(s replicaState) bool { return !s.InRotation }, privateSrc)
	t.Logf("private standby %s hung (SIGSTOP); out of rotation on every front end after %v", privateSrc, time.Since(frozeAt).Round(time.Millisecond))
	for i, fe := range fes {
		states, err := replicaStates(fe)
		if err != nil {
			t.Fatal(err)
		}
		if why := states[privateSrc].Error; !strings.Contains(why, "slow") && !strings.Contains(why, "unreachable") {
			t.Errorf("front end %d: the hung replica is out of rotation for %q, want it slow or unreachable", i, why)
		}
	}
	time.Sleep(time.Until(frozeAt.Add(hang)))
	phase.Store(resumed)
	standby.Thaw()
	resumedAt := time.Now()
	waitReplicas(t, fes, "back in rotation", time.Minute, inRotation, privateSrc)
	t.Logf("private standby resumed (SIGCONT) and in rotation again on every front end after %v", time.Since(resumedAt).Round(time.Millisecond))
	waitFor("the private standby serves reads again", time.Minute, func() bool { return count(resumed, privateSrc) >= 50 })
	stopLoad()

	for p, name := range []string{"before", "hung", "resumed"} {
		l := slices.Clone(latency[p])
		slices.Sort(l)
		if len(l) == 0 {
			t.Errorf("no reads %s", name)
			continue
		}
		t.Logf("%s: %d reads, p50 %v, p99 %v, max %v; by source %v", name, len(l),
			l[len(l)/2].Round(time.Microsecond), l[len(l)*99/100].Round(time.Microsecond), l[len(l)-1].Round(time.Microsecond), served[p])
	}
	for i, e := range errs {
		if i == 10 {
			t.Errorf("... %d failed or slow reads in all", len(errs))
			break
		}
		t.Error(e)
	}
	if n := served[hung]["Session "+privateSrc] + served[hung]["Eventual "+privateSrc]; n > 0 {
		t.Logf("%d reads that began while it hung were served by the hung standby (they began before it left rotation and answered once it resumed, or before it stopped)", n)
	}
}
