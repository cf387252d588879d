package e2e

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// durableEntity is the entity inserted for a RowKey; its content is a pure function of the
// key, so any entity found later can be checked for integrity.
func durableEntity(rk string) map[string]any {
	sum := sha256.Sum256([]byte(rk))
	return map[string]any{
		"PartitionKey": "p" + rk[:2],
		"RowKey":       rk,
		"S":            strings.Repeat(rk+";", 8),
		"B":            aztables.EDMBinary(sum[:]),
		"L":            aztables.EDMInt64(int64(sum[0])<<40 | int64(sum[1])),
		"N":            int32(sum[2]),
		"D":            1.5,
	}
}

// checkDurableEntity compares a read entity with durableEntity(e.RowKey).
func checkDurableEntity(e aztables.EDMEntity) string {
	want := durableEntity(e.RowKey)
	if e.PartitionKey != want["PartitionKey"] {
		return fmt.Sprintf("PartitionKey %q", e.PartitionKey)
	}
	p := e.Properties
	if p["S"] != want["S"] || p["L"] != want["L"] || p["N"] != want["N"] || p["D"] != want["D"] {
		return fmt.Sprintf("properties %v", p)
	}
	if b, ok := p["B"].(aztables.EDMBinary); !ok || !bytes.Equal(b, want["B"].(aztables.EDMBinary)) {
		return fmt.Sprintf("binary %#v", p["B"])
	}
	if len(p) != 5 {
		return fmt.Sprintf("%d properties: %v", len(p), p)
	}
	return ""
}

// inserter runs concurrent inserts of fresh keys and records what was acknowledged.
type inserter struct {
	mu        sync.Mutex
	acked     map[string]bool // insert got a success response
	attempted map[string]bool // insert was sent (outcome possibly unknown)
	next      atomic.Int64
	prefix    string
}

func newInserter(prefix string) *inserter {
	return &inserter{acked: map[string]bool{}, attempted: map[string]bool{}, prefix: prefix}
}

// run starts workers inserting into c until stop is closed or a worker sees a transport
// error (the server went away). It returns when all workers have finished.
func (in *inserter) run(t *testing.T, c *aztables.Client, workers int, stop <-chan struct{}) (ok, failed int64) {
	var wg sync.WaitGroup
	var nOK, nFail atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := in.next.Add(1)
				// two hex chars of a hash first: spreads keys over 256 partitions
				h := sha256.Sum256([]byte(fmt.Sprint(i)))
				rk := fmt.Sprintf("%02x%s%08d", h[0], in.prefix, i)
				in.mu.Lock()
				in.attempted[rk] = true
				in.mu.Unlock()
				body := marshal(t, aztables.EDMEntity{
					Entity:     aztables.Entity{PartitionKey: "p" + rk[:2], RowKey: rk},
					Properties: withoutKeys(durableEntity(rk)),
				})
				cx, cancel := ctxWithTimeout(10 * time.Second)
				_, err := c.AddEntity(cx, body, nil)
				cancel()
				if err == nil {
					in.mu.Lock()
					in.acked[rk] = true
					in.mu.Unlock()
					nOK.Add(1)
					continue
				}
				nFail.Add(1)
				if code := statusOf(err); code != 0 && code != http.StatusServiceUnavailable {
					// The server answered with an error: with fresh keys that is a bug
					// (503 is an acceptable answer while shutting down).
					t.Errorf("insert %s: server error %v", rk, err)
				}
				return // the server is going away
			}
		}()
	}
	wg.Wait()
	return nOK.Load(), nFail.Load()
}

func withoutKeys(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		if k != "PartitionKey" && k != "RowKey" {
			out[k] = v
		}
	}
	return out
}

// verify scans the table and checks every acknowledged insert is present and intact and
// that nothing exists that was never attempted.
func (in *inserter) verify(t *testing.T, c *aztables.Client, what string) int {
	t.Helper()
	found := map[string]bool{}
	for _, b := range listAll(t, c, nil) {
		e := decodeEDM(t, b)
		if found[e.RowKey] {
			t.Errorf("%s: RowKey %s returned twice", what, e.RowKey)
		}
		found[e.RowKey] = true
		in.mu.Lock()
		att := in.attempted[e.RowKey]
		in.mu.Unlock()
		if !att {
			t.Errorf("%s: entity %s was never inserted", what, e.RowKey)
			continue
		}
		if msg := checkDurableEntity(e); msg != "" {
			t.Errorf("%s: entity %s corrupted: %s", what, e.RowKey, msg)
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	var missing []string
	for rk := range in.acked {
		if !found[rk] {
			missing = append(missing, rk)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		shown := missing
		if len(shown) > 10 {
			shown = shown[:10]
		}
		t.Errorf("%s: %d of %d acknowledged inserts are missing, e.g. %v", what, len(missing), len(in.acked), shown)
	}
	return len(found)
}

func TestGracefulShutdown(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	c, table := newTable(t, svc)
	in := newInserter("g")

	stop := make(chan struct{})
	var ok, failed int64
	doneInserting := make(chan struct{})
	go func() {
		ok, failed = in.run(t, c, 4, stop)
		close(doneInserting)
	}()
	time.Sleep(800 * time.Millisecond)
	began := time.Now()
	exitErr, inTime := srv.terminate(10 * time.Second)
	took := time.Since(began)
	close(stop)
	<-doneInserting
	t.Logf("acknowledged %d inserts, %d failed at shutdown; exit after %v: %v", ok, failed, took, exitErr)
	if !inTime {
		t.Fatalf("server did not exit within 10 s of SIGTERM")
	}
	if exitErr != nil {
		t.Errorf("exit after SIGTERM: %v, want status 0", exitErr)
	}
	if took > 5*time.Second {
		t.Errorf("shutdown took %v, want < 5 s", took)
	}
	if ok == 0 {
		t.Fatalf("no insert was acknowledged before shutdown")
	}

	srv.restart(t)
	c = newServiceClient(t, srv).NewClient(table)
	n := in.verify(t, c, "after graceful restart")
	t.Logf("%d entities present after restart", n)
}

func TestCrashRecovery(t *testing.T) {
	const cycles, workers = 5, 8
	srv := startServer(t)
	table := tableName(t)
	if _, err := newServiceClient(t, srv).CreateTable(ctx(t), table, nil); err != nil {
		t.Fatal(err)
	}
	in := newInserter("c")
	for cycle := 0; cycle < cycles; cycle++ {
		if cycle > 0 {
			srv.restart(t)
		}
		c := newServiceClient(t, srv).NewClient(table)
		n := in.verify(t, c, fmt.Sprintf("cycle %d, before inserting", cycle))
		if t.Failed() {
			t.Fatalf("stopping after cycle %d", cycle)
		}

		stop := make(chan struct{})
		var ok, failed int64
		done := make(chan struct{})
		go func() {
			ok, failed = in.run(t, c, workers, stop)
			close(done)
		}()
		// 1.0 s, 1.2 s, ... : kill at a different point of the stream each cycle
		time.Sleep(time.Second + time.Duration(cycle)*200*time.Millisecond)
		srv.kill()
		close(stop)
		<-done
		t.Logf("cycle %d: %d entities at start, %d inserts acknowledged, %d cut off by SIGKILL", cycle, n, ok, failed)
		if ok == 0 {
			t.Fatalf("cycle %d: no insert acknowledged", cycle)
		}
	}
	srv.restart(t)
	c := newServiceClient(t, srv).NewClient(table)
	n := in.verify(t, c, "after the last crash")
	in.mu.Lock()
	t.Logf("final: %d entities present, %d acknowledged, %d attempted", n, len(in.acked), len(in.attempted))
	in.mu.Unlock()
}

// TestShutdownUnusedConnection: a connection that never sends a request (as Go's
// http.Transport leaves one in its pool when another connection took the request it was
// dialed for) does not hold up a graceful shutdown; net/http alone waits 5 s for it. It is
// closed, and a connection with a request running is still served to the end.
func TestShutdownUnusedConnection(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	c, _ := newTable(t, svc)
	if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r"}), nil); err != nil {
		t.Fatal(err)
	}
	unused, err := net.DialTimeout("tcp", srv.Addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer unused.Close()
	time.Sleep(200 * time.Millisecond) // accepted

	began := time.Now()
	exitErr, inTime := srv.terminate(10 * time.Second)
	took := time.Since(began)
	if !inTime || exitErr != nil {
		t.Fatalf("exit after SIGTERM: %v (in time: %v)", exitErr, inTime)
	}
	if took > 3*time.Second {
		t.Errorf("shutdown with an unused connection open took %v, want about a second", took)
	}
	_ = unused.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := unused.Read(make([]byte, 1)); err == nil {
		t.Errorf("the unused connection read %d bytes after shutdown, want it closed", n)
	}
	t.Logf("shutdown with an unused connection open took %v", took.Round(time.Millisecond))
}
