package table

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/odata"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/svcprops"
)

// TestReadOptions: the rules by which a request's level, token and continuation position
// become the engine's ReadOptions.
func TestReadOptions(t *testing.T) {
	const (
		strong   = storage.Strong
		bounded  = storage.BoundedStaleness
		session  = storage.Session
		prefix   = storage.ConsistentPrefix
		eventual = storage.Eventual
	)
	for _, tc := range []struct {
		rd   Read
		cont storage.Position
		want storage.ReadOptions
	}{
		{Read{}, 0, storage.ReadOptions{}},
		{Read{Token: 7}, 0, storage.ReadOptions{At: 7}},
		{Read{Token: 7}, 9, storage.ReadOptions{At: 9}},
		{Read{Token: 9}, 7, storage.ReadOptions{At: 9}},
		{Read{}, 5, storage.ReadOptions{At: 5}},
		// Session without a token is Strong; with one it keeps its level.
		{Read{Consistency: session}, 0, storage.ReadOptions{Consistency: strong}},
		{Read{Consistency: session}, 4, storage.ReadOptions{Consistency: strong, At: 4}},
		{Read{Consistency: session, Token: 7}, 0, storage.ReadOptions{Consistency: session, At: 7}},
		{Read{Consistency: session, Token: 7}, 9, storage.ReadOptions{Consistency: session, At: 9}},
		{Read{Consistency: session, Token: 9}, 7, storage.ReadOptions{Consistency: session, At: 9}},
		// The weaker levels ignore the token but not the continuation.
		{Read{Consistency: bounded, Token: 7}, 0, storage.ReadOptions{Consistency: bounded}},
		{Read{Consistency: bounded, Token: 7}, 3, storage.ReadOptions{Consistency: bounded, At: 3}},
		{Read{Consistency: prefix, Token: 7}, 0, storage.ReadOptions{Consistency: prefix}},
		{Read{Consistency: prefix, Token: 7}, 9, storage.ReadOptions{Consistency: prefix, At: 9}},
		{Read{Consistency: eventual, Token: 7}, 0, storage.ReadOptions{Consistency: eventual}},
		{Read{Consistency: eventual}, 2, storage.ReadOptions{Consistency: eventual, At: 2}},
	} {
		if got := tc.rd.options(tc.cont); got != tc.want {
			t.Errorf("%+v.options(%d) = %+v, want %+v", tc.rd, tc.cont, got, tc.want)
		}
	}
}

// TestReadsOpenOneView: every read operation opens exactly one view with the options its
// Read gives, reads through it (the fake view's source shows), and reports its Source and
// Position; a request refused before reading opens none.
func TestReadsOpenOneView(t *testing.T) {
	s, pe := newPositionService(t)
	ctx := t.Context()
	c, err := s.InsertEntity(ctx, "acct", "tbl", &entity.Entity{PartitionKey: "p", RowKey: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetTableACL(ctx, "acct", "tbl", nil); err != nil {
		t.Fatal(err)
	}
	type op func(Read) (Served, error)
	ops := map[string]op{
		"get": func(rd Read) (Served, error) {
			_, sv, err := s.GetEntity(ctx, "acct", "tbl", "p", "r", rd)
			return sv, err
		},
		"getTable": func(rd Read) (Served, error) {
			_, sv, err := s.GetTable(ctx, "acct", "TBL", rd)
			return sv, err
		},
		"tableSettings": func(rd Read) (Served, error) {
			_, sv, err := s.TableSettings(ctx, "acct", "tbl", rd)
			return sv, err
		},
		"listTables": func(rd Read) (Served, error) {
			p, err := s.ListTables(ctx, "acct", nil, "", 0, rd)
			if err == nil && len(p.Tables) != 1 {
				err = fmt.Errorf("%d tables", len(p.Tables))
			}
			return p.Served, err
		},
		"listTablesTop0": func(rd Read) (Served, error) {
			p, err := s.ListTables(ctx, "acct", nil, "", TopNone, rd)
			return p.Served, err
		},
		"acl": func(rd Read) (Served, error) {
			_, sv, err := s.TableACL(ctx, "acct", "tbl", rd)
			return sv, err
		},
		"serviceProperties": func(rd Read) (Served, error) {
			_, sv, err := s.ReadServiceProperties(ctx, "acct", rd)
			return sv, err
		},
	}
	for name, q := range map[string]Query{
		"scan":  {},
		"point": {Filter: odata.MustParse("PartitionKey eq 'p' and RowKey eq 'r'")},
		"empty": {Filter: odata.MustParse("PartitionKey eq 'a' and PartitionKey eq 'b'")},
		"top0":  {Top: TopNone},
	} {
		ops["query "+name] = func(rd Read) (Served, error) {
			q.Read = rd
			p, err := s.QueryEntities(ctx, "acct", "tbl", q)
			return p.Served, err
		}
	}
	reads := []struct {
		rd      Read
		want    storage.ReadOptions
		replica bool
	}{
		{Read{}, storage.ReadOptions{}, false},
		{Read{Token: c.Position}, storage.ReadOptions{At: c.Position}, false},
		{Read{Consistency: storage.Session}, storage.ReadOptions{}, false},
		{Read{Consistency: storage.Session, Token: c.Position}, storage.ReadOptions{Consistency: storage.Session, At: c.Position}, true},
		{Read{Consistency: storage.Eventual, Token: c.Position}, storage.ReadOptions{Consistency: storage.Eventual}, true},
		{Read{Consistency: storage.BoundedStaleness}, storage.ReadOptions{Consistency: storage.BoundedStaleness}, true},
	}
	for name, o := range ops {
		for _, r := range reads {
			before := pe.views.Load()
			sv, err := o(r.rd)
			if err != nil {
				t.Errorf("%s %+v: %v", name, r.rd, err)
				continue
			}
			if n := pe.views.Load() - before; n != 1 {
				t.Errorf("%s %+v opened %d views, want 1", name, r.rd, n)
			}
			if got := pe.lastOptions(); got != r.want {
				t.Errorf("%s %+v asked for %+v, want %+v", name, r.rd, got, r.want)
			}
			wantSrc := storage.SourcePrimary
			if r.replica {
				wantSrc = storage.ReplicaSource("fake")
			}
			if sv.Source != wantSrc || sv.Position != storage.Position(pe.pos.Load()) {
				t.Errorf("%s %+v served %+v, want %s at %d", name, r.rd, sv, wantSrc, pe.pos.Load())
			}
		}
	}
	// Refused before any read: no view.
	before := pe.views.Load()
	if _, err := s.QueryEntities(ctx, "acct", "tbl", Query{NextPartitionKey: "x", NextRowKey: "y"}); err == nil {
		t.Error("bad continuation accepted")
	}
	if _, err := s.ListTables(ctx, "acct", nil, "1!2!cA!x", 0, Read{}); err == nil {
		t.Error("bad table continuation accepted")
	}
	if err := s.CreateTable(ctx, "acct", "tbl2", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InsertEntity(ctx, "acct", "tbl", &entity.Entity{PartitionKey: "p", RowKey: "r2"}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateServiceProperties(ctx, "acct", svcprops.PropertiesUpdate{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ServiceProperties(ctx, "acct"); err != nil {
		t.Fatal(err)
	}
	if n := pe.views.Load() - before; n != 0 {
		t.Errorf("refused reads, writes and latest-state reads opened %d views", n)
	}
}

// TestContinuationCarriesPosition: a page's continuation (NextRowKey, NextTableName)
// carries the page's position, and the next page asks for it at every level, with or
// without a token, the larger of the two where the level honours the token.
func TestContinuationCarriesPosition(t *testing.T) {
	s, pe := newPositionService(t)
	ctx := t.Context()
	for i := range 3 {
		if _, err := s.InsertEntity(ctx, "acct", "tbl", &entity.Entity{PartitionKey: "p", RowKey: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateTable(ctx, "acct", fmt.Sprintf("more%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, level := range []storage.Consistency{storage.Strong, storage.Session, storage.Eventual, storage.BoundedStaleness, storage.ConsistentPrefix} {
		rd := Read{Consistency: level, Token: 1}
		page, err := s.QueryEntities(ctx, "acct", "tbl", Query{Top: 1, Read: rd})
		if err != nil || page.NextRowKey == "" {
			t.Fatalf("%v: first page: %+v, %v", level, page, err)
		}
		pos := page.Served.Position
		if _, p, err := decodeToken(page.NextRowKey); err != nil || p != pos || pos == 0 {
			t.Fatalf("%v: NextRowKey %q carries %d, %v; want the page's position %d", level, page.NextRowKey, p, err, pos)
		}
		if _, p, _ := decodeToken(page.NextPartitionKey); p != 0 {
			t.Errorf("%v: NextPartitionKey %q carries a position", level, page.NextPartitionKey)
		}
		// Writes go on; the next page asks for at least the first page's position.
		if _, err := s.InsertEntity(ctx, "acct", "tbl", &entity.Entity{PartitionKey: "q", RowKey: level.String()}); err != nil {
			t.Fatal(err)
		}
		page2, err := s.QueryEntities(ctx, "acct", "tbl", Query{Top: 1, Read: rd, NextPartitionKey: page.NextPartitionKey, NextRowKey: page.NextRowKey})
		if err != nil || len(page2.Records) != 1 || page2.Records[0].Entity.RowKey != "1" {
			t.Fatalf("%v: second page: %+v, %v", level, page2, err)
		}
		if got := pe.lastOptions(); got.At != pos {
			t.Errorf("%v: second page asked for %+v, want At %d", level, got, pos)
		}
		if page2.Served.Position < pos {
			t.Errorf("%v: second page served at %d, before the first's %d", level, page2.Served.Position, pos)
		}

		tp, err := s.ListTables(ctx, "acct", nil, "", 1, rd)
		if err != nil || tp.NextTableName == "" {
			t.Fatalf("%v: first table page: %+v, %v", level, tp, err)
		}
		if _, p, err := decodeToken(tp.NextTableName); err != nil || p != tp.Served.Position {
			t.Fatalf("%v: NextTableName %q carries %d, %v; want %d", level, tp.NextTableName, p, err, tp.Served.Position)
		}
		if _, err := s.ListTables(ctx, "acct", nil, tp.NextTableName, 1, rd); err != nil {
			t.Fatal(err)
		}
		if got := pe.lastOptions(); got.At != tp.Served.Position {
			t.Errorf("%v: second table page asked for %+v, want At %d", level, got, tp.Served.Position)
		}
	}
	// A continuation whose position the engine has not reached is 503, as a token's.
	future := storage.Position(pe.pos.Load() + 100)
	_, err := s.QueryEntities(ctx, "acct", "tbl", Query{NextPartitionKey: encodeToken("p", 0), NextRowKey: encodeToken("1", future), Read: Read{Consistency: storage.Eventual}})
	if e, _ := azerr.As(err); e.Code != azerr.ServerBusy {
		t.Errorf("continuation from the future: %v, want 503 ServerBusy", err)
	}
}

// TestContinuationTokens: the token form with and without a position; tokens without
// one (issued before positions) decode as position 0; a malformed position is the 400
// of any bad token.
func TestContinuationTokens(t *testing.T) {
	for _, tc := range []struct {
		key string
		pos storage.Position
		tok string
	}{
		{"", 0, "1!0!"},
		{"", 9, "1!0!!9"},
		{"p", 0, "1!2!cA"},
		{"p", 12076826296, "1!2!cA!12076826296"},
		{"a!b", 1, "1!4!YSFi!1"},
		{"x", 18446744073709551615, "1!2!eA!18446744073709551615"},
	} {
		if got := encodeToken(tc.key, tc.pos); got != tc.tok {
			t.Errorf("encodeToken(%q, %d) = %q, want %q", tc.key, tc.pos, got, tc.tok)
		}
		if k, p, err := decodeToken(tc.tok); err != nil || k != tc.key || p != tc.pos {
			t.Errorf("decodeToken(%q) = %q, %d, %v", tc.tok, k, p, err)
		}
	}
	// Accepted as before positions (not in the canonical form, but harmless).
	if k, p, err := decodeToken("1!2!cA!0"); err != nil || k != "p" || p != 0 {
		t.Errorf("decodeToken(position 0) = %q, %d, %v", k, p, err)
	}
	for _, tok := range []string{
		"", "garbage", "2!2!cA", "1!2!cA!", "1!2!cA!x", "1!2!cA!-1", "1!2!cA!+1", "1!2!cA! 1", "1!2!cA!1!2",
		"1!2!cA!18446744073709551616", "1!2!cA!1_0", "1!2!cAx", "1!3!cA", "1!2!cA!1.5", "1!1!c", "1!x!cA", "1!-1!cA",
	} {
		if k, p, err := decodeToken(tok); err == nil {
			t.Errorf("decodeToken(%q) = %q, %d; want an error", tok, k, p)
		}
	}
	// Through the service: the same 400 whatever part is wrong.
	s, _ := newPositionService(t)
	ctx := t.Context()
	for _, rk := range []string{"1!2!cA!x", "1!2!cA!", "1!2!cA!99999999999999999999999"} {
		_, err := s.QueryEntities(ctx, "acct", "tbl", Query{NextPartitionKey: "1!2!cA", NextRowKey: rk})
		if e, _ := azerr.As(err); e.Code != azerr.InvalidInput || e.Message != "The continuation token is not valid." {
			t.Errorf("NextRowKey %q: %v, want 400 InvalidInput", rk, err)
		}
		_, err = s.ListTables(ctx, "acct", nil, rk, 0, Read{})
		if e, _ := azerr.As(err); e.Code != azerr.InvalidInput || e.Message != "The continuation token is not valid." {
			t.Errorf("NextTableName %q: %v, want 400 InvalidInput", rk, err)
		}
	}
}

// FuzzContinuationToken: no panics; an accepted token decodes to a key and position that
// encode back to it, up to the non-canonical forms decodeToken tolerates (a position
// written as 0, a count with a sign or leading zeros); what encodeToken writes always
// decodes to what it was given.
func FuzzContinuationToken(f *testing.F) {
	for _, s := range []string{"", "1!0!", "1!0!!9", "1!2!cA", "1!2!cA!12", "1!2!cA!", "1!2!cA!x", "1!+2!cA", "1!02!cA!0",
		"1!4!YSFi!18446744073709551615", "1!2!cA!18446744073709551616", "2!2!cA"} {
		f.Add(s, uint64(0))
	}
	f.Add("p", uint64(12076826296))
	f.Fuzz(func(t *testing.T, tok string, pos uint64) {
		if k, p, err := decodeToken(tok); err == nil {
			re := encodeToken(k, p)
			if k2, p2, err := decodeToken(re); err != nil || k2 != k || p2 != p {
				t.Fatalf("decode(%q) = %q, %d; its encoding %q decodes to %q, %d, %v", tok, k, p, re, k2, p2, err)
			}
			b, _ := base64.RawURLEncoding.DecodeString(strings.Split(strings.TrimPrefix(re, "1!"), "!")[1])
			if string(b) != k {
				t.Fatalf("encoding of %q is %q", k, re)
			}
		} else if err != errBadToken {
			t.Fatalf("decode(%q): %v", tok, err)
		}
		// tok as a key.
		enc := encodeToken(tok, storage.Position(pos))
		if k, p, err := decodeToken(enc); err != nil || k != tok || p != storage.Position(pos) {
			t.Fatalf("encodeToken(%q, %d) = %q decodes to %q, %d, %v", tok, pos, enc, k, p, err)
		}
	})
}
