package e2e

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Bad input is reported by line (and stops the import unless --skip-bad); a refused write
// names the table, PartitionKey, RowKey and the service's error code; mistakes on the
// command line exit 2.
func TestTransferErrors(t *testing.T) {
	srv := startOwnServer(t)
	svc := newServiceClient(t, srv)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	jsonl := write("bad.jsonl", `{"PartitionKey":"a","RowKey":"1","X":1}
{"PartitionKey":"a","RowKey":"2","X":2}
{"PartitionKey":"a","RowKey":"3","X":
{"PartitionKey":"a","RowKey":"4","N@odata.type":"Edm.Int64","N":"12x"}

{"PartitionKey":"a","RowKey":"5","X":5}
`)
	csv := write("bad.csv", "PartitionKey,RowKey,Timestamp,X,X@type\na,1,,1,Edm.Int32\na,2,,abc,Edm.Int32\na,3,,3,Int32\n")

	for _, c := range []struct {
		name, table string
		args        []string
		status      int
		stderr      []string // each must appear
		rows        int      // entities the table holds afterwards
	}{
		{"jsonl stops at the bad line", "badstop", []string{"--in", jsonl}, 1, []string{"line 3:"}, 0},
		{"jsonl --skip-bad", "badskip", []string{"--in", jsonl, "--skip-bad"}, 1, []string{"error: line 3:", "error: line 4:", `"12x"`, "2 records skipped", "imported 3 entities"}, 3},
		{"csv --skip-bad", "csvskip", []string{"--in", csv, "--skip-bad"}, 1, []string{`error: line 3: property "X": "abc" is not a valid Edm.Int32`, "imported 2 entities"}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"import", "--to", connString(srv), "--table", c.table, "--checkpoint", filepath.Join(dir, c.table+".checkpoint")}, c.args...)
			st, _, errOut := runTool(t, time.Minute, nil, args...)
			if st != c.status {
				t.Errorf("status %d, want %d: %s", st, c.status, errOut)
			}
			for _, w := range c.stderr {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			if c.rows > 0 {
				if n := sdkCount(t, svc.NewClient(c.table)); n != c.rows {
					t.Errorf("%d entities, want %d", n, c.rows)
				}
			}
		})
	}

	t.Run("insert conflict names the entity", func(t *testing.T) {
		tc, name := newTable(t, svc)
		fillEntities(t, tc, []string{`{"PartitionKey":"k'1","RowKey":"r%2","X":1}`})
		in := write("conflict.jsonl", `{"PartitionKey":"k'1","RowKey":"r%1"}`+"\n"+`{"PartitionKey":"k'1","RowKey":"r%2"}`+"\n")
		st, _, errOut := runTool(t, time.Minute, nil, "import", "--to", connString(srv), "--table", name, "--in", in, "--quiet")
		want := `table ` + name + `, PartitionKey "k'1", RowKey "r%2": EntityAlreadyExists`
		if st != 1 || !strings.Contains(errOut, want) {
			t.Errorf("status %d, stderr %q; want 1 and %q", st, errOut, want)
		}
		// The same with --mode replace succeeds.
		if st, _, errOut := runTool(t, time.Minute, nil, "import", "--to", connString(srv), "--table", name, "--in", in, "--quiet", "--mode", "replace"); st != 0 {
			t.Errorf("--mode replace: status %d: %s", st, errOut)
		}
	})

	t.Run("command line", func(t *testing.T) {
		for _, args := range [][]string{
			{"copy", "--to", connString(srv)},
			{"copy", "--from", "AccountName=x", "--to", connString(srv)},
			{"export", "--from", connString(srv), "--format", "xml"},
			{"import", "--to", connString(srv), "--mode", "upsert"},
			{"export", "--from", "https://acct.table.core.windows.net/t?sv=1"},
		} {
			if st, _, errOut := runTool(t, time.Minute, nil, args...); st != 2 {
				t.Errorf("cerulean %q: status %d, want 2: %s", args, st, errOut)
			}
		}
	})

	// 503 ServerBusy on every third $batch: the import retries with backoff and finishes.
	t.Run("retries 503", func(t *testing.T) {
		target, _ := url.Parse(srv.BaseURL())
		proxy := httputil.NewSingleHostReverseProxy(target)
		var batches atomic.Int64
		front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/$batch") && batches.Add(1)%3 == 0 {
				w.Header().Set("x-ms-error-code", "ServerBusy")
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				w.Write([]byte(`{"odata.error":{"code":"ServerBusy","message":{"lang":"en-US","value":"The server is busy."}}}`))
				return
			}
			proxy.ServeHTTP(w, r)
		}))
		defer front.Close()
		file := writeNumbered(t, dir, 3000, 5)
		a := srv.Default()
		cs := "DefaultEndpointsProtocol=http;AccountName=" + a.Name + ";AccountKey=" + a.Key + ";TableEndpoint=" + front.URL + "/" + a.Name
		st, _, errOut := runTool(t, 2*time.Minute, nil, "import", "--to", cs, "--table", "busy", "--in", file)
		if st != 0 || !strings.Contains(errOut, "retries") {
			t.Fatalf("import through a busy front: status %d: %s", st, errOut)
		}
		countNumbered(t, svc.NewClient("busy"), 3000)
	})
}
