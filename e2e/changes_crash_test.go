package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/ceruleandb/cerulean/client"
)

// feedRecord is a change record as the crash test checks it.
type feedRecord struct {
	Seq     uint64
	Op      string
	Key     string // PartitionKey/RowKey
	W, ETag string // the write's id and the entity's ETag (writes only)
}

func decodeFeedRecord(t testing.TB, c client.Change) feedRecord {
	r := feedRecord{Seq: c.Seq, Op: c.Op, Key: c.PartitionKey + "/" + c.RowKey}
	if len(c.Entity) > 0 {
		var e struct {
			W    string
			ETag string `json:"odata.etag"`
		}
		if err := json.Unmarshal(c.Entity, &e); err != nil {
			t.Errorf("record %d: entity %s: %v", c.Seq, c.Entity, err)
		}
		r.W, r.ETag = e.W, e.ETag
	}
	return r
}

// crashWriter is one writer of TestChangeFeedCrash: it owns its partitions, and after any
// failure (whose outcome it cannot know) moves to a fresh one.
type crashWriter struct {
	id    int
	tc    *aztables.Client
	bulk  *client.Client
	table string
	rnd   *rand.Rand
	part  int
	n     int
	live  []string // RowKeys of the current partition known to exist, not expiring
	// what the writer learnt: acked writes (W → ETag), acked deletes per key, and every
	// write id attempted.
	mu        *sync.Mutex
	acked     map[string]string
	deletes   map[string]int
	attempted map[string]bool
}

func (w *crashWriter) pk() string { return fmt.Sprintf("w%d-p%03d", w.id, w.part) }

func (w *crashWriter) next() string {
	w.n++
	id := fmt.Sprintf("w%d-%05d", w.id, w.n)
	w.mu.Lock()
	w.attempted[id] = true
	w.mu.Unlock()
	return id
}

func (w *crashWriter) ack(id, etag string) {
	w.mu.Lock()
	w.acked[id] = etag
	w.mu.Unlock()
}

// fail abandons the partition: the outcome of what failed is unknown.
func (w *crashWriter) fail() {
	w.part++
	w.live = nil
}

// step does one random operation; ok reports that it was answered.
func (w *crashWriter) step(c context.Context) {
	pk := w.pk()
	ent := func(rk, id string, extra ...any) []byte {
		m := map[string]any{"PartitionKey": pk, "RowKey": rk, "W": id, "N": w.n}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i].(string)] = extra[i+1]
		}
		b, _ := json.Marshal(m)
		return b
	}
	pickLive := func() (int, bool) {
		if len(w.live) == 0 {
			return 0, false
		}
		return w.rnd.IntN(len(w.live)), true
	}
	switch r := w.rnd.IntN(100); {
	case r < 30: // insert, some with a 1 s time-to-live
		id := w.next()
		rk := "r" + id
		expiring := w.rnd.IntN(10) == 0
		var b []byte
		if expiring {
			b = ent(rk, id, "TTLInSeconds", 1)
		} else {
			b = ent(rk, id)
		}
		resp, err := w.tc.AddEntity(c, b, nil)
		if err != nil {
			w.fail()
			return
		}
		w.ack(id, string(resp.ETag))
		if !expiring {
			w.live = append(w.live, rk)
		}
	case r < 50: // merge
		i, ok := pickLive()
		if !ok {
			return
		}
		id := w.next()
		resp, err := w.tc.UpdateEntity(c, ent(w.live[i], id, "M", true), &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge})
		if err != nil {
			w.fail()
			return
		}
		w.ack(id, string(resp.ETag))
	case r < 60: // delete
		i, ok := pickLive()
		if !ok {
			return
		}
		rk := w.live[i]
		if _, err := w.tc.DeleteEntity(c, pk, rk, nil); err != nil {
			w.fail()
			return
		}
		w.mu.Lock()
		w.deletes[pk+"/"+rk]++
		w.mu.Unlock()
		w.live = append(w.live[:i], w.live[i+1:]...)
	case r < 75: // a batch: three inserts and a replace of a live row
		var actions []aztables.TransactionAction
		var ids, rks []string
		for range 3 {
			id := w.next()
			ids, rks = append(ids, id), append(rks, "r"+id)
			actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: ent("r"+id, id)})
		}
		if i, ok := pickLive(); ok {
			id := w.next()
			ids, rks = append(ids, id), append(rks, "")
			actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeUpdateReplace, Entity: ent(w.live[i], id), IfMatch: to.Ptr(azcore.ETagAny)})
		}
		if _, err := w.tc.SubmitTransaction(c, actions, nil); err != nil {
			w.fail()
			return
		}
		for i := range ids {
			w.ack(ids[i], "") // the SDK reports no ETags of a batch
			if rks[i] != "" {
				w.live = append(w.live, rks[i])
			}
		}
	case r < 85: // bulk upserts over this partition and a second one of the writer's
		var ops []client.BulkOp
		var ids []string
		for k := range 10 {
			id := w.next()
			ids = append(ids, id)
			b := ent("r"+id, id)
			if k%2 == 1 {
				m := map[string]any{"PartitionKey": pk + "b", "RowKey": "r" + id, "W": id}
				b, _ = json.Marshal(m)
			}
			ops = append(ops, client.BulkOp{Op: client.BulkUpsert, Entity: b})
		}
		res, err := w.bulk.Bulk(c, w.table, ops)
		if err != nil {
			w.fail()
			return
		}
		for i, r := range res.Results {
			if r.Error != nil {
				continue // failed alone: nothing written
			}
			w.ack(ids[i], r.ETag)
			if i%2 == 0 {
				w.live = append(w.live, "r"+ids[i])
			}
		}
	default: // upsert (replace) of a live row
		i, ok := pickLive()
		if !ok {
			return
		}
		id := w.next()
		resp, err := w.tc.UpsertEntity(c, ent(w.live[i], id), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
		if err != nil {
			w.fail()
			return
		}
		w.ack(id, string(resp.ETag))
	}
}

// TestChangeFeedCrash: writers doing inserts, merges, deletes, batches, bulk writes and
// entities expiring, readers following the feed from the beginning, from "now" and from
// a continuation, the server killed with SIGKILL and restarted twice in between. Each
// reader's sequence is the committed history: every acknowledged write exactly once, in
// commit order per row, records the same across readers, nothing never attempted, and
// replaying the feed gives exactly the table's final content.
func TestChangeFeedCrash(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	// A fixed port, so that the clients and readers carry on across the restarts.
	srv := startOwnServer(t, withPort(port), withArgs("--expiry-interval", "500ms"))
	bc := bulkClient(t, srv)
	name := feedCrashTable(t, bc)
	tc := newServiceClient(t, srv).NewClient(name)
	runFeedCrash(t, feedCrashSetup{
		table: name, writers: []*aztables.Client{tc}, bulks: []*client.Client{bc},
		readers: [3]*client.Client{bulkClient(t, srv), bulkClient(t, srv), bulkClient(t, srv)},
		crash:   func(int) { srv.kill(); srv.restart(t) },
	})
}

// feedCrashTable creates the crash tests' table: elastic, time-to-live on without a
// default (entities with TTLInSeconds expire), the change feed on.
func feedCrashTable(t *testing.T, c *client.Client) string {
	name := tableName(t)
	if err := c.CreateTable(ctx(t), name, &client.TableSettings{Elastic: true, DefaultTimeToLive: -1, ChangeFeedRetention: 3600}); err != nil {
		t.Fatal(err)
	}
	return name
}

// feedCrashSetup is where a crash run's writers and readers go: writer i writes through
// writers[i%len] and bulks[i%len]; reader k reads through readers[k] with headers[k]
// (e.g. a consistency level that lets a replica serve it); crash(phase) kills and
// restarts what the run crashes, between its phases.
type feedCrashSetup struct {
	table   string
	writers []*aztables.Client
	bulks   []*client.Client
	readers [3]*client.Client
	headers [3]http.Header
	crash   func(phase int)
}

// runFeedCrash runs the writers and readers of a crash test and checks what each reader
// read against what the writers were told and the table's final content. It returns the
// read sources (x-cerulean-read-source) each reader's pages came from.
func runFeedCrash(t *testing.T, s feedCrashSetup) [3]map[string]int {
	name := s.table
	tc := s.writers[0]
	rctx, stopReaders := context.WithCancel(context.Background())
	defer stopReaders()
	type reader struct {
		mu      sync.Mutex
		recs    []feedRecord
		sources map[string]int
		cont    []string // the continuation after each page
		at      []int    // how many records preceded it
		done    chan error
	}
	follow := func(k int, from string) *reader {
		r := &reader{done: make(chan error, 1), sources: map[string]int{}}
		go func() {
			c := s.readers[k]
			r.done <- c.FollowChanges(rctx, name, client.ChangesOptions{From: from, Wait: 2 * time.Second, Limit: 50, Header: s.headers[k]},
				func(ch client.Change) error {
					r.mu.Lock()
					r.recs = append(r.recs, decodeFeedRecord(t, ch))
					r.mu.Unlock()
					return nil
				}, func(p *client.ChangesPage) error {
					r.mu.Lock()
					r.cont, r.at = append(r.cont, p.Continuation), append(r.at, len(r.recs))
					r.sources[p.Source]++
					r.mu.Unlock()
					return nil
				})
		}()
		return r
	}
	readers := []*reader{follow(0, client.FromBeginning)}

	var mu sync.Mutex
	acked, deletes, attempted := map[string]string{}, map[string]int{}, map[string]bool{}
	var writers sync.WaitGroup
	wctx, stopWriters := context.WithCancel(context.Background())
	for i := range 4 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			w := &crashWriter{id: i, tc: s.writers[i%len(s.writers)], bulk: s.bulks[i%len(s.bulks)], table: name, rnd: rand.New(rand.NewPCG(uint64(i), 45)), mu: &mu, acked: acked, deletes: deletes, attempted: attempted}
			for wctx.Err() == nil {
				c, cancel := context.WithTimeout(wctx, 10*time.Second)
				w.step(c)
				cancel()
			}
		}()
	}
	var skipFirst int // records of readers[2]'s start: reader 0's count at its continuation
	for phase := range 3 {
		time.Sleep(2 * time.Second)
		switch phase {
		case 0:
			readers = append(readers, follow(1, client.FromNow))
		case 1:
			r := readers[0]
			r.mu.Lock()
			cont, n := r.cont[len(r.cont)-1], r.at[len(r.at)-1]
			r.mu.Unlock()
			skipFirst = n
			readers = append(readers, follow(2, cont))
		}
		if phase < 2 {
			s.crash(phase)
		}
	}
	stopWriters()
	writers.Wait()
	// Let the last expiring entities expire and be purged, then mark the end.
	time.Sleep(3 * time.Second)
	if _, err := tc.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "zz-end", "RowKey": "end", "W": "end"}), nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for i, r := range readers {
		for {
			r.mu.Lock()
			n := len(r.recs)
			seen := n > 0 && r.recs[n-1].W == "end"
			r.mu.Unlock()
			if seen {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("reader %d did not reach the end marker (%d records)", i, n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	stopReaders()

	all := readers[0].recs
	// Order and agreement: strictly increasing Seq; every reader's records are the same
	// records as reader 0's from where it started.
	for i, r := range readers {
		for k := 1; k < len(r.recs); k++ {
			if r.recs[k].Seq <= r.recs[k-1].Seq {
				t.Fatalf("reader %d: Seq %d after %d", i, r.recs[k].Seq, r.recs[k-1].Seq)
			}
		}
		start := 0
		if i == 2 {
			start = skipFirst
		} else if i == 1 {
			for start < len(all) && all[start].Seq < r.recs[0].Seq {
				start++
			}
		}
		if got, want := len(r.recs), len(all)-start; got != want {
			t.Fatalf("reader %d read %d records from its start, reader 0 %d", i, got, want)
		}
		for k := range r.recs {
			if r.recs[k] != all[start+k] {
				t.Fatalf("reader %d record %d = %+v, reader 0 has %+v", i, k, r.recs[k], all[start+k])
			}
		}
	}
	// Every acknowledged write exactly once, with its ETag; nothing never attempted;
	// deletes at least as often as acknowledged.
	seenW := map[string]int{}
	delCount := map[string]int{}
	state := map[string]string{} // replay: key → ETag
	for _, r := range all {
		switch r.Op {
		case "delete", "expire":
			if r.Op == "delete" {
				delCount[r.Key]++
			}
			if _, ok := state[r.Key]; !ok {
				t.Errorf("record %d: %s of %s, which the feed never wrote or already removed", r.Seq, r.Op, r.Key)
			}
			delete(state, r.Key)
		default:
			seenW[r.W]++
			if r.W != "end" && !attempted[r.W] {
				t.Errorf("record %d: write %q was never attempted", r.Seq, r.W)
			}
			if r.Op == "insert" {
				if _, ok := state[r.Key]; ok {
					t.Errorf("record %d: insert of %s, which exists", r.Seq, r.Key)
				}
			}
			state[r.Key] = r.ETag
		}
	}
	lost := 0
	for id, etag := range acked {
		switch {
		case seenW[id] == 0:
			if lost++; lost <= 10 {
				t.Errorf("acknowledged write %s (ETag %s) is not in the feed", id, etag)
			}
		case seenW[id] > 1:
			t.Errorf("write %s appears %d times", id, seenW[id])
		}
	}
	for key, n := range deletes {
		if delCount[key] < n {
			t.Errorf("%s: %d acknowledged deletes, %d delete records", key, n, delCount[key])
		}
	}
	// Replaying the feed gives the table.
	stored := map[string]string{}
	for _, b := range listAll(t, tc, nil) {
		var e struct {
			PartitionKey, RowKey string
			ETag                 string `json:"odata.etag"`
		}
		_ = json.Unmarshal(b, &e)
		stored[e.PartitionKey+"/"+e.RowKey] = e.ETag
	}
	bad := 0
	for k, etag := range stored {
		if state[k] != etag {
			if bad++; bad <= 10 {
				t.Errorf("table has %s at %s; the feed replayed gives %q", k, etag, state[k])
			}
		}
	}
	for k := range state {
		if _, ok := stored[k]; !ok {
			if bad++; bad <= 10 {
				t.Errorf("the feed replayed has %s, the table does not", k)
			}
		}
	}
	ops := map[string]int{}
	for _, r := range all {
		ops[r.Op]++
	}
	t.Logf("%d records (%v), %d writes acknowledged, %d attempted, %d rows at the end; readers: %d, %d, %d records",
		len(all), ops, len(acked), len(attempted), len(stored), len(readers[0].recs), len(readers[1].recs), len(readers[2].recs))
	var sources [3]map[string]int
	for k, r := range readers {
		sources[k] = r.sources
	}
	t.Logf("read sources: %v", sources)
	return sources
}
