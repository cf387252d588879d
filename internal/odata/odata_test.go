package odata

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// ------------------------------------------------------------ test data files

type dataLine struct {
	no   int
	text string
}

// readData returns the non-blank, non-comment lines of a testdata file.
func readData(t *testing.T, name string) []dataLine {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []dataLine
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || s[0] == '#' {
			continue
		}
		out = append(out, dataLine{n, s})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// splitCase splits "<filter> => <expect>" at the first " => " outside a quoted literal,
// or at the last one when the quotes never balance.
func splitCase(s string) (filter, expect string, ok bool) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\'':
			quoted = !quoted
		case !quoted && strings.HasPrefix(s[i:], " => "):
			return strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+4:]), true
		}
	}
	// An unterminated literal (an error case): fall back to the last separator.
	if i := strings.LastIndex(s, " => "); i >= 0 {
		return strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+4:]), true
	}
	return "", "", false
}

// checkParseError asserts err is the 400 InvalidInput every parse failure must be, with
// detail containing want.
func checkParseError(t *testing.T, where string, err error, want string) {
	t.Helper()
	var ae *azerr.Error
	if !errors.As(err, &ae) {
		t.Errorf("%s: error %v (%T) is not an *azerr.Error", where, err, err)
		return
	}
	if ae.Code != azerr.InvalidInput || ae.Status != 400 || ae.Message != syntaxMessage {
		t.Errorf("%s: error %+v; want 400 InvalidInput %q", where, ae, syntaxMessage)
	}
	if !strings.Contains(ae.Detail, want) {
		t.Errorf("%s: detail %q does not contain %q", where, ae.Detail, want)
	}
}

// ------------------------------------------------------------ entity specs

type testEntity struct {
	name string
	e    entity.Entity
	ts   int64
	enc  []byte
}

// readSpecValue reads one value of an entity spec at s[i]: a filter literal, or NaN,
// +Inf, -Inf.
func readSpecValue(s string, i int) (entity.Value, int, error) {
	for _, sp := range []struct {
		text string
		v    float64
	}{{"NaN", math.NaN()}, {"+Inf", math.Inf(1)}, {"-Inf", math.Inf(-1)}} {
		if strings.HasPrefix(s[i:], sp.text) {
			return entity.DoubleValue(sp.v), i + len(sp.text), nil
		}
	}
	switch {
	case strings.HasPrefix(s[i:], "true"):
		return entity.BoolValue(true), i + 4, nil
	case strings.HasPrefix(s[i:], "false"):
		return entity.BoolValue(false), i + 5, nil
	case s[i] == '\'':
		str, next, err := lexQuoted(s, i)
		return entity.StringValue(str), next, err
	case s[i] == '-' || isDigit(s[i]):
		return lexNumber(s, i)
	}
	j := strings.IndexByte(s[i:], '\'')
	if j < 0 {
		return entity.Value{}, 0, fmt.Errorf("bad value at %q", s[i:])
	}
	return lexPrefixed(s, i, i+j)
}

// parseEntity parses "entity <Name> <Prop>=<value> ...".
func parseEntity(s string) (testEntity, error) {
	rest := strings.TrimPrefix(s, "entity ")
	name, rest, _ := strings.Cut(strings.TrimSpace(rest), " ")
	te := testEntity{name: name, e: entity.Entity{PartitionKey: "p", RowKey: name}}
	i := 0
	for {
		for i < len(rest) && rest[i] == ' ' {
			i++
		}
		if i == len(rest) {
			break
		}
		eq := strings.IndexByte(rest[i:], '=')
		if eq < 0 {
			return te, fmt.Errorf("no '=' in %q", rest[i:])
		}
		prop := rest[i : i+eq]
		v, next, err := readSpecValue(rest, i+eq+1)
		if err != nil {
			return te, fmt.Errorf("%s: %v", prop, err)
		}
		i = next
		switch prop {
		case "PartitionKey":
			te.e.PartitionKey = v.Str
		case "RowKey":
			te.e.RowKey = v.Str
		case "Timestamp":
			te.ts = v.Int
		default:
			te.e.Props = append(te.e.Props, entity.Property{Name: prop, Value: v})
		}
	}
	te.enc = entity.AppendProps(nil, te.e.Props)
	return te, nil
}

func keyOf(te testEntity) storage.Key {
	return storage.Key{PartitionKey: te.e.PartitionKey, RowKey: te.e.RowKey}
}

func inRanges(rs []KeyRange, k storage.Key) bool {
	for _, r := range rs {
		if r.Contains(k) {
			return true
		}
	}
	return false
}

// matchSet evaluates f on every entity, checking the invariants that tie Match,
// MatchEncoded, KeyRanges and Exact together, and returns the names that match.
func matchSet(t *testing.T, where string, f *Filter, set []testEntity) []string {
	t.Helper()
	var names []string
	for _, te := range set {
		m := f.Match(&te.e, te.ts)
		me, err := f.MatchEncoded(te.e.PartitionKey, te.e.RowKey, te.ts, te.enc)
		if err != nil || me != m {
			t.Errorf("%s: entity %s: Match %v, MatchEncoded %v, %v", where, te.name, m, me, err)
		}
		in := inRanges(f.KeyRanges(), keyOf(te))
		if m && !in {
			t.Errorf("%s: entity %s matches but its key is outside %v", where, te.name, f.KeyRanges())
		}
		if f.Exact() && in && !m {
			t.Errorf("%s: Exact, entity %s is in %v but does not match", where, te.name, f.KeyRanges())
		}
		if m {
			names = append(names, te.name)
		}
	}
	return names
}

// ------------------------------------------------------------ the data-driven tests

func TestFilters(t *testing.T) {
	var set []testEntity
	fresh := true // the next entity line starts a new set
	cases := 0
	for _, l := range readData(t, "filters.txt") {
		where := fmt.Sprintf("filters.txt:%d", l.no)
		if strings.HasPrefix(l.text, "entity ") {
			if fresh {
				set, fresh = nil, false
			}
			te, err := parseEntity(l.text)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			set = append(set, te)
			continue
		}
		fresh = true
		cases++
		src, expect, ok := splitCase(l.text)
		if !ok {
			t.Fatalf("%s: no \" => \" in %q", where, l.text)
		}
		where += ": " + src
		f, err := Parse(src)
		if want, isErr := strings.CutPrefix(expect, "error "); isErr {
			if err == nil {
				t.Errorf("%s: parsed as %q; want error %q", where, f, want)
				continue
			}
			checkParseError(t, where, err, want)
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		var want []string
		switch expect {
		case "-":
		case "*":
			for _, te := range set {
				want = append(want, te.name)
			}
		default:
			want = strings.Fields(expect)
		}
		got := matchSet(t, where, f, set)
		if !slices.Equal(got, want) {
			t.Errorf("%s: matches %v; want %v", where, got, want)
		}
		g, err := Parse(f.String())
		if err != nil {
			t.Errorf("%s: canonical %q does not parse: %v", where, f, err)
			continue
		}
		if again := matchSet(t, where+" (canonical)", g, set); !slices.Equal(again, got) {
			t.Errorf("%s: canonical %q matches %v; original %v", where, g, again, got)
		}
	}
	t.Logf("%d filter cases", cases)
}

func TestSyntax(t *testing.T) {
	cases := 0
	for _, l := range readData(t, "syntax.txt") {
		cases++
		where := fmt.Sprintf("syntax.txt:%d", l.no)
		src, expect, ok := splitCase(l.text)
		if !ok {
			t.Fatalf("%s: no \" => \" in %q", where, l.text)
		}
		where += ": " + src
		f, err := Parse(src)
		if want, isErr := strings.CutPrefix(expect, "error "); isErr {
			if err == nil {
				t.Errorf("%s: parsed as %q; want error %q", where, f, want)
				continue
			}
			checkParseError(t, where, err, want)
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		if got := f.String(); got != expect {
			t.Errorf("%s: String() = %q; want %q", where, got, expect)
		}
		checkRoundTrip(t, where, f)
	}
	t.Logf("%d syntax cases", cases)
}

// checkRoundTrip asserts the canonical text parses to an equal tree that prints the same.
func checkRoundTrip(t *testing.T, where string, f *Filter) {
	t.Helper()
	g, err := Parse(f.String())
	if err != nil {
		t.Errorf("%s: canonical %q does not parse: %v", where, f, err)
		return
	}
	if !reflect.DeepEqual(f.Expr(), g.Expr()) {
		t.Errorf("%s: canonical %q parses to a different tree", where, f)
	}
	if g.String() != f.String() {
		t.Errorf("%s: canonical %q prints as %q", where, f, g)
	}
}

// parseRanges reads the expectation of plan.txt.
func parseRanges(s string) ([]KeyRange, bool, error) {
	s = strings.TrimSpace(s)
	var exact bool
	switch {
	case strings.HasSuffix(s, " exact"):
		exact, s = true, strings.TrimSuffix(s, " exact")
	case strings.HasSuffix(s, " residual"):
		s = strings.TrimSuffix(s, " residual")
	default:
		return nil, false, fmt.Errorf("no exact/residual in %q", s)
	}
	if s == "none" {
		return []KeyRange{}, exact, nil
	}
	key := func(s string) (storage.Key, string, error) {
		s = strings.TrimSpace(s)
		var k storage.Key
		if !strings.HasPrefix(s, "(") {
			return k, "", fmt.Errorf("want ( at %q", s)
		}
		q, err := strconv.QuotedPrefix(s[1:])
		if err != nil {
			return k, "", err
		}
		k.PartitionKey, _ = strconv.Unquote(q)
		s = s[1+len(q):]
		if !strings.HasPrefix(s, ",") {
			return k, "", fmt.Errorf("want , at %q", s)
		}
		q, err = strconv.QuotedPrefix(s[1:])
		if err != nil {
			return k, "", err
		}
		k.RowKey, _ = strconv.Unquote(q)
		s = s[1+len(q):]
		if !strings.HasPrefix(s, ")") {
			return k, "", fmt.Errorf("want ) at %q", s)
		}
		return k, s[1:], nil
	}
	var out []KeyRange
	for s != "" {
		start, rest, err := key(s)
		if err != nil {
			return nil, false, err
		}
		rest, ok := strings.CutPrefix(rest, "..")
		if !ok {
			return nil, false, fmt.Errorf("want .. at %q", rest)
		}
		r := KeyRange{Start: start}
		if after, ok := strings.CutPrefix(rest, "end"); ok {
			rest = after
		} else {
			end, after, err := key(rest)
			if err != nil {
				return nil, false, err
			}
			r.End, rest = &end, after
		}
		out = append(out, r)
		s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest), ";"))
	}
	return out, exact, nil
}

func TestPlan(t *testing.T) {
	cases := 0
	for _, l := range readData(t, "plan.txt") {
		cases++
		where := fmt.Sprintf("plan.txt:%d", l.no)
		src, expect, ok := splitCase(l.text)
		if !ok {
			t.Fatalf("%s: no \" => \" in %q", where, l.text)
		}
		want, exact, err := parseRanges(expect)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		where += ": " + src
		f, err := Parse(src)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		if got := f.KeyRanges(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: KeyRanges = %v; want %v", where, got, want)
		}
		if f.Exact() != exact {
			t.Errorf("%s: Exact = %v; want %v", where, f.Exact(), exact)
		}
		// IsPoint agrees with the ranges.
		pk, rk, ok := f.IsPoint()
		isPoint := len(want) == 1 && want[0].End != nil &&
			*want[0].End == storage.Key{PartitionKey: want[0].Start.PartitionKey, RowKey: want[0].Start.RowKey + "\x00"}
		if ok != isPoint || ok && (storage.Key{PartitionKey: pk, RowKey: rk}) != want[0].Start {
			t.Errorf("%s: IsPoint = %q, %q, %v", where, pk, rk, ok)
		}
	}
	t.Logf("%d plan cases", cases)
}

// ------------------------------------------------------------ Go-table tests

func TestLiterals(t *testing.T) {
	g := func(s string) entity.Value {
		b, err := entity.ParseGUID(s)
		if err != nil {
			t.Fatal(err)
		}
		return entity.Value{Type: entity.GUID, Bytes: b}
	}
	dt := func(s string) entity.Value {
		ticks, err := entity.ParseDateTime(s)
		if err != nil {
			t.Fatal(err)
		}
		return entity.Value{Type: entity.DateTime, Int: ticks}
	}
	cases := []struct {
		lit  string
		want entity.Value
	}{
		{`'x'`, entity.StringValue("x")},
		{`''`, entity.StringValue("")},
		{`''''`, entity.StringValue("'")},
		{`'O''Neil'`, entity.StringValue("O'Neil")},
		{`'a''''b'`, entity.StringValue("a''b")},
		{`'tab	in'`, entity.StringValue("tab\tin")},
		{`'ü😀'`, entity.StringValue("ü😀")},
		{`'\x'`, entity.StringValue(`\x`)},
		{`'%27'`, entity.StringValue("%27")},
		{`0`, entity.Int32Value(0)},
		{`123`, entity.Int32Value(123)},
		{`-5`, entity.Int32Value(-5)},
		{`2147483647`, entity.Int32Value(math.MaxInt32)},
		{`-2147483648`, entity.Int32Value(math.MinInt32)},
		{`123L`, entity.Int64Value(123)},
		{`123l`, entity.Int64Value(123)},
		{`-5L`, entity.Int64Value(-5)},
		{`5454161346626L`, entity.Int64Value(5454161346626)},
		{`9223372036854775807L`, entity.Int64Value(math.MaxInt64)},
		{`-9223372036854775808L`, entity.Int64Value(math.MinInt64)},
		{`1.5`, entity.DoubleValue(1.5)},
		{`2.0`, entity.DoubleValue(2)},
		{`1e10`, entity.DoubleValue(1e10)},
		{`1E10`, entity.DoubleValue(1e10)},
		{`1.5E+3`, entity.DoubleValue(1500)},
		{`1.5e-3`, entity.DoubleValue(0.0015)},
		{`-0.5`, entity.DoubleValue(-0.5)},
		{`2d`, entity.DoubleValue(2)},
		{`2D`, entity.DoubleValue(2)},
		{`1.25d`, entity.DoubleValue(1.25)},
		{`true`, entity.BoolValue(true)},
		{`false`, entity.BoolValue(false)},
		{`TRUE`, entity.BoolValue(true)},
		{`datetime'2008-07-10T00:00:00Z'`, dt("2008-07-10T00:00:00Z")},
		{`datetime'2008-07-10T00:00:00.123Z'`, dt("2008-07-10T00:00:00.123Z")},
		{`datetime'2008-07-10T00:00:00.1234567Z'`, dt("2008-07-10T00:00:00.1234567Z")},
		{`datetime'2008-07-10T02:00:00+02:00'`, dt("2008-07-10T00:00:00Z")},
		{`guid'a455c695-df98-5678-aaaa-81d3367e5a34'`, g("a455c695-df98-5678-aaaa-81d3367e5a34")},
		{`guid'A455C695-DF98-5678-AAAA-81D3367E5A34'`, g("a455c695-df98-5678-aaaa-81d3367e5a34")},
		{`X'0A0B'`, entity.BinaryValue([]byte{0x0a, 0x0b})},
		{`binary'0a0b'`, entity.BinaryValue([]byte{0x0a, 0x0b})},
		{`X''`, entity.BinaryValue([]byte{})},
	}
	for _, c := range cases {
		f, err := Parse("V eq " + c.lit)
		if err != nil {
			t.Errorf("%s: %v", c.lit, err)
			continue
		}
		got := f.Expr().(*CompareExpr).Right.Literal
		if !got.Equal(c.want) {
			t.Errorf("%s = %v (%v); want %v (%v)", c.lit, got, got.Type, c.want, c.want.Type)
		}
		checkRoundTrip(t, c.lit, f)
	}
	// -0.0 keeps its sign through String().
	f := MustParse("V eq -0.0")
	if v := f.Expr().(*CompareExpr).Right.Literal; !math.Signbit(v.Float) {
		t.Errorf("-0.0 lost its sign: %v", v)
	}
	if s := f.String(); s != "V eq -0.0" {
		t.Errorf("String() = %q", s)
	}
}

func TestWhitespaceAndBytes(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"A eq 1\tand\nB eq 2\r\n", "A eq 1 and B eq 2"},
		{"\tA\teq\t'x y'", "A eq 'x y'"},
		{"A eq 'nul\x00inside'", "A eq 'nul\x00inside'"},
		{"A eq '\xff\xfe'", "A eq '\xff\xfe'"}, // string literals are bytes
	} {
		f, err := Parse(c.src)
		if err != nil {
			t.Errorf("%q: %v", c.src, err)
			continue
		}
		if f.String() != c.want {
			t.Errorf("%q: String() = %q; want %q", c.src, f, c.want)
		}
		checkRoundTrip(t, c.src, f)
	}
	for _, c := range []struct{ src, want string }{
		{"A eq 1 \xff", "position 7: invalid UTF-8 byte 0xff"},
		{"A\x00 eq 1", "position 1: unexpected character '\\x00'"},
		{"A eq 1\u00a0", "position 6: unexpected character"},
		{"A eq 1 and B eq 2\v", "unexpected character"},
	} {
		_, err := Parse(c.src)
		checkParseError(t, fmt.Sprintf("%q", c.src), err, c.want)
	}
}

func TestEmptyFilter(t *testing.T) {
	for _, s := range []string{"", " ", "\t\r\n "} {
		f, err := Parse(s)
		if f != nil || err != nil {
			t.Errorf("Parse(%q) = %v, %v; want nil, nil", s, f, err)
		}
	}
	var f *Filter
	e := entity.Entity{PartitionKey: "p", RowKey: "r"}
	if !f.Match(&e, 0) || !f.MatchTableName("t") || !f.Exact() || f.String() != "" || f.Expr() != nil || f.Properties() != nil {
		t.Error("the nil Filter must match everything")
	}
	if ok, err := f.MatchEncoded("p", "r", 0, nil); !ok || err != nil {
		t.Error("the nil Filter must match everything (encoded)")
	}
	if rs := f.KeyRanges(); len(rs) != 1 || rs[0].Start != (storage.Key{}) || rs[0].End != nil {
		t.Errorf("nil KeyRanges = %v", rs)
	}
	if _, _, ok := f.IsPoint(); ok {
		t.Error("nil IsPoint")
	}
	if from, to := f.TableKeyRange(); from != "" || to != nil {
		t.Error("nil TableKeyRange")
	}
}

func TestLimits(t *testing.T) {
	deep := func(n int, open, close string) string {
		return strings.Repeat(open, n) + "A eq 1" + strings.Repeat(close, n)
	}
	if _, err := Parse(deep(MaxDepth, "(", ")")); err != nil {
		t.Errorf("depth %d: %v", MaxDepth, err)
	}
	_, err := Parse(deep(MaxDepth+1, "(", ")"))
	checkParseError(t, "parentheses", err, "nesting deeper than 100")
	if _, err := Parse(deep(MaxDepth, "not ", "")); err != nil {
		t.Errorf("not depth %d: %v", MaxDepth, err)
	}
	_, err = Parse(deep(MaxDepth+1, "not ", ""))
	checkParseError(t, "nots", err, "nesting deeper than 100")
	_, err = Parse(deep(60, "not (", ")"))
	checkParseError(t, "mixed", err, "nesting deeper than 100")
	// A million parentheses fail fast instead of overflowing the stack.
	_, err = Parse(deep(1_000_000, "(", ")"))
	checkParseError(t, "million", err, "nesting deeper")

	chain := func(n int) string {
		terms := make([]string, n)
		for i := range terms {
			terms[i] = fmt.Sprintf("RowKey eq 'r%04d'", i)
		}
		return "PartitionKey eq 'p' and (" + strings.Join(terms, " or ") + ")"
	}
	f, err := Parse(chain(MaxPredicates - 1))
	if err != nil {
		t.Fatalf("%d comparisons: %v", MaxPredicates, err)
	}
	if got := len(f.KeyRanges()); got != MaxPredicates-1 || !f.Exact() {
		t.Errorf("long or-chain: %d ranges, exact %v", got, f.Exact())
	}
	_, err = Parse(chain(MaxPredicates))
	checkParseError(t, "too many", err, "more than 1000 comparisons")
}

func TestSelect(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		err  string
	}{
		{in: "", want: nil},
		{in: "  ", want: nil},
		{in: "*", want: nil},
		{in: " * ", want: nil},
		{in: "A,*", want: nil},
		{in: "A", want: []string{"A"}},
		{in: "PartitionKey, RowKey", want: []string{"PartitionKey", "RowKey"}},
		{in: "A,B,C", want: []string{"A", "B", "C"}},
		{in: " A , B ", want: []string{"A", "B"}},
		{in: "A,B,A", want: []string{"A", "B"}},
		{in: "Timestamp,_x,Název", want: []string{"Timestamp", "_x", "Název"}},
		{in: "A,,B", err: "item 2 of $select is empty"},
		{in: "A,", err: "item 2 of $select is empty"},
		{in: ",A", err: "item 1 of $select is empty"},
		{in: "A B", err: `"A B" is not a valid property name`},
		{in: "1A", err: `"1A" is not a valid property name`},
		{in: "A-B", err: "not a valid property name"},
		{in: "odata.etag", err: "not a valid property name"},
		{in: "A/B", err: "not a valid property name"},
		{in: "'A'", err: "not a valid property name"},
		{in: strings.Repeat("x", 256), err: "longer than 255"},
	} {
		got, err := ParseSelect(c.in)
		if c.err != "" {
			var ae *azerr.Error
			if !errors.As(err, &ae) || ae.Code != azerr.InvalidInput || !strings.Contains(ae.Detail, c.err) {
				t.Errorf("ParseSelect(%q) = %v, %v; want InvalidInput %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("ParseSelect(%q) = %#v, %v; want %#v", c.in, got, err, c.want)
		}
	}
	if got, err := ParseSelect(strings.Repeat("x", 255)); err != nil || len(got) != 1 {
		t.Errorf("255-character name: %v", err)
	}
	// At most MaxSelect (255) items: no entity has more properties. A longer list is
	// refused before its items are looked at, however long it is.
	names := func(n int) string {
		var sb strings.Builder
		for i := range n {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, "N%d", i)
		}
		return sb.String()
	}
	if got, err := ParseSelect(names(MaxSelect)); err != nil || len(got) != MaxSelect {
		t.Errorf("%d names: %d, %v", MaxSelect, len(got), err)
	}
	for _, in := range []string{names(MaxSelect + 1), names(100_000), strings.Repeat(",", 300), "A," + names(300) + ",*"} {
		got, err := ParseSelect(in)
		var ae *azerr.Error
		if !errors.As(err, &ae) || ae.Code != azerr.InvalidQueryParameterValue || ae.Status != 400 || !strings.Contains(ae.Detail, "at most 255") {
			t.Errorf("ParseSelect(%.40q…) = %d names, %v; want 400 InvalidQueryParameterValue", in, len(got), err)
		}
	}
}

func TestProperties(t *testing.T) {
	f := MustParse("PartitionKey eq 'p' and (B eq 1 or A eq 2) and not B and Timestamp gt datetime'2020-01-01T00:00Z' and RowKey eq C")
	if got := f.Properties(); !slices.Equal(got, []string{"B", "A", "C"}) {
		t.Errorf("Properties = %v", got)
	}
}

func TestMatchEncodedCorrupt(t *testing.T) {
	f := MustParse("A eq 1")
	if ok, err := f.MatchEncoded("p", "r", 0, []byte{0x05}); ok || !errors.Is(err, entity.ErrCorrupt) {
		t.Errorf("corrupt bag: %v, %v", ok, err)
	}
	// A filter that never reads a property does not look at the bag at all.
	f = MustParse("PartitionKey eq 'p'")
	if ok, err := f.MatchEncoded("p", "r", 0, []byte{0x05}); !ok || err != nil {
		t.Errorf("keys only: %v, %v", ok, err)
	}
	// Short-circuit: B is never read when A is false.
	props := entity.AppendProps(nil, []entity.Property{{Name: "A", Value: entity.Int32Value(2)}})
	bad := append(props[:len(props):len(props)], 0xff) // trailing garbage after A
	bad[0] = 2                                         // claims a second property
	f = MustParse("A eq 1 and B eq 1")
	if ok, err := f.MatchEncoded("p", "r", 0, bad); ok || err != nil {
		t.Errorf("short-circuit: %v, %v", ok, err)
	}
}

func TestMatchRecord(t *testing.T) {
	f := MustParse("Timestamp ge datetime'2020-01-01T00:00:00Z' and Name eq 'x'")
	ts, _ := entity.ParseDateTime("2021-01-01T00:00:00Z")
	r := storage.Record{Entity: entity.Entity{PartitionKey: "p", RowKey: "r",
		Props: []entity.Property{{Name: "Name", Value: entity.StringValue("x")}}}, Version: ts}
	if !f.MatchRecord(&r) {
		t.Error("MatchRecord = false")
	}
	r.Version = 0
	if f.MatchRecord(&r) {
		t.Error("MatchRecord with an old Timestamp = true")
	}
}

func TestMatchTableName(t *testing.T) {
	names := []string{"alpha", "Alpha", "beta", "MyTable", "mytable", "zeta", "A1b2c3"}
	for _, c := range []struct {
		filter string
		want   []string
	}{
		{"TableName eq 'alpha'", []string{"alpha"}},
		{"TableName eq 'Alpha'", []string{"Alpha"}},
		{"TableName ne 'alpha'", []string{"Alpha", "beta", "MyTable", "mytable", "zeta", "A1b2c3"}},
		{"TableName ge 'a' and TableName lt 'b'", []string{"alpha"}},
		{"TableName ge 'A' and TableName lt 'B'", []string{"Alpha", "A1b2c3"}},
		{"TableName gt 'm'", []string{"mytable", "zeta"}},
		{"TableName lt 'M'", []string{"Alpha", "A1b2c3"}},
		{"TableName eq 'beta' or TableName eq 'zeta'", []string{"beta", "zeta"}},
		{"not (TableName eq 'beta')", []string{"alpha", "Alpha", "MyTable", "mytable", "zeta", "A1b2c3"}},
		{"PartitionKey eq 'alpha'", nil},
		{"Name eq 'alpha' or TableName eq 'beta'", []string{"beta"}},
		{"TableName eq 1", nil},
		{"TableName", nil},
		{"true", names},
		{"TableName eq TableName", names},
	} {
		f := MustParse(c.filter)
		var got []string
		for _, n := range names {
			if f.MatchTableName(n) {
				got = append(got, n)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v; want %v", c.filter, got, c.want)
		}
	}
}

func TestTableKeyRange(t *testing.T) {
	str := func(s string) *string { return &s }
	for _, c := range []struct {
		filter string
		from   string
		to     *string
	}{
		{"TableName eq 'mytable'", "mytable", str("mytable\x00")},
		{"TableName eq 'MyTable'", "mytable", str("mytable\x00")},
		{"TableName ge 'abc' and TableName lt 'abd'", "abc", nil},
		{"TableName ge 'abc'", "abc", nil},
		{"TableName gt 'abc'", "abc\x00", nil},
		{"TableName ge 'abC'", "ab", nil},
		{"TableName ge 'Abc'", "", nil},
		{"TableName lt 'ABD'", "", str("abd")},
		{"TableName le 'ABD'", "", str("abd\x00")},
		{"TableName lt 'Abd'", "", nil},
		{"TableName lt 'B1'", "", str("b1")},
		{"TableName lt 'B_'", "", nil},
		{"TableName lt ''", "", str("")},
		{"TableName eq 'a' or TableName eq 'C'", "a", str("c\x00")},
		{"TableName eq 'a' and TableName eq 'b'", "", str("")},
		{"TableName ge 'a' and TableName lt 'B'", "a", str("b")},
		{"not (TableName lt 'abc')", "abc", nil},
		{"TableName ne 'a'", "", nil},
		{"PartitionKey eq 'a'", "", str("")},
		{"TableName eq 1", "", str("")},
		{"true", "", nil},
		{"false", "", str("")},
		{"TableName eq 'a' or Name eq 'x'", "a", str("a\x00")},
	} {
		f := MustParse(c.filter)
		from, to := f.TableKeyRange()
		if from != c.from || (to == nil) != (c.to == nil) || to != nil && *to != *c.to {
			t.Errorf("%s: TableKeyRange = %q, %v; want %q, %v", c.filter, from, fmtPtr(to), c.from, fmtPtr(c.to))
		}
	}
}

func fmtPtr(s *string) string {
	if s == nil {
		return "nil"
	}
	return strconv.Quote(*s)
}

// TestTableKeyRangeSound checks the case-folding argument exhaustively on short names:
// every valid-looking name a filter matches has its TableKey inside TableKeyRange.
func TestTableKeyRangeSound(t *testing.T) {
	alphabet := "0AZaz_M9m"
	var names []string
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		if prefix != "" {
			names = append(names, prefix)
		}
		if n == 0 {
			return
		}
		for i := 0; i < len(alphabet); i++ {
			if alphabet[i] != '_' {
				gen(prefix+alphabet[i:i+1], n-1)
			}
		}
	}
	gen("", 3)
	bounds := []string{"", "0", "A", "Z", "a", "z", "M", "m", "Ma", "mA", "a0", "A0", "[", "`", "{", "zz", "ZZ", "m_", "M\x00"}
	for _, op := range []string{"eq", "ne", "gt", "ge", "lt", "le"} {
		for _, b := range bounds {
			for _, neg := range []bool{false, true} {
				src := "TableName " + op + " '" + b + "'"
				if neg {
					src = "not (" + src + ")"
				}
				f := MustParse(src)
				from, to := f.TableKeyRange()
				for _, n := range names {
					k := storage.TableKey(n)
					if f.MatchTableName(n) && (k < from || to != nil && k >= *to) {
						t.Errorf("%s: %q (key %q) matches but is outside [%q, %s)", src, n, k, from, fmtPtr(to))
					}
				}
			}
		}
	}
}

func TestClipRanges(t *testing.T) {
	k := func(pk, rk string) storage.Key { return storage.Key{PartitionKey: pk, RowKey: rk} }
	kp := func(pk, rk string) *storage.Key { x := k(pk, rk); return &x }
	rs := []KeyRange{{k("a", ""), kp("a\x00", "")}, {k("c", "x"), kp("c", "y")}, {k("e", ""), nil}}
	for _, c := range []struct {
		from storage.Key
		want []KeyRange
	}{
		{k("", ""), rs},
		{k("a", "m"), []KeyRange{{k("a", "m"), kp("a\x00", "")}, rs[1], rs[2]}},
		{k("a\x00", ""), rs[1:]},
		{k("b", ""), rs[1:]},
		{k("c", "x\x00"), []KeyRange{{k("c", "x\x00"), kp("c", "y")}, rs[2]}},
		{k("c", "y"), rs[2:]},
		{k("z", "z"), []KeyRange{{k("z", "z"), nil}}},
	} {
		if got := ClipRanges(rs, c.from); !reflect.DeepEqual(got, c.want) {
			t.Errorf("ClipRanges(%v) = %v; want %v", c.from, got, c.want)
		}
	}
}

func TestOps(t *testing.T) {
	for o := Eq; o <= Le; o++ {
		if o.Negate().Negate() != o || o.Mirror().Mirror() != o {
			t.Errorf("%v: Negate/Mirror not involutions", o)
		}
		for c := -1; c <= 1; c++ {
			if o.holds(c) == o.Negate().holds(c) {
				t.Errorf("%v.Negate() does not complement at %d", o, c)
			}
			if o.holds(c) != o.Mirror().holds(-c) {
				t.Errorf("%v.Mirror() wrong at %d", o, c)
			}
		}
	}
	if Op(0).String() != "op(0)" {
		t.Error(Op(0).String())
	}
}

// TestCompareExact checks integer/double comparison without rounding near 2^53 and 2^63.
func TestCompareExact(t *testing.T) {
	for _, c := range []struct {
		i    int64
		f    float64
		want int
	}{
		{0, 0, 0},
		{0, math.Copysign(0, -1), 0},
		{1, 0.5, 1},
		{-1, -0.5, -1},
		{1 << 53, 1 << 53, 0},
		{1<<53 + 1, 1 << 53, 1},
		{1<<53 + 1, 1<<53 + 2, -1},
		{math.MaxInt64, 0x1p63, -1},
		{math.MinInt64, -0x1p63, 0},
		{math.MinInt64, -0x1p63 - 2048, 1},
		{math.MaxInt64, math.Inf(1), -1},
		{math.MinInt64, math.Inf(-1), 1},
		{5, math.NaN(), cmpUnordered},
		{-3, -2.5, -1},
		{-2, -2.5, 1},
	} {
		a, b := entity.Int64Value(c.i), entity.DoubleValue(c.f)
		if got := compareValues(&a, &b); got != c.want {
			t.Errorf("compare(%d, %v) = %d; want %d", c.i, c.f, got, c.want)
		}
		want := -c.want
		if c.want == cmpUnordered {
			want = cmpUnordered
		}
		if got := compareValues(&b, &a); got != want {
			t.Errorf("compare(%v, %d) = %d; want %d", c.f, c.i, got, want)
		}
	}
}
