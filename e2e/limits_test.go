package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/ceruleandb/cerulean/internal/gcfloor"
)

// Resource limits (issue 10, items A–C): hostile requests are refused or served in time
// and memory that do not grow with what the client sends. Bounds are generous (a shared,
// noisy machine); what they guard against took seconds to minutes and gigabytes.

// compactPropsBody is an entity body with n custom properties under the shortest distinct
// names, as an attacker packs them: 300,000 fit in 3 MB, under the 4 MiB body limit.
func compactPropsBody(pk, rk string, n int) []byte {
	b := []byte(`{"PartitionKey":"` + pk + `","RowKey":"` + rk + `"`)
	for i := 0; i < n; i++ {
		b = append(b, `,"_`...)
		b = strconv.AppendInt(b, int64(i), 36)
		b = append(b, `":1`...)
	}
	return append(b, '}')
}

// TestTooManyPropertiesIsCheap: 300,000 properties are refused with 400 TooManyProperties
// at once on every write path. Before, the duplicate-name check ran first and compared
// every name with every other: 100,000 properties took 30 s of CPU, 300,000 minutes.
func TestTooManyPropertiesIsCheap(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	c, table := newTable(t, svc)
	acct := srv.Default().Name
	const n = 300_000
	body := compactPropsBody("p", "r", n)
	if len(body) > 4<<20 {
		t.Fatalf("body of %d bytes is over the 4 MiB limit", len(body))
	}
	const bound = 2 * time.Second
	timed := func(t *testing.T, what string, f func() rawResp) rawResp {
		t.Helper()
		start := time.Now()
		r := f()
		el := time.Since(start)
		t.Logf("%s: %d %s in %v", what, r.Status, r.Header.Get("x-ms-error-code"), el)
		if el > bound {
			t.Errorf("%s: %d properties answered after %v, want under %v", what, n, el, bound)
		}
		return r
	}
	single := []struct {
		name, method, ifMatch string
		path                  string
	}{
		{"Insert", http.MethodPost, "", "/" + acct + "/" + table},
		{"Update", http.MethodPut, "*", entityPath(acct, table, "p", "r")},
		{"InsertOrReplace", http.MethodPut, "", entityPath(acct, table, "p", "r")},
		{"Merge", http.MethodPatch, "*", entityPath(acct, table, "p", "r")},
		{"MergeVerb", "MERGE", "*", entityPath(acct, table, "p", "r")},
		{"InsertOrMerge", http.MethodPatch, "", entityPath(acct, table, "p", "r")},
	}
	for _, c := range single {
		t.Run(c.name, func(t *testing.T) {
			h := map[string]string{}
			if c.ifMatch != "" {
				h["If-Match"] = c.ifMatch
			}
			r := timed(t, c.name, func() rawResp {
				return srv.do(t, rawReq{Method: c.method, Path: c.path, Header: h, Body: body})
			})
			requireRawErr(t, r, http.StatusBadRequest, "TooManyProperties")
		})
	}
	for _, method := range []string{http.MethodPost, "MERGE", http.MethodPut} {
		t.Run("Batch"+method, func(t *testing.T) {
			u := srv.Endpoint(acct) + "/" + table
			hdr := [][2]string{{"Content-Type", "application/json"}, {"Accept", "application/json;odata=minimalmetadata"}}
			if method != http.MethodPost {
				u += "(PartitionKey='p',RowKey='r')"
				hdr = append(hdr, [2]string{"If-Match", "*"})
			}
			b, boundary := buildBatchBody([]egtPart{
				{Method: http.MethodPost, URL: srv.Endpoint(acct) + "/" + table, Header: hdr[:2], Body: `{"PartitionKey":"p","RowKey":"ok"}`},
				{Method: method, URL: u, Header: hdr, Body: string(body)},
			})
			r := timed(t, "batch "+method, func() rawResp { return egtPost(t, srv, b, boundary, nil) })
			subs := parseBatchResponse(t, r.Status, r.Header, r.Body, false)
			checkBatchFailure(t, subs, http.StatusBadRequest, "TooManyProperties", 1)
		})
	}
	for _, rk := range []string{"r", "ok"} {
		if _, err := c.GetEntity(ctx(t), "p", rk, nil); statusOf(err) != http.StatusNotFound {
			t.Errorf("entity (p, %s) after the refused writes: %v, want 404", rk, err)
		}
	}
	// 252 properties still go in, and a 253rd is still refused.
	r := srv.do(t, rawReq{Method: http.MethodPost, Path: "/" + acct + "/" + table, Body: compactPropsBody("p", "max", 252)})
	requireStatus(t, r, http.StatusCreated, "insert of 252 properties")
	r = srv.do(t, rawReq{Method: http.MethodPost, Path: "/" + acct + "/" + table, Body: compactPropsBody("p", "over", 253)})
	requireRawErr(t, r, http.StatusBadRequest, "TooManyProperties")
}

// selectQuery is a raw $select of n names N0, N1, ….
func selectQuery(n int) string {
	var sb strings.Builder
	sb.WriteString("$select=")
	for i := 0; i < n; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString("N" + strconv.Itoa(i))
	}
	return sb.String()
}

// TestSelectLimits: a $select longer than any entity (255 properties) is refused at once,
// and the longest allowed one on a full page is answered in time and size linear in its
// output. Before, 4,000 names on a 1,000-entity page took 41 s and answered 51 MB, and
// 10,000 names did not finish in minutes (and kept a core busy after the client left).
func TestSelectLimits(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	c, table := newTable(t, svc)
	acct := srv.Default().Name
	for i := 0; i < 1000; i += 100 {
		var actions []aztables.TransactionAction
		for j := i; j < i+100; j++ {
			actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd,
				Entity: marshal(t, map[string]any{"PartitionKey": "p", "RowKey": fmt.Sprintf("%04d", j), "N1": j, "Name": "x"})})
		}
		if _, err := c.SubmitTransaction(ctx(t), actions, nil); err != nil {
			t.Fatalf("loading: %v", err)
		}
	}
	path := "/" + acct + "/" + table + "()"
	for _, n := range []int{256, 10_000, 100_000} {
		start := time.Now()
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: path, Query: selectQuery(n)})
		el := time.Since(start)
		t.Logf("$select of %d names: %d %s in %v", n, r.Status, r.Header.Get("x-ms-error-code"), el)
		if overHead(selectQuery(n)) {
			requireRawErr(t, r, http.StatusBadRequest, "OutOfRangeInput") // the request head's limit
		} else {
			requireRawErr(t, r, http.StatusBadRequest, "InvalidQueryParameterValue")
		}
		if el > 2*time.Second {
			t.Errorf("$select of %d names refused after %v", n, el)
		}
	}
	// Get Entity and a retrieve inside $batch take $select too.
	r := srv.do(t, rawReq{Method: http.MethodGet, Path: entityPath(acct, table, "p", "0001"), Query: selectQuery(1000)})
	requireRawErr(t, r, http.StatusBadRequest, "InvalidQueryParameterValue")

	// 255 names on a 1,000-entity page: each entity carries its own two and 253 nulls.
	start := time.Now()
	r = srv.do(t, rawReq{Method: http.MethodGet, Path: path, Query: selectQuery(255)})
	el := time.Since(start)
	requireStatus(t, r, http.StatusOK, "$select of 255 names")
	var doc struct {
		Value []map[string]json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(r.Body, &doc); err != nil || len(doc.Value) != 1000 {
		t.Fatalf("255-name page: %d entities, %v", len(doc.Value), err)
	}
	for i, e := range doc.Value {
		if len(e) != 256 || string(e["N1"]) != strconv.Itoa(i) || string(e["N254"]) != "null" { // 255 names + odata.etag
			t.Fatalf("entity %d has %d keys, N1=%s, N254=%s", i, len(e), e["N1"], e["N254"])
		}
	}
	t.Logf("$select of 255 names on 1,000 entities: %d bytes in %v", len(r.Body), el)
	if el > 5*time.Second {
		t.Errorf("$select of 255 names on 1,000 entities took %v", el)
	}
}

// TestQueryPageMemory: paging through entities of about 1 MB each keeps the server's peak
// resident memory under 200 MB plus the garbage collector's floor (internal/gcfloor lets
// the heap grow by 64 MiB between collections; with GOGC=100 the peak was 156–162 MB, with
// the floor 208–215 MB). Before, a page was built whole in memory at about six times its
// size: 300 entities of 975 KB gave a 390 MB body and a 2.28 GB peak.
//
// The default run loads 300 entities (loading 1 GB takes minutes on a shared machine);
// CERULEAN_TEST_PAGE_MEMORY_FULL=1 loads the full 1,000.
func TestQueryPageMemory(t *testing.T) {
	if _, err := os.Stat("/proc/self/clear_refs"); err != nil {
		t.Skip("needs Linux /proc to measure the server's peak memory")
	}
	n := 300
	if os.Getenv("CERULEAN_TEST_PAGE_MEMORY_FULL") != "" {
		n = 1000
	}
	const limitMB = 200 + gcfloor.DefaultHeadroom>>20
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	c, _ := newTable(t, svc)

	// Each entity: 15 Binary properties of 64 KiB (983,040 bytes, just under the 1 MiB
	// entity limit by the service's formula), random so that nothing compresses.
	const props, propSize = 15, 64 << 10
	r := rand.New(rand.NewPCG(uint64(n), 10))
	entityBody := func(i int) []byte {
		m := map[string]any{"PartitionKey": "p", "RowKey": fmt.Sprintf("%04d", i)}
		for j := 0; j < props; j++ {
			b := make([]byte, propSize)
			for k := range b {
				b[k] = byte(r.Uint32())
			}
			b[0], b[1] = byte(i>>8), byte(i)
			m[fmt.Sprintf("B%02d", j)] = b // []byte marshals as base64
			m[fmt.Sprintf("B%02d@odata.type", j)] = "Edm.Binary"
		}
		return marshal(t, m)
	}
	bodies := make(chan []byte, 8)
	go func() {
		defer close(bodies)
		for i := 0; i < n; i++ {
			bodies <- entityBody(i)
		}
	}()
	loadStart := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range bodies {
				if _, err := c.AddEntity(ctxFor(t, 2*time.Minute), b, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatalf("loading: %v", err)
	}
	t.Logf("loaded %d entities of %d KiB in %v", n, props*propSize>>10, time.Since(loadStart))

	// Measure the query phase only: reset the peak to the current resident size.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", srv.pid(t)), []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the server's peak memory: %v", err)
	}
	base, _ := srv.memKB(t)
	queryStart := time.Now()
	pager := c.NewListEntitiesPager(nil)
	seen, pages := 0, 0
	for pager.More() {
		resp, err := pager.NextPage(ctxFor(t, 2*time.Minute))
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		for _, raw := range resp.Entities {
			var e struct {
				RowKey string
				B07    []byte // base64
			}
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatalf("entity %d: %v", seen, err)
			}
			if e.RowKey != fmt.Sprintf("%04d", seen) || len(e.B07) != propSize || int(e.B07[0])<<8|int(e.B07[1]) != seen {
				t.Fatalf("entity %d: RowKey %q, B07 of %d bytes", seen, e.RowKey, len(e.B07))
			}
			seen++
		}
	}
	_, peak := srv.memKB(t)
	t.Logf("queried %d entities in %d pages in %v; server RSS %d MB before the query, peak %d MB during it",
		seen, pages, time.Since(queryStart), base>>10, peak>>10)
	if seen != n {
		t.Fatalf("paged through %d entities, want %d", seen, n)
	}
	if peak > limitMB<<10 {
		t.Errorf("server peak RSS %d MB while paging through %d entities of ~1 MB, want under %d MB", peak>>10, n, limitMB)
	}
}

// TestLimitMessages: the messages of two limits say what the limit is (issue 10, item 7).
func TestLimitMessages(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	c, _ := newTable(t, svc)
	// message is what a Go SDK user sees: the ResponseError's text quotes the body.
	message := func(t *testing.T, err error, code string) string {
		t.Helper()
		requireRespErr(t, err, http.StatusBadRequest, code)
		return err.Error()
	}
	t.Run("KeyTooLong", func(t *testing.T) {
		for _, key := range []string{"PartitionKey", "RowKey"} {
			ent := map[string]any{"PartitionKey": "p", "RowKey": "r"}
			ent[key] = strings.Repeat("k", 513)
			_, err := c.AddEntity(ctx(t), marshal(t, ent), nil)
			msg := message(t, err, "PropertyValueTooLarge")
			if !strings.Contains(msg, "The "+key+" exceeds the maximum allowed size (1 KiB)") || strings.Contains(msg, "64KB") {
				t.Errorf("%s of 513 characters: message %q does not name the key and its 1 KiB limit", key, msg)
			}
		}
	})
	t.Run("DateTimeNanoseconds", func(t *testing.T) {
		// Go's time.Time marshals nine fraction digits; Edm.DateTime holds seven.
		when := time.Date(2024, 5, 1, 10, 0, 0, 123456789, time.UTC)
		_, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "t",
			"When": when, "When@odata.type": "Edm.DateTime"}), nil)
		msg := message(t, err, "InvalidInput")
		if !strings.Contains(msg, `property \"When\"`) || !strings.Contains(msg, "more than 7 fraction digits; 7 (100 ns) is the most") {
			t.Errorf("message %q does not name the property and say that 7 digits is the most", msg)
		}
		// Seven digits (or trailing zeros past them) are fine.
		_, err = c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "t7",
			"When": when.Truncate(100 * time.Nanosecond).Format("2006-01-02T15:04:05.000000000Z"), "When@odata.type": "Edm.DateTime"}), nil)
		if err != nil {
			t.Errorf("seven significant digits and two zeros: %v", err)
		}
	})
}
