package transfer

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/transfer/record"
)

// fakeTable is a table endpoint in memory: $batch inserts (a changeset fails whole with
// EntityAlreadyExists on an entity it holds) and upserts, queries (every entity, in key
// order: the sink filters what it looks up) and point reads. loseFirst drops the
// connection after committing the first $batch, as when a server dies after the commit.
type fakeTable struct {
	mu        sync.Mutex
	loseFirst bool
	batches   []string          // the sub-request method of each $batch received
	queries   int               // queries and point reads
	ents      map[string]string // "pk/rk" → entity JSON with its Timestamp
	expiries  map[string]string // "pk/rk" → the x-cerulean-expiry it was last written with
	stamp     string            // the Timestamp written entities get
}

func newFakeTable() *fakeTable {
	return &fakeTable{ents: map[string]string{}, expiries: map[string]string{}, stamp: entity.FormatTicks(entity.TimeToTicks(time.Now()))}
}

// put stores an entity body as the target holds it, with Timestamp ts.
func (f *fakeTable) put(body, ts string) {
	r, err := record.FromJSON([]byte(body))
	if err != nil {
		panic(err)
	}
	r.Timestamp, _ = entity.ParseDateTime(ts)
	r.HasTimestamp = true
	f.ents[r.Entity.PartitionKey+"/"+r.Entity.RowKey] = string(record.AppendJSON(nil, &r, record.JSONOptions{AnnotateAll: true, Timestamp: true}))
}

func (f *fakeTable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Method == http.MethodGet {
		f.queries++
		if strings.Contains(r.URL.Path, "PartitionKey=") {
			http.Error(w, `{"odata.error":{"code":"ResourceNotFound","message":{"value":"not found"}}}`, http.StatusNotFound)
			return
		}
		keys := make([]string, 0, len(f.ents))
		for k := range f.ents {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var vals []string
		for _, k := range keys {
			vals = append(vals, f.ents[k])
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"value":[`+strings.Join(vals, ",")+`]}`)
		return
	}
	body, _ := io.ReadAll(r.Body)
	method := "?"
	for _, m := range []string{"POST ", "PUT ", "MERGE "} {
		if strings.Contains(string(body), "\r\n"+m+"http") {
			method = strings.TrimSpace(m)
		}
	}
	f.batches = append(f.batches, method)
	var bodies, expiries []string
	expiry := ""
	for _, l := range strings.Split(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(l, client.HeaderExpiry+": "); ok {
			expiry = v
		}
		if strings.HasPrefix(l, "{") {
			bodies, expiries = append(bodies, l), append(expiries, expiry)
			expiry = ""
		}
	}
	status := "204 No Content\r\n\r\n"
	if method == "POST" {
		for i, b := range bodies {
			rec, _ := record.FromJSON([]byte(b))
			if _, ok := f.ents[rec.Entity.PartitionKey+"/"+rec.Entity.RowKey]; ok {
				status = "409 Conflict\r\nContent-Type: application/json\r\n\r\n" + `{"odata.error":{"code":"EntityAlreadyExists","message":{"lang":"en-US","value":"` + strconv.Itoa(i) + `:The specified entity already exists."}}}`
				bodies = nil
				break
			}
		}
	}
	for i, b := range bodies {
		f.put(b, f.stamp)
		rec, _ := record.FromJSON([]byte(b))
		f.expiries[rec.Entity.PartitionKey+"/"+rec.Entity.RowKey] = expiries[i]
	}
	if len(f.batches) == 1 && f.loseFirst {
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
		return
	}
	w.Header().Set("Content-Type", "multipart/mixed; boundary=batchresponse_1")
	w.WriteHeader(http.StatusAccepted)
	io.WriteString(w, "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n--changesetresponse_2\r\nContent-Type: application/http\r\n\r\nHTTP/1.1 "+status+"\r\n--changesetresponse_2--\r\n--batchresponse_1--\r\n")
}

func fakeSink(t *testing.T, f *fakeTable) (*sink, *int) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL+"/devstoreaccount1", client.DevAccount, client.DevKey)
	if err != nil {
		t.Fatal(err)
	}
	s := newSink(context.Background(), c, client.Insert, 2, Retry{Attempts: 4, Base: time.Millisecond})
	done := new(int)
	s.onDone = func(n, _ int) { *done += n }
	return s, done
}

// addAll adds records p/<rk> with property X=<x> to table t.
func addAll(t *testing.T, s *sink, rks []string, x int) {
	t.Helper()
	for i, rk := range rks {
		r := record.Record{Entity: entity.Entity{PartitionKey: "p", RowKey: rk, Props: []entity.Property{{Name: "X", Value: entity.Int32Value(int32(x))}}}}
		if err := s.add("t", false, &r, pos{int64(i), int64(i)}, pos{int64(i + 1), int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	s.flush()
}

// A batch whose answer was lost is retried; when the retried insert finds its entities
// there (the lost request was committed), they are read back, found to be the ones this
// run wrote, and counted once: no second write.
func TestSinkLostAnswer(t *testing.T) {
	f := newFakeTable()
	f.loseFirst = true
	s, done := fakeSink(t, f)
	var retried []error
	s.onRetry = func(err error) { retried = append(retried, err) }
	addAll(t, s, []string{"a", "b", "c"}, 1)
	if err := s.close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if strings.Join(f.batches, " ") != "POST POST" || *done != 3 || len(retried) != 1 || f.queries != 1 {
		t.Errorf("batches %v, %d queries, %d entities done, retries %v", f.batches, f.queries, *done, retried)
	}
	if c := s.committed(); c.seq != 3 || c.at.(int64) != 3 {
		t.Errorf("committed %+v, want after the third record", c)
	}
}

// A resumed run's batch that straddles what the interrupted run wrote: the entities the
// target holds identically, written since the job began, are taken out and the rest
// written; an entity the target holds with other data, or held before the job began
// (even identical), stays a conflict naming it.
func TestSinkResolveConflict(t *testing.T) {
	now := time.Now()
	before := entity.FormatTicks(entity.TimeToTicks(now.Add(-time.Hour)))
	since := entity.TimeToTicks(now.Add(-time.Minute))

	f := newFakeTable()
	f.put(`{"PartitionKey":"p","RowKey":"a","X":1}`, f.stamp) // the interrupted run's
	f.put(`{"PartitionKey":"p","RowKey":"b","X":1}`, f.stamp)
	s, done := fakeSink(t, f)
	s.resolve, s.since = true, since
	addAll(t, s, []string{"a", "b", "c", "d"}, 1)
	if err := s.close(); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if *done != 4 || len(f.ents) != 4 || strings.Join(f.batches, " ") != "POST POST" {
		t.Errorf("%d done, %d entities, batches %v", *done, len(f.ents), f.batches)
	}

	for _, c := range []struct{ name, held, stamp, want string }{
		{"other data", `{"PartitionKey":"p","RowKey":"b","X":2}`, "", "other data"},
		{"held before the job", `{"PartitionKey":"p","RowKey":"b","X":1}`, before, "before this job began"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeTable()
			f.put(`{"PartitionKey":"p","RowKey":"a","X":1}`, f.stamp)
			stamp := c.stamp
			if stamp == "" {
				stamp = f.stamp
			}
			f.put(c.held, stamp)
			s, _ := fakeSink(t, f)
			s.resolve, s.since = true, since
			addAll(t, s, []string{"a", "b", "c"}, 1)
			err := s.close()
			var we *WriteError
			if !errors.As(err, &we) || we.RowKey != "b" || !strings.Contains(err.Error(), "EntityAlreadyExists") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("close: %v, want a conflict on b: %s", err, c.want)
			}
			if _, ok := f.ents["p/c"]; ok {
				t.Error("c was written in the changeset of a conflict")
			}
		})
	}
}

// An entity carried with its exact expiry is written with it (x-cerulean-expiry: the
// instant, or never for none) and its properties as they are, or not at all once the
// instant has passed; its position is committed either way. An entity whose expiry is not
// carried is sent without the header.
func TestSinkExpiry(t *testing.T) {
	f := newFakeTable()
	s, done := fakeSink(t, f)
	expired := 0
	s.onExpired = func(n int) { expired += n }
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	s.now = func() time.Time { return now }
	ttl := []entity.Property{{Name: "TTLInSeconds", Value: entity.Int64Value(3600)}, {Name: "Y", Value: entity.Int32Value(1)}}
	for i, c := range []struct {
		rk     string
		exact  bool
		expiry time.Time
		props  []entity.Property
	}{
		{"gone", true, now.Add(-time.Second), nil},
		{"now", true, now, nil},
		{"half-second", true, now.Add(500 * time.Millisecond), nil},
		{"own", true, now.Add(90*time.Second + 700*time.Millisecond), ttl},
		{"never", true, time.Time{}, ttl},
		{"not-carried", false, time.Time{}, ttl},
	} {
		r := record.Record{Entity: entity.Entity{PartitionKey: "p", RowKey: c.rk, Props: c.props}}
		if !c.expiry.IsZero() {
			r.Expiry = entity.TimeToTicks(c.expiry)
		}
		if err := s.add("t", c.exact, &r, pos{int64(i), int64(i)}, pos{int64(i + 1), int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	s.flush()
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	if expired != 2 || *done != 4 || len(f.ents) != 4 {
		t.Errorf("%d expired, %d done, %d written", expired, *done, len(f.ents))
	}
	for key, want := range map[string]string{
		"p/half-second": "2030-01-02T03:04:05.5000000Z",
		"p/own":         "2030-01-02T03:05:35.7000000Z",
		"p/never":       "never",
		"p/not-carried": "",
	} {
		if got, ok := f.expiries[key]; !ok || got != want {
			t.Errorf("%s: written with x-cerulean-expiry %q (written %v), want %q", key, got, ok, want)
		}
	}
	for _, key := range []string{"p/own", "p/never", "p/not-carried"} {
		if want := `"TTLInSeconds@odata.type":"Edm.Int64","TTLInSeconds":"3600","Y@odata.type":"Edm.Int32","Y":1}`; !strings.HasSuffix(f.ents[key], want) {
			t.Errorf("%s: %s, want its properties unchanged: …%s", key, f.ents[key], want)
		}
	}
	if c := s.committed(); c.at.(int64) != 6 {
		t.Errorf("committed %+v, want after the sixth record", c)
	}
}

// The committed position is the start of the oldest batch not acknowledged; batches
// dropped at an interrupt stay unacknowledged.
func TestSinkCommitted(t *testing.T) {
	s := &sink{inflight: map[int64]pos{}}
	s.next = pos{10, "after"}
	if c := s.committed(); c.seq != 10 {
		t.Errorf("nothing in flight: %+v", c)
	}
	s.inflight[4] = pos{4, "four"}
	s.inflight[7] = pos{7, "seven"}
	if c := s.committed(); c.at != "four" {
		t.Errorf("in flight 4 and 7: %+v", c)
	}
	s.ack(&batch{start: pos{4, "four"}}, 0)
	if c := s.committed(); c.at != "seven" {
		t.Errorf("in flight 7: %+v", c)
	}
	s.open = map[openKey]*batch{{table: "t"}: {start: pos{7, "seven"}}}
	s.drop()
	if c := s.committed(); c.at != "seven" {
		t.Errorf("after drop: %+v", c)
	}
}
