package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ceruleandb/cerulean/internal/auth"
)

// fakeTables is a minimal in-memory Azure Table endpoint: just enough of the
// REST API (create/delete table, insert, get, replace with If-Match, merge, query by
// PartitionKey, and the scan workload's filter, with continuation) for the
// aztables SDK calls the bench makes.
// Batches are answered with 501 so the batch workload's skip path runs.
// net/http supplies the RFC 1123 Date header the SDK parses.
type fakeTables struct {
	mu       sync.Mutex
	tables   map[string]map[string]*fakeEntity // table -> pk "\x00" rk -> entity
	etag     int
	pageSize int // entities per query page; 0 = 1000

	// Fault injection.
	loseEvery     int  // every Nth successful replace is acknowledged but not applied
	replaces      int  //
	merges        int  // PATCHes applied
	dropLastPages bool // end a query one page early (broken continuation)
	rejectUpserts bool // answer 400 to PUT without If-Match

	// levels counts requests by method and x-ms-consistency-level ("GET Eventual").
	levels map[string]int
}

type fakeEntity struct {
	props map[string]any
	etag  string
}

func newFake(t *testing.T) (*fakeTables, string) {
	t.Helper()
	f := &fakeTables{tables: map[string]map[string]*fakeEntity{}, pageSize: 50}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	cs := "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;" +
		"AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;" +
		"TableEndpoint=" + srv.URL + "/devstoreaccount1;"
	return f, cs
}

var fakeVerifier = auth.NewVerifier([]auth.Account{auth.DevAccount()}, nil)

var (
	entityPathRE = regexp.MustCompile(`^([A-Za-z0-9]+)\(PartitionKey='(.*)',RowKey='(.*)'\)$`)
	pkFilterRE   = regexp.MustCompile(`^PartitionKey eq '(.*)'$`)
)

func fakeError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("x-ms-error-code", code)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"odata.error":{"code":%q,"message":{"lang":"en-US","value":%q}}}`, code, code)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json;odata=minimalmetadata")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeTables) nextETag() string {
	f.etag++
	return `W/"datetime'` + strconv.Itoa(f.etag) + `'"`
}

func (e *fakeEntity) render() map[string]any {
	m := make(map[string]any, len(e.props)+1)
	for k, v := range e.props {
		m[k] = v
	}
	m["odata.etag"] = e.etag
	return m
}

func (f *fakeTables) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Both clients sign with SharedKeyLite, as the Go SDK does; the server's own verifier
	// checks the signature.
	if !strings.HasPrefix(r.Header.Get("Authorization"), "SharedKeyLite devstoreaccount1:") ||
		fakeVerifier.Authenticate(r, "devstoreaccount1") != nil {
		fakeError(w, http.StatusForbidden, "AuthenticationFailed")
		return
	}
	path, ok := strings.CutPrefix(r.URL.Path, "/devstoreaccount1/")
	if !ok {
		fakeError(w, http.StatusNotFound, "ResourceNotFound")
		return
	}
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.levels == nil {
		f.levels = map[string]int{}
	}
	f.levels[r.Method+" "+r.Header.Get("x-ms-consistency-level")]++

	switch {
	case path == "Tables" && r.Method == http.MethodPost:
		var req struct{ TableName string }
		if json.Unmarshal(body, &req) != nil || req.TableName == "" {
			fakeError(w, http.StatusBadRequest, "InvalidInput")
			return
		}
		if _, ok := f.tables[req.TableName]; ok {
			fakeError(w, http.StatusConflict, "TableAlreadyExists")
			return
		}
		f.tables[req.TableName] = map[string]*fakeEntity{}
		writeJSON(w, http.StatusCreated, map[string]string{"TableName": req.TableName})

	case strings.HasPrefix(path, "Tables('") && r.Method == http.MethodDelete:
		name := strings.TrimSuffix(strings.TrimPrefix(path, "Tables('"), "')")
		if _, ok := f.tables[name]; !ok {
			fakeError(w, http.StatusNotFound, "TableNotFound")
			return
		}
		delete(f.tables, name)
		w.WriteHeader(http.StatusNoContent)

	case path == "$batch":
		fakeError(w, http.StatusNotImplemented, "NotImplemented")

	case strings.HasSuffix(path, "()") && r.Method == http.MethodGet:
		f.query(w, r, strings.TrimSuffix(path, "()"))

	case entityPathRE.MatchString(path):
		m := entityPathRE.FindStringSubmatch(path)
		tbl, ok := f.tables[m[1]]
		if !ok {
			fakeError(w, http.StatusNotFound, "TableNotFound")
			return
		}
		key := m[2] + "\x00" + m[3]
		e := tbl[key]
		switch r.Method {
		case http.MethodGet:
			if e == nil {
				fakeError(w, http.StatusNotFound, "ResourceNotFound")
				return
			}
			w.Header().Set("ETag", e.etag)
			writeJSON(w, http.StatusOK, e.render())
		case http.MethodPut, http.MethodPatch: // replace or merge; without If-Match, an upsert
			ifMatch := r.Header.Get("If-Match")
			switch {
			case r.Method == http.MethodPut && ifMatch == "" && f.rejectUpserts:
				fakeError(w, http.StatusBadRequest, "InvalidInput")
				return
			case ifMatch != "" && e == nil:
				fakeError(w, http.StatusNotFound, "ResourceNotFound")
				return
			case ifMatch != "" && ifMatch != "*" && ifMatch != e.etag:
				fakeError(w, http.StatusPreconditionFailed, "UpdateConditionNotSatisfied")
				return
			}
			var props map[string]any
			if json.Unmarshal(body, &props) != nil {
				fakeError(w, http.StatusBadRequest, "InvalidInput")
				return
			}
			if r.Method == http.MethodPatch && e != nil {
				for k, v := range e.props {
					if _, ok := props[k]; !ok {
						props[k] = v
					}
				}
			}
			props["PartitionKey"], props["RowKey"] = m[2], m[3]
			etag := f.nextETag()
			if r.Method == http.MethodPatch {
				f.merges++
				tbl[key] = &fakeEntity{props: props, etag: etag}
			} else {
				f.replaces++
				if f.loseEvery == 0 || f.replaces%f.loseEvery != 0 {
					tbl[key] = &fakeEntity{props: props, etag: etag}
				}
			}
			w.Header().Set("ETag", etag)
			w.WriteHeader(http.StatusNoContent)
		default:
			fakeError(w, http.StatusMethodNotAllowed, "UnsupportedHttpVerb")
		}

	case r.Method == http.MethodPost: // insert into table `path`
		tbl, ok := f.tables[path]
		if !ok {
			fakeError(w, http.StatusNotFound, "TableNotFound")
			return
		}
		var props map[string]any
		if json.Unmarshal(body, &props) != nil {
			fakeError(w, http.StatusBadRequest, "InvalidInput")
			return
		}
		pk, _ := props["PartitionKey"].(string)
		rk, _ := props["RowKey"].(string)
		key := pk + "\x00" + rk
		if tbl[key] != nil {
			fakeError(w, http.StatusConflict, "EntityAlreadyExists")
			return
		}
		e := &fakeEntity{props: props, etag: f.nextETag()}
		tbl[key] = e
		w.Header().Set("ETag", e.etag)
		writeJSON(w, http.StatusCreated, e.render())

	default:
		fakeError(w, http.StatusBadRequest, "UnsupportedRequest")
	}
}

// query serves `PartitionKey eq '…'` filters in RowKey order, paging with
// x-ms-continuation headers.
func (f *fakeTables) query(w http.ResponseWriter, r *http.Request, table string) {
	tbl, ok := f.tables[table]
	if !ok {
		fakeError(w, http.StatusNotFound, "TableNotFound")
		return
	}
	if m := scanFilterRE.FindStringSubmatch(r.URL.Query().Get("$filter")); m != nil {
		f.scan(w, r, tbl, m[1], m[2])
		return
	}
	m := pkFilterRE.FindStringSubmatch(r.URL.Query().Get("$filter"))
	if m == nil {
		fakeError(w, http.StatusNotImplemented, "NotImplemented")
		return
	}
	var rks []string
	for _, e := range tbl {
		if e.props["PartitionKey"] == m[1] {
			rks = append(rks, e.props["RowKey"].(string))
		}
	}
	slices.Sort(rks)
	start := 0
	if next := r.URL.Query().Get("NextRowKey"); next != "" {
		start, _ = slices.BinarySearch(rks, next)
	}
	size := f.pageSize
	if size == 0 {
		size = 1000
	}
	end := min(len(rks), start+size)
	value := []map[string]any{}
	for _, rk := range rks[start:end] {
		value = append(value, tbl[m[1]+"\x00"+rk].render())
	}
	if end < len(rks) && !(f.dropLastPages && end+size >= len(rks)) {
		w.Header().Set("x-ms-continuation-NextPartitionKey", m[1])
		w.Header().Set("x-ms-continuation-NextRowKey", rks[end])
	}
	writeJSON(w, http.StatusOK, map[string]any{"value": value})
}

// tableCount reports how many tables exist.
func (f *fakeTables) tableCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.tables)
}

func (f *fakeTables) mergeCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.merges
}
