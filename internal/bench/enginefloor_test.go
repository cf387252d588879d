package bench

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/storage"
)

// The directory must exist and be on a disk, and implies --floor, as --durable-floor's.
func TestEngineFloorDirectory(t *testing.T) {
	if _, err := ParseFlags([]string{"--engine-floor", t.TempDir() + "/missing"}); err == nil || !strings.Contains(err.Error(), "--engine-floor") {
		t.Errorf("--engine-floor of a missing directory: %v", err)
	}
	if shm := "/dev/shm"; inMemory(shm) {
		if _, err := ParseFlags([]string{"--engine-floor", shm}); err == nil || !strings.Contains(err.Error(), "in memory") {
			t.Errorf("--engine-floor %s (tmpfs): %v", shm, err)
		}
	}
	o, err := ParseFlags([]string{"--engine-floor", diskDir(t)})
	if err != nil || !o.Floor || o.EngineFloor == "" {
		t.Errorf("--engine-floor implies --floor: %+v, %v", o, err)
	}
}

// What each kind of write request becomes in the engine: a $batch as many inserts of new
// rows in one partition as it has operation parts, the body shared among them; an insert
// one new row; an upsert, replace and delete the entity the URL names.
func TestEngineFloorWrites(t *testing.T) {
	l, err := openEngineLog(diskDir(t))
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	ctx := context.Background()
	write := func(method, target, body string) {
		t.Helper()
		if err := l.write(httptest.NewRequest(method, target, strings.NewReader(body)), []byte(body)); err != nil {
			t.Fatalf("%s %s: %v", method, target, err)
		}
	}
	count := func() (n int, data int) {
		t.Helper()
		res, err := l.eng.Scan(ctx, engineFloorAccount, engineFloorTable, storage.ScanRequest{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Records {
			n++
			for _, p := range r.Entity.Props {
				data += len(p.Value.Str)
			}
		}
		return n, data
	}

	part := "--changeset\r\nContent-Transfer-Encoding: binary\r\nContent-Type: application/http\r\n\r\nPOST http://h/a/t HTTP/1.1\r\n\r\n{}\r\n"
	batch := "--batch\r\nContent-Type: multipart/mixed; boundary=changeset\r\n\r\n" + strings.Repeat(part, 3) + "--changeset--\r\n--batch--\r\n"
	write(http.MethodPost, "/devstoreaccount1/$batch", batch)
	if n, data := count(); n != 3 || data != len(batch) {
		t.Errorf("after a 3-operation batch: %d rows holding %d bytes, want 3 holding the body's %d", n, data, len(batch))
	}
	write(http.MethodPost, "/devstoreaccount1/t", `{"PartitionKey":"a","RowKey":"b"}`)
	if n, _ := count(); n != 4 {
		t.Errorf("after an insert: %d rows, want 4", n)
	}

	entity := "/devstoreaccount1/t(PartitionKey='it''s',RowKey='x%20y')"
	write(http.MethodPatch, entity, "first")
	write("MERGE", entity, "second")
	write(http.MethodPut, entity, "third")
	rec, err := l.eng.Get(ctx, engineFloorAccount, engineFloorTable, "it's", "x y")
	if err != nil || len(rec.Entity.Props) != 1 || rec.Entity.Props[0].Value.Str != "third" {
		t.Errorf("the entity the URL names after upserts and a replace: %+v, %v", rec, err)
	}
	write(http.MethodDelete, entity, "")
	if _, err := l.eng.Get(ctx, engineFloorAccount, engineFloorTable, "it's", "x y"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("after the delete: %v, want not found", err)
	}
	write(http.MethodDelete, entity, "") // not there: the floor answers as the server did
	if n, _ := count(); n != 4 {
		t.Errorf("at the end: %d rows, want 4", n)
	}
}
