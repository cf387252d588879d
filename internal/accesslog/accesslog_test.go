package accesslog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/observe"
)

func sample() *observe.Request {
	return &observe.Request{
		Start:           time.Date(2026, 11, 24, 18, 1, 2, 345678912, time.FixedZone("CET", 3600)),
		Latency:         1234567 * time.Nanosecond,
		ID:              "0000000000000001",
		ClientRequestID: "client-1",
		Account:         "devstoreaccount1",
		Operation:       "InsertEntity",
		Table:           "orders",
		PartitionKey:    `p "quoted"` + "\n\x01\xff",
		Status:          409,
		ErrorCode:       "EntityAlreadyExists",
		BytesIn:         321,
		BytesOut:        654,
		RemoteAddr:      "[::1]:54321",
		AuthScheme:      "SAS",
	}
}

// Every field is present, named and typed as docs/operations.md ("Access log") says, the time in UTC with
// microseconds, and the line is one line.
func TestAppendLineFields(t *testing.T) {
	line := AppendLine(nil, sample())
	if bytes.IndexByte(line, '\n') != len(line)-1 {
		t.Fatalf("not one line ending in a newline: %q", line)
	}
	var got map[string]any
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	if err := d.Decode(&got); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	want := map[string]any{
		"time":              "2026-11-24T17:01:02.345678Z",
		"request_id":        "0000000000000001",
		"client_request_id": "client-1",
		"account":           "devstoreaccount1",
		"operation":         "InsertEntity",
		"table":             "orders",
		"partition_key":     "p \"quoted\"\n\x01\ufffd",
		"status":            json.Number("409"),
		"error_code":        "EntityAlreadyExists",
		"latency_ms":        json.Number("1.235"),
		"bytes_in":          json.Number("321"),
		"bytes_out":         json.Number("654"),
		"client_ip":         "::1",
		"auth":              "SAS",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %#v, want %#v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("fields %v, want %d of them", got, len(want))
	}
	if _, err := time.Parse(time.RFC3339Nano, got["time"].(string)); err != nil {
		t.Errorf("time not RFC 3339: %v", err)
	}
	// Empty and odd values: still every field, client_ip falls back to the address.
	line = AppendLine(nil, &observe.Request{RemoteAddr: "@"})
	got = nil
	if err := json.Unmarshal(line, &got); err != nil || len(got) != len(want) || got["client_ip"] != "@" || got["partition_key"] != "" {
		t.Errorf("empty request: %v %s", err, line)
	}
}

// Any table name, PartitionKey or client request id (edmjson.AppendString) leaves the line
// one valid JSON line that decodes to the value (invalid UTF-8 as U+FFFD).
func FuzzAppendLine(f *testing.F) {
	for _, s := range []string{"", "a\"b", "\x00\n", "\xff\xfe", "\u2028", "日本", `\u0000`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		line := AppendLine(nil, &observe.Request{Table: s, PartitionKey: s, ClientRequestID: s})
		if bytes.IndexByte(line, '\n') != len(line)-1 {
			t.Fatalf("not one line: %q", line)
		}
		var got struct {
			PK string `json:"partition_key"`
		}
		if err := json.Unmarshal(line, &got); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		var want string
		b, _ := json.Marshal(s)
		_ = json.Unmarshal(b, &want)
		if got.PK != want {
			t.Fatalf("partition_key %q, want %q", got.PK, want)
		}
	})
}

func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: line %d not JSON (%v): %q", path, len(out)+1, err, sc.Bytes())
		}
		out = append(out, m)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("%s: last line unterminated", path)
	}
	return out
}

// After the file is renamed and Reopen called, the old file holds the lines before and a
// new file at the path those after.
func TestReopenAfterRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := sample()
	r.ID = "before"
	l.Observe(r)
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	r.ID = "still-before" // rename alone changes nothing: the old file gets it
	l.Observe(r)
	if err := l.Reopen(); err != nil {
		t.Fatal(err)
	}
	r.ID = "after"
	l.Observe(r)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l.Observe(r) // after Close: discarded, no panic
	ids := func(p string) (s []string) {
		for _, m := range readLines(t, p) {
			s = append(s, m["request_id"].(string))
		}
		return s
	}
	if got := ids(path + ".1"); fmt.Sprint(got) != "[before still-before]" {
		t.Errorf("rotated file: %v", got)
	}
	if got := ids(path); fmt.Sprint(got) != "[after]" {
		t.Errorf("new file: %v", got)
	}
	// A path that cannot be opened: Open says so; Reopen says so and keeps the old file.
	if _, err := Open(filepath.Join(dir, "missing", "a.log"), Options{}); err == nil {
		t.Error("Open in a missing directory succeeded")
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err = Open(filepath.Join(sub, "a.log"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Rename(sub, sub+".gone"); err != nil {
		t.Fatal(err)
	}
	if err := l.Reopen(); err == nil {
		t.Error("Reopen into a missing directory succeeded")
	}
	r.ID = "kept"
	l.Observe(r)
	l.Flush()
	if got := ids(filepath.Join(sub+".gone", "a.log")); fmt.Sprint(got) != "[kept]" {
		t.Errorf("after a failed Reopen: %v", got)
	}
}

// Lines are written without Close, within the flush delay.
func TestFlushedWithoutClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	l, err := Open(path, Options{FlushDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Observe(sample())
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if b, _ := os.ReadFile(path); len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("line never written")
		}
	}
	if n := len(readLines(t, path)); n != 1 {
		t.Fatalf("%d lines", n)
	}
}

// Many goroutines, lines of many sizes (some larger than the buffer), rotations in the
// middle: every line arrives exactly once, whole and valid JSON.
func TestConcurrent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	l, err := Open(path, Options{FlushDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const workers, per = 16, 1500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				r := sample()
				r.ID = fmt.Sprintf("%d-%d", w, i)
				r.PartitionKey = strings.Repeat("k\"\n", (w*per+i)%97)
				if i == per/2 && w%4 == 0 {
					r.ClientRequestID = strings.Repeat("x", bufSize+100)
				}
				l.Observe(r)
			}
		}()
	}
	rotations := 0
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for loop := true; loop; {
		select {
		case <-done:
			loop = false
		default:
			rotations++
			if err := os.Rename(path, fmt.Sprintf("%s.%d", path, rotations)); err != nil {
				t.Fatal(err)
			}
			if err := l.Reopen(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	files, _ := filepath.Glob(path + "*")
	for _, f := range files {
		for _, m := range readLines(t, f) {
			seen[m["request_id"].(string)]++
		}
	}
	if len(seen) != workers*per {
		t.Errorf("%d distinct lines, want %d (%d files)", len(seen), workers*per, len(files))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("line %s written %d times", id, n)
		}
	}
	if l.Lost() != 0 {
		t.Errorf("lost %d", l.Lost())
	}
}

// A file that refuses writes loses lines and counts them; the log goes on.
func TestWriteFailureCounted(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	l, err := Open("/dev/full", Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		l.Observe(sample())
	}
	l.Flush()
	if l.Lost() != 3 {
		t.Errorf("lost %d, want 3", l.Lost())
	}
	_ = l.Close()
}

// appendTime writes what time.Time.AppendFormat writes.
func TestAppendTime(t *testing.T) {
	for _, tm := range []time.Time{
		time.Date(2026, 11, 24, 18, 1, 2, 345678912, time.FixedZone("CET", 3600)),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(0, 1000),
		{},
	} {
		if got, want := string(appendTime(nil, tm)), tm.UTC().Format(TimeLayout); got != want {
			t.Errorf("appendTime(%v) = %s, want %s", tm, got, want)
		}
	}
}

func BenchmarkObserve(b *testing.B) {
	l, err := Open(filepath.Join(b.TempDir(), "access.log"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	r := sample()
	r.PartitionKey = "partition-0042"
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Observe(r)
		}
	})
}

// The emulation modes' two fields come last, only on the lines they concern.
func TestAppendLineEmulationFields(t *testing.T) {
	r := sample()
	r.Throttled, r.Fault = "partition", "reset-after"
	line := AppendLine(nil, r)
	var got map[string]any
	if err := json.Unmarshal(line, &got); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	if got["throttled"] != "partition" || got["fault"] != "reset-after" {
		t.Fatalf("emulation fields: %s", line)
	}
	if !bytes.HasSuffix(line, []byte(`"auth":"SAS","throttled":"partition","fault":"reset-after"}`+"\n")) {
		t.Fatalf("emulation fields not last: %s", line)
	}
	if bytes.Contains(AppendLine(nil, sample()), []byte("throttled")) {
		t.Fatal("an ordinary line carries the emulation fields")
	}
}
