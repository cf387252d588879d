package transfer

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/entity"
	"github.com/ceruleandb/cerulean/transfer/record"
)

// fakeBatch is a $batch endpoint that loses the answer to the first request (the
// connection closes after the body is read, as when a server dies after committing),
// refuses a repeated insert with EntityAlreadyExists, and accepts anything else.
type fakeBatch struct {
	mu      sync.Mutex
	methods []string // the sub-request method of each $batch received
}

func (f *fakeBatch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	method := "?"
	for _, m := range []string{"POST ", "PUT ", "MERGE "} {
		if strings.Contains(string(body), "\r\n"+m+"http") {
			method = strings.TrimSpace(m)
		}
	}
	f.mu.Lock()
	f.methods = append(f.methods, method)
	n := len(f.methods)
	f.mu.Unlock()
	if n == 1 {
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
		return
	}
	w.Header().Set("Content-Type", "multipart/mixed; boundary=batchresponse_1")
	w.WriteHeader(http.StatusAccepted)
	status := "204 No Content\r\n\r\n"
	if method == "POST" {
		status = "409 Conflict\r\nContent-Type: application/json\r\n\r\n" + `{"odata.error":{"code":"EntityAlreadyExists","message":{"lang":"en-US","value":"0:The specified entity already exists."}}}`
	}
	io.WriteString(w, "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n--changesetresponse_2\r\nContent-Type: application/http\r\n\r\nHTTP/1.1 "+status+"\r\n--changesetresponse_2--\r\n--batchresponse_1--\r\n")
}

// A batch whose answer was lost is retried; when the retried insert finds its entities
// there (the lost request was committed), it is sent as Insert Or Replace: the run
// succeeds and counts the entities once.
func TestSinkLostAnswer(t *testing.T) {
	f := &fakeBatch{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c, err := client.New(srv.URL+"/devstoreaccount1", client.DevAccount, client.DevKey)
	if err != nil {
		t.Fatal(err)
	}
	s := newSink(context.Background(), c, client.Insert, 2, Retry{Attempts: 4, Base: time.Millisecond})
	done := 0
	s.onDone = func(n, _ int) { done += n }
	var retried []error
	s.onRetry = func(err error) { retried = append(retried, err) }
	for i := range 3 {
		r := record.Record{Entity: entity.Entity{PartitionKey: "p", RowKey: string(rune('a' + i))}}
		if err := s.add("t", &r, pos{int64(i), int64(i)}, pos{int64(i + 1), int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	s.flush()
	if err := s.close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if strings.Join(f.methods, " ") != "POST POST PUT" || done != 3 || len(retried) != 1 {
		t.Errorf("requests %v, %d entities done, retries %v", f.methods, done, retried)
	}
	if c := s.committed(); c.seq != 3 || c.at.(int64) != 3 {
		t.Errorf("committed %+v, want after the third record", c)
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
	s.ack(&batch{start: pos{4, "four"}})
	if c := s.committed(); c.at != "seven" {
		t.Errorf("in flight 7: %+v", c)
	}
	s.open = map[openKey]*batch{{table: "t"}: {start: pos{7, "seven"}}}
	s.drop()
	if c := s.committed(); c.at != "seven" {
		t.Errorf("after drop: %+v", c)
	}
}
