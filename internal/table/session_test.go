package table

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/odata"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

func TestParseToken(t *testing.T) {
	const h = "x-ms-session-token"
	for _, tc := range []struct {
		value string
		want  storage.Position
		bad   string // a fragment of the error message; "" when the value is accepted
	}{
		{"", 0, ""},
		{"   ", 0, ""},
		{",", 0, ""},
		{" , ,\t", 0, ""},
		{"1:pebble:0", 0, ""},
		{"1:pebble:42", 42, ""},
		{" 1:pebble:42\t", 42, ""},
		{"1:pebble:007", 7, ""},
		{"1:pebble:18446744073709551615", math.MaxUint64, ""},
		{"1:pebble:5,1:pebble:9,1:pebble:7", 9, ""},
		{"1:pebble:9, 1:pebble:5", 9, ""},
		{"1:pebble:3,,1:pebble:4,", 4, ""},

		{"1:pebble:18446744073709551616", 0, "does not end in a position"},
		{"1:pebble:", 0, "does not end in a position"},
		{"1:pebble:+5", 0, "does not end in a position"},
		{"1:pebble:-5", 0, "does not end in a position"},
		{"1:pebble:5 ", 5, ""}, // an element's surrounding spaces are trimmed
		{"1:pebble: 5", 0, "does not end in a position"},
		{"1:pebble:0x10", 0, "does not end in a position"},
		{"1:pebble:1_000", 0, "does not end in a position"},
		{"1:pebble:5:6", 0, "does not end in a position"},
		{"1:pebble", 0, "is not a session token this server issued"},
		{"1::5", 0, "is not a session token this server issued"},
		{"1:Pebble:5", 0, "is not a session token this server issued"},
		{"1: pebble:5", 0, "is not a session token this server issued"},
		{"2:pebble:5", 0, "is not a session token this server issued"},
		{"pebble:5", 0, "is not a session token this server issued"},
		{"42", 0, "is not a session token this server issued"},
		{"0:-2#1234", 0, "is not a session token this server issued"}, // a Cosmos DB (Dataverse) token
		{"1:postgres:5", 0, "issued by a server on the postgres engine, and this one runs on pebble"},
		{"1:pebble:5,junk", 0, "'junk' is not a session token"},
		{"junk,1:pebble:5", 0, "'junk' is not a session token"},
	} {
		got, err := ParseToken("pebble", h, tc.value)
		if tc.bad == "" {
			if err != nil || got != tc.want {
				t.Errorf("ParseToken(%q) = %d, %v; want %d", tc.value, got, err, tc.want)
			}
			continue
		}
		var e *azerr.Error
		if !errors.As(err, &e) {
			t.Errorf("ParseToken(%q) = %d, %v; want 400 InvalidHeaderValue", tc.value, got, err)
			continue
		}
		if e.Code != azerr.InvalidHeaderValue || e.Status != 400 || got != 0 ||
			!strings.Contains(e.Message, tc.bad) || !strings.Contains(e.Message, h) {
			t.Errorf("ParseToken(%q) = %d, %v; want 400 InvalidHeaderValue naming %s and saying %q", tc.value, got, err, h, tc.bad)
		}
		if len(e.Fields) != 2 || e.Fields[0] != (azerr.Field{Name: "HeaderName", Value: h}) || e.Fields[1] != (azerr.Field{Name: "HeaderValue", Value: tc.value}) {
			t.Errorf("ParseToken(%q) fields = %v, want HeaderName and HeaderValue", tc.value, e.Fields)
		}
	}
}

func TestFormatTokenRoundTrip(t *testing.T) {
	for _, p := range []storage.Position{0, 1, 1 << 32, math.MaxUint64} {
		for _, eng := range []string{"pebble", "postgres"} {
			tok := FormatToken(eng, p)
			if tok != "1:"+eng+":"+strconv.FormatUint(uint64(p), 10) {
				t.Errorf("FormatToken(%s, %d) = %q", eng, p, tok)
			}
			got, err := ParseToken(eng, "h", tok)
			if err != nil || got != p {
				t.Errorf("ParseToken(FormatToken(%s, %d)) = %d, %v", eng, p, got, err)
			}
		}
	}
}

// TestBadTokenQuotesShortly: a huge value is quoted in the error cut to a bounded length
// on a rune boundary, so the message stays readable and valid UTF-8.
func TestBadTokenQuotesShortly(t *testing.T) {
	value := "1:pebble:" + strings.Repeat("é", 300)
	_, err := ParseToken("pebble", "MSCRM.SessionToken", value)
	e, _ := azerr.As(err)
	if e.Code != azerr.InvalidHeaderValue || len(e.Message) > 2*maxQuoted+200 || !utf8.ValidString(e.Message) ||
		!strings.Contains(e.Message, "MSCRM.SessionToken") || !strings.HasSuffix(e.Fields[1].Value, "…") || !utf8.ValidString(e.Fields[1].Value) {
		t.Fatalf("error for a long token: %v %q", err, e.Fields)
	}
}

// FuzzParseToken: no panics; a value is refused only with 400 InvalidHeaderValue naming
// the header; an accepted value's position is the largest of its elements', and the
// token formatted from it parses back to it.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"", ",", "1:pebble:0", "1:pebble:42", "1:pebble:5, 1:pebble:9", "1:postgres:7",
		"1:pebble:18446744073709551615", "1:pebble:18446744073709551616", "2:pebble:1", "1:pebble:+1", "0:-2#99", "1:pebble:1,,x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		p, err := ParseToken("pebble", "x-ms-session-token", value)
		if err != nil {
			var e *azerr.Error
			if !errors.As(err, &e) || e.Code != azerr.InvalidHeaderValue || !strings.Contains(e.Message, "x-ms-session-token") {
				t.Fatalf("ParseToken(%q): %v", value, err)
			}
			return
		}
		var largest storage.Position
		for el := range strings.SplitSeq(value, ",") {
			if el = strings.Trim(el, " \t"); el != "" {
				q, err := ParseToken("pebble", "h", el)
				if err != nil {
					t.Fatalf("%q parses but its element %q does not: %v", value, el, err)
				}
				largest = max(largest, q)
			}
		}
		if p != largest {
			t.Fatalf("ParseToken(%q) = %d, want the largest element %d", value, p, largest)
		}
		if q, err := ParseToken("pebble", "h", FormatToken("pebble", p)); err != nil || q != p {
			t.Fatalf("round trip of %d: %d, %v", p, q, err)
		}
	})
}

// positionEngine stands for an engine that has committed up to a position: it reports
// positions from a counter, and its ReaderAt fails with ErrFuturePosition past it,
// recording each position asked for.
type positionEngine struct {
	storage.Engine
	pos   atomic.Uint64
	asked atomic.Uint64
	// views counts ReadView calls; last is the options of the last one.
	views atomic.Int64
	mu    sync.Mutex
	last  storage.ReadOptions
}

func (e *positionEngine) Apply(ctx context.Context, account, table, pk string, muts []storage.Mutation) (storage.Applied, error) {
	a, err := e.Engine.Apply(ctx, account, table, pk, muts)
	if err != nil {
		return a, err
	}
	a.Position = storage.Position(e.pos.Add(1))
	return a, nil
}

func (e *positionEngine) Position(ctx context.Context) (storage.Position, error) {
	return storage.Position(e.pos.Load()), nil
}

// ReadView records opts and returns a view of the latest state; it says it is served by
// "replica fake" at every level but Strong, so that tests see Source passed through.
func (e *positionEngine) ReadView(ctx context.Context, opts storage.ReadOptions) (storage.View, error) {
	e.views.Add(1)
	e.asked.Store(uint64(opts.At))
	e.mu.Lock()
	e.last = opts
	e.mu.Unlock()
	if uint64(opts.At) > e.pos.Load() {
		return nil, fmt.Errorf("view at %d: %w", opts.At, storage.ErrFuturePosition)
	}
	src := storage.SourcePrimary
	if opts.Consistency != storage.Strong {
		src = storage.ReplicaSource("fake")
	}
	return &fakeView{Reader: e.Engine, e: e, at: opts.At, src: src}, nil
}

func (e *positionEngine) lastOptions() storage.ReadOptions {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last
}

type fakeView struct {
	storage.Reader
	e   *positionEngine
	at  storage.Position
	src string
}

func (v *fakeView) Source() string { return v.src }
func (v *fakeView) Position() storage.Position {
	return max(v.at, storage.Position(v.e.pos.Load()))
}

func newPositionService(t *testing.T) (*Service, *positionEngine) {
	t.Helper()
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	pe := &positionEngine{Engine: eng}
	s := New(pe, nil)
	if err := s.CreateTable(t.Context(), "acct", "tbl", nil); err != nil {
		t.Fatal(err)
	}
	return s, pe
}

// TestWritesReportPositions: every write kind reports its commit's position (a batch one
// for all its operations) with its versions, and positions increase.
func TestWritesReportPositions(t *testing.T) {
	s, _ := newPositionService(t)
	ctx := t.Context()
	e := &entity.Entity{PartitionKey: "p", RowKey: "r", Props: []entity.Property{{Name: "N", Value: entity.Int32Value(1)}}}
	var last storage.Position
	check := func(what string, c Commit, err error, wantVersion bool) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if c.Position <= last || (c.Version != 0) != wantVersion {
			t.Fatalf("%s: %+v after position %d", what, c, last)
		}
		last = c.Position
	}
	c, err := s.InsertEntity(ctx, "acct", "tbl", e)
	check("insert", c, err, true)
	for _, w := range []struct {
		mode Mode
		cond Condition
	}{{ReplaceMode, Condition{}}, {MergeMode, Condition{}}, {ReplaceMode, Condition{Present: true, Any: true}}, {MergeMode, Condition{Present: true, Any: true}}} {
		c, err = s.WriteEntity(ctx, "acct", "tbl", e, w.mode, w.cond)
		check(fmt.Sprintf("write %v %+v", w.mode, w.cond), c, err, true)
	}
	c, err = s.DeleteEntity(ctx, "acct", "tbl", "p", "r", Condition{Present: true, Any: true})
	check("delete", c, err, false)
	a, err := s.Transact(ctx, "acct", "tbl", []BatchOp{{Op: storage.Insert, Entity: *e}, {Op: storage.InsertOrMerge, Entity: entity.Entity{PartitionKey: "p", RowKey: "r2"}}})
	if err != nil || len(a.Versions) != 2 || a.Versions[0] == 0 || a.Versions[1] == 0 || a.Position != last+1 {
		t.Fatalf("transact: %+v, %v after position %d", a, err, last)
	}
	// A failed write reports nothing.
	if c, err := s.InsertEntity(ctx, "acct", "tbl", e); err == nil || c != (Commit{}) {
		t.Fatalf("insert of an existing entity: %+v, %v", c, err)
	}
}

// TestReadsAtPosition: a read asks its view for the token's position; a position the engine has not reached is 503 ServerBusy saying the token is ahead,
// on Get and on every query path, and it does not mark the engine unhealthy.
func TestReadsAtPosition(t *testing.T) {
	s, pe := newPositionService(t)
	ctx := t.Context()
	c, err := s.InsertEntity(ctx, "acct", "tbl", &entity.Entity{PartitionKey: "p", RowKey: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetEntity(ctx, "acct", "tbl", "p", "r", Read{}); err != nil || pe.asked.Load() != 0 {
		t.Fatalf("get without a token: %v, asked %d", err, pe.asked.Load())
	}
	if _, _, err := s.GetEntity(ctx, "acct", "tbl", "p", "r", Read{Token: c.Position}); err != nil || pe.asked.Load() != uint64(c.Position) {
		t.Fatalf("get at the write's position: %v (asked %d)", err, pe.asked.Load())
	}
	queries := map[string]Query{
		"scan":  {},
		"point": {Filter: odata.MustParse("PartitionKey eq 'p' and RowKey eq 'r'")},
		"empty": {Filter: odata.MustParse("PartitionKey eq 'a' and PartitionKey eq 'b'")},
		"top0":  {Top: TopNone},
	}
	for name, q := range queries {
		q.Read.Token = c.Position
		page, err := s.QueryEntities(ctx, "acct", "tbl", q)
		if err != nil || (name == "scan" || name == "point") && len(page.Records) != 1 {
			t.Errorf("%s at the write's position: %d records, %v", name, len(page.Records), err)
		}
	}
	future := c.Position + 1
	checkFuture := func(what string, err error) {
		t.Helper()
		e, _ := azerr.As(err)
		if e.Code != azerr.ServerBusy || e.Status != 503 || !strings.Contains(e.Message, "session token is ahead") {
			t.Errorf("%s from the future: %v, want 503 ServerBusy saying the token is ahead", what, err)
		}
	}
	_, _, err = s.GetEntity(ctx, "acct", "tbl", "p", "r", Read{Token: future})
	checkFuture("get", err)
	for name, q := range queries {
		q.Read.Token = future
		_, err := s.QueryEntities(ctx, "acct", "tbl", q)
		checkFuture(name, err)
	}
	if ok, _ := s.Health(); !ok {
		t.Error("a token from the future marked the engine unreachable")
	}
	// Malformed continuations are still 400 before the wait.
	_, err = s.QueryEntities(ctx, "acct", "tbl", Query{Read: Read{Token: future}, NextPartitionKey: "x", NextRowKey: "y"})
	if e, _ := azerr.As(err); e.Code != azerr.InvalidInput {
		t.Errorf("bad continuation with a future token: %v", err)
	}
}

func TestServiceToken(t *testing.T) {
	s, _ := newPositionService(t)
	if tok := s.Token(12); tok != "1:pebble:12" {
		t.Fatalf("Token(12) = %q", tok)
	}
	if p, err := s.ParseToken("h", "1:pebble:12"); err != nil || p != 12 {
		t.Fatalf("ParseToken = %d, %v", p, err)
	}
}

// The per-request cost of tokens above the engine: one format per write, one parse per
// read that sends a token.
func BenchmarkFormatToken(b *testing.B) {
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = FormatToken("postgres", storage.Position(12076826296+i))
	}
}

func BenchmarkParseToken(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseToken("postgres", "x-ms-session-token", "1:postgres:12076826296"); err != nil {
			b.Fatal(err)
		}
	}
}
