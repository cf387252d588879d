package edmjson

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
)

// decodeCase is one case of testdata/decode.txt.
type decodeCase struct {
	name    string
	line    int
	body    []byte
	errCode azerr.Code // "" for success
	want    entity.Entity
	keys    Keys
}

func loadDecodeCases(t testing.TB, path string) []decodeCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cases []decodeCase
	var cur *decodeCase
	inBody := false
	var body []string
	for n, line := range strings.Split(string(data), "\n") {
		lineNo := n + 1
		switch {
		case strings.HasPrefix(line, "=== "):
			cases = append(cases, decodeCase{name: strings.TrimSpace(line[4:]), line: lineNo})
			cur = &cases[len(cases)-1]
			inBody, body = true, nil
		case cur == nil:
			// preamble
		case inBody && strings.HasPrefix(line, "--- "):
			inBody = false
			cur.body = []byte(strings.Join(body, "\n"))
			verdict := strings.Fields(line[4:])
			switch {
			case len(verdict) == 1 && verdict[0] == "ok":
			case len(verdict) == 2 && verdict[0] == "err":
				cur.errCode = azerr.Code(verdict[1])
			default:
				t.Fatalf("%s:%d: bad verdict %q", path, lineNo, line)
			}
		case inBody:
			if rest, ok := strings.CutPrefix(line, "!q "); ok {
				u, err := strconv.Unquote(rest)
				if err != nil {
					t.Fatalf("%s:%d: %v", path, lineNo, err)
				}
				line = u
			}
			body = append(body, line)
		case line == "" || strings.HasPrefix(line, "#"):
		default:
			if err := parseExpectation(cur, line); err != nil {
				t.Fatalf("%s:%d: %v", path, lineNo, err)
			}
		}
	}
	return cases
}

// parseExpectation reads one "Name Type value" line with independent parsers.
func parseExpectation(c *decodeCase, line string) error {
	var name string
	if line[0] == '"' {
		q, err := strconv.QuotedPrefix(line)
		if err != nil {
			return err
		}
		name, _ = strconv.Unquote(q)
		line = strings.TrimPrefix(line[len(q):], " ")
	} else {
		i := strings.IndexByte(line, ' ')
		if i < 0 {
			return fmt.Errorf("bad expectation %q", line)
		}
		name, line = line[:i], line[i+1:]
	}
	if name == "PartitionKey" || name == "RowKey" {
		s, err := strconv.Unquote(line)
		if err != nil {
			return err
		}
		if name == "PartitionKey" {
			c.want.PartitionKey, c.keys.PartitionKey = s, true
		} else {
			c.want.RowKey, c.keys.RowKey = s, true
		}
		return nil
	}
	typ, lit, _ := strings.Cut(line, " ")
	t, ok := entity.ParseType("Edm." + typ)
	if !ok {
		return fmt.Errorf("bad type %q", typ)
	}
	v := entity.Value{Type: t}
	var err error
	switch t {
	case entity.String:
		v.Str, err = strconv.Unquote(lit)
	case entity.Boolean:
		var b bool
		b, err = strconv.ParseBool(lit)
		v = entity.BoolValue(b)
	case entity.Int32:
		v.Int, err = strconv.ParseInt(lit, 10, 32)
	case entity.Int64:
		v.Int, err = strconv.ParseInt(lit, 10, 64)
	case entity.Double:
		v.Float, err = strconv.ParseFloat(lit, 64)
	case entity.DateTime:
		v.Int, err = entity.ParseDateTime(lit)
	case entity.GUID:
		v.Bytes, err = entity.ParseGUID(lit)
	case entity.Binary:
		if lit != "-" {
			v.Bytes, err = base64.StdEncoding.DecodeString(lit)
		}
	}
	if err != nil {
		return err
	}
	c.want.Props = append(c.want.Props, entity.Property{Name: name, Value: v})
	return nil
}

func entityEqual(a, b *entity.Entity) bool {
	if a.PartitionKey != b.PartitionKey || a.RowKey != b.RowKey || len(a.Props) != len(b.Props) {
		return false
	}
	for i := range a.Props {
		if a.Props[i].Name != b.Props[i].Name || !a.Props[i].Value.Equal(b.Props[i].Value) {
			return false
		}
	}
	return true
}

func describe(e *entity.Entity) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "PK=%q RK=%q", e.PartitionKey, e.RowKey)
	for _, p := range e.Props {
		fmt.Fprintf(&sb, " %q:%s=%s", p.Name, p.Value.Type, p.Value)
	}
	return sb.String()
}

func codeOf(err error) azerr.Code {
	var e *azerr.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func TestDecodeEntityData(t *testing.T) {
	cases := loadDecodeCases(t, "testdata/decode.txt")
	if len(cases) < 100 {
		t.Fatalf("only %d cases parsed", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, keys, err := DecodeEntity(c.body)
			if c.errCode != "" {
				if err == nil {
					t.Fatalf("decode.txt:%d: succeeded (%s), want %s", c.line, describe(&got), c.errCode)
				}
				var ae *azerr.Error
				if !errors.As(err, &ae) {
					t.Fatalf("decode.txt:%d: error %v is not *azerr.Error", c.line, err)
				}
				if ae.Code != c.errCode || ae.Status != 400 {
					t.Fatalf("decode.txt:%d: got %s (%d) %v, want %s", c.line, ae.Code, ae.Status, err, c.errCode)
				}
				return
			}
			if err != nil {
				t.Fatalf("decode.txt:%d: %v", c.line, err)
			}
			if !entityEqual(&got, &c.want) {
				t.Fatalf("decode.txt:%d:\n got %s\nwant %s", c.line, describe(&got), describe(&c.want))
			}
			if keys != c.keys {
				t.Fatalf("decode.txt:%d: keys %+v, want %+v", c.line, keys, c.keys)
			}
		})
	}
}

func TestKeysRequire(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"PartitionKey":"p","RowKey":"r"}`, true},
		{`{"PartitionKey":"","RowKey":""}`, true},
		{`{"PartitionKey":"p"}`, false},
		{`{"RowKey":"r"}`, false},
		{`{"PartitionKey":null,"RowKey":"r"}`, false},
		{`{"PartitionKey":"p","RowKey":null,"RowKey@odata.type":"Edm.String"}`, false},
		{`{}`, false},
	} {
		_, keys, err := DecodeEntity([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		err = keys.Require()
		if tc.ok != (err == nil) || keys.Complete() != tc.ok {
			t.Errorf("%s: Require() = %v, Complete() = %v", tc.body, err, keys.Complete())
		}
		if !tc.ok && codeOf(err) != azerr.PropertiesNeedValue {
			t.Errorf("%s: code %s, want PropertiesNeedValue", tc.body, codeOf(err))
		}
	}
}

// The result must not alias the request body (servers reuse body buffers).
func TestDecodeDoesNotAliasBody(t *testing.T) {
	body := []byte(`{"PartitionKey":"pk","RowKey":"rk","s":"hello","b@odata.type":"Edm.Binary","b":"AQID","g@odata.type":"Edm.Guid","g":"c9da6455-213d-42c9-9a79-3e9149a57833"}`)
	e, _, err := DecodeEntity(body)
	if err != nil {
		t.Fatal(err)
	}
	before := describe(&e)
	for i := range body {
		body[i] = 'x'
	}
	if after := describe(&e); after != before {
		t.Fatalf("entity changed with the body:\n%s\n%s", before, after)
	}
	// Arena slices must not share capacity with their neighbours.
	b, _ := e.Get("b")
	b.Bytes = append(b.Bytes, 9)
	if g, _ := e.Get("g"); entity.FormatGUID(g.Bytes) != "c9da6455-213d-42c9-9a79-3e9149a57833" {
		t.Fatal("appending to a Binary value overwrote the next value")
	}
}

func TestDecodeErrorDetail(t *testing.T) {
	_, _, err := DecodeEntity([]byte(`{"Age@odata.type":"Edm.Int32","Age":"abc"}`))
	var ae *azerr.Error
	if !errors.As(err, &ae) || ae.Code != azerr.InvalidInput {
		t.Fatalf("err = %v", err)
	}
	if ae.Message != "One of the request inputs is not valid." || !strings.Contains(ae.Detail, `"Age"`) || !strings.Contains(ae.Detail, "Edm.Int32") {
		t.Fatalf("message %q detail %q", ae.Message, ae.Detail)
	}
	// Go's time.Time marshals nanoseconds: the error names the property and says 7 digits
	// is the most (a bare "not a valid value" left users guessing).
	_, _, err = DecodeEntity([]byte(`{"When":"2024-05-01T10:00:00.123456789Z","When@odata.type":"Edm.DateTime"}`))
	if !errors.As(err, &ae) || ae.Code != azerr.InvalidInput || !strings.Contains(ae.Detail, `"When"`) ||
		!strings.Contains(ae.Detail, "more than 7 fraction digits; 7 (100 ns) is the most") {
		t.Fatalf("9 fraction digits: %v", err)
	}
	_, _, err = DecodeEntity([]byte(`{"When@odata.type":"Edm.DateTime","When":"1500-01-02T03:04:05Z"}`))
	if !errors.As(err, &ae) || ae.Message != "The 'When' parameter of value '01/02/1500 03:04:05' is out of range." {
		t.Fatalf("err = %v", err)
	}
}

// Big bodies must decode in time linear in their size, whatever their shape.
func TestDecodeLargeBodies(t *testing.T) {
	big := strings.Repeat("abcdefgh", 1<<17) // 1 MiB
	shapes := map[string]string{
		"one-big-string":  `{"PartitionKey":"p","RowKey":"r","s":"` + big + `"}`,
		"escaped-string":  `{"s":"` + strings.Repeat(`\n\u00e9`, 1<<17) + `"}`,
		"big-binary":      `{"b@odata.type":"Edm.Binary","b":"` + base64.StdEncoding.EncodeToString([]byte(big)) + `"}`,
		"huge-number":     `{"n":` + strings.Repeat("9", 1<<20) + `}`,
		"whitespace":      `{"a":1` + strings.Repeat(" ", 1<<20) + `}`,
		"many-properties": manyProps(60000, false),
		"many-annotated":  manyProps(30000, true),
		"many-duplicates": manyProps(60000, false)[:len(manyProps(60000, false))-1] + `,"p0":1}`,
		// Members that do not count as properties, so the count does not stop them.
		"many-nulls":       manyMembers(400000, `"n%d":null`),
		"many-annotations": manyMembers(200000, `"a%d@odata.type":"Edm.Int64"`),
		"many-odata-keys":  manyMembers(300000, `"odata.k%d":1`),
	}
	// Linear time decodes each shape in well under a second; a quadratic one takes minutes.
	limit := 2 * time.Second
	if raceEnabled {
		limit *= 10
	}
	for name, body := range shapes {
		start := time.Now()
		e, _, err := DecodeEntity([]byte(body))
		el := time.Since(start)
		t.Logf("%s: %d bytes, %d props, err=%v, %v", name, len(body), len(e.Props), codeOf(err), el)
		if el > limit {
			t.Errorf("%s: took %v", name, el)
		}
	}
}

func manyMembers(n int, format string) string {
	var sb strings.Builder
	sb.WriteString(`{"PartitionKey":"p","RowKey":"r"`)
	for i := 0; i < n; i++ {
		sb.WriteByte(',')
		fmt.Fprintf(&sb, format, i)
	}
	sb.WriteString("}")
	return sb.String()
}

// compactProps is a body with n custom properties under the shortest distinct names, as
// an attacker would pack them: 300,000 fit in 3 MB.
func compactProps(n int) []byte {
	b := []byte(`{"PartitionKey":"p","RowKey":"r"`)
	for i := 0; i < n; i++ {
		b = append(b, `,"_`...)
		b = strconv.AppendInt(b, int64(i), 36)
		b = append(b, `":1`...)
	}
	return append(b, '}')
}

// The property count is checked while scanning: the 253rd property ends the decode, so
// nothing after it is read (the invalid JSON there goes unnoticed) and a 300,000-property
// body costs no more than 253 properties' worth of work. What does not count: keys,
// Timestamp, odata.* keys, annotations and null values.
func TestDecodeStopsAtPropertyLimit(t *testing.T) {
	props := func(n int) string {
		var sb strings.Builder
		for i := 0; i < n; i++ {
			fmt.Fprintf(&sb, `"P%d":%d,`, i, i)
		}
		return sb.String()
	}
	extras := `"PartitionKey":"p","RowKey":"r","Timestamp":"2024-05-01T10:00:00Z","Timestamp@odata.type":"Edm.DateTime",` +
		`"odata.etag":"x","odata.metadata":"m","N1":null,"N2":null,"N2@odata.type":"Edm.DateTime","P0@odata.type":"Edm.Int32",`
	for _, c := range []struct {
		name, body string
		code       azerr.Code
		props      int
	}{
		{"252", "{" + extras + props(252) + `"Z":null}`, "", 252},
		{"252-then-garbage", "{" + extras + props(252) + `"Z":}`, azerr.InvalidInput, 0},
		{"253-then-garbage", "{" + extras + props(253) + `"Z":}`, azerr.TooManyProperties, 0},
		{"253-then-unterminated", "{" + props(253) + `"Z":"abc`, azerr.TooManyProperties, 0},
		{"253-before-duplicate", "{" + props(253) + `"P1":1}`, azerr.TooManyProperties, 0},
		{"duplicate-within-limit", "{" + props(10) + `"P1":1}`, azerr.DuplicatePropertiesSpecified, 0},
	} {
		e, _, err := DecodeEntity([]byte(c.body))
		if codeOf(err) != c.code || len(e.Props) != c.props {
			t.Errorf("%s: %d properties, err %v; want %d, %q", c.name, len(e.Props), err, c.props, c.code)
		}
	}
	// Stopping early: the error comes after reading about 253 properties of a 3 MB body.
	body := compactProps(300_000)
	d := decoder{b: body, maxProps: entity.MaxProperties}
	_, err := d.object(nil)
	if codeOf(err) != azerr.TooManyProperties || d.i > 4096 {
		t.Fatalf("stopped at offset %d of %d with %v; want TooManyProperties within the first 4 KiB", d.i, len(body), err)
	}
	start := time.Now()
	if _, _, err := DecodeEntity(body); codeOf(err) != azerr.TooManyProperties {
		t.Fatalf("300,000 properties: %v", err)
	}
	if el := time.Since(start); el > 100*time.Millisecond {
		t.Errorf("300,000 properties refused after %v, want well under 100 ms", el)
	}
}

func manyProps(n int, annotated bool) string {
	var sb strings.Builder
	sb.WriteString("{")
	for i := 0; i < n; i++ {
		if i > 0 {
			sb.WriteString(",")
		}
		if annotated {
			fmt.Fprintf(&sb, `"p%d":"%d","p%d@odata.type":"Edm.Int64"`, i, i, i)
		} else {
			fmt.Fprintf(&sb, `"p%d":%d`, i, i)
		}
	}
	sb.WriteString("}")
	return sb.String()
}

// parseDateTimeFast must agree with entity.ParseDateTime whenever it answers.
func TestParseDateTimeFastAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	check := func(s string) {
		got, ok := parseDateTimeFast([]byte(s))
		want, err := entity.ParseDateTime(s)
		if ok && (err != nil || got != want) {
			t.Fatalf("%q: fast %d, entity %d %v", s, got, want, err)
		}
	}
	for _, s := range []string{
		"0000-01-01T00:00:00Z", "0000-02-29T00:00:00Z", "1600-02-29T12:00:00Z", "1700-02-29T12:00:00Z",
		"1969-12-31T23:59:59.9999999Z", "1970-01-01T00:00:00.0Z", "2024-02-29T00:00:00.1234567Z",
		"2023-02-29T00:00:00Z", "9999-12-31T23:59:59.9999999Z", "2024-04-31T00:00:00Z",
		"2024-05-01T10:00:00.Z", "2024-05-01T10:00:00.12345678Z",
	} {
		check(s)
	}
	for i := 0; i < 200000; i++ {
		ticks := entity.MinDateTime - 1e17 + r.Int64N(entity.MaxDateTime-entity.MinDateTime+2e17)
		s := entity.FormatTicks(ticks)
		if s[0] == '-' || len(s) != 28 {
			continue
		}
		// Vary the number of fraction digits and sometimes corrupt a field.
		digits := r.IntN(8)
		if digits == 0 {
			s = s[:19] + "Z"
		} else {
			s = s[:20+digits] + "Z"
		}
		if r.IntN(4) == 0 {
			b := []byte(s)
			b[r.IntN(len(b))] = "0123456789:-TZ.x"[r.IntN(16)]
			s = string(b)
		}
		check(s)
		// The canonical form itself must take the fast path.
		if i%4 == 0 {
			if _, ok := parseDateTimeFast([]byte(entity.FormatTicks(ticks))); !ok && ticks >= entity.MinDateTime && ticks <= entity.MaxDateTime {
				t.Fatalf("%s: not on the fast path", entity.FormatTicks(ticks))
			}
		}
	}
}

func TestParseGUIDAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 20000; i++ {
		var g [16]byte
		for j := range g {
			g[j] = byte(r.Uint32())
		}
		s := entity.FormatGUID(g[:])
		if r.IntN(2) == 0 {
			s = strings.ToUpper(s)
		}
		if r.IntN(3) == 0 {
			s = "{" + s + "}"
		}
		if r.IntN(3) == 0 {
			b := []byte(s)
			b[r.IntN(len(b))] = "0aF-g{}"[r.IntN(7)]
			s = string(b)
		}
		var dst [16]byte
		ok := parseGUID(dst[:], []byte(s))
		want, err := entity.ParseGUID(s)
		if ok && (err != nil || !bytes.Equal(dst[:], want)) {
			t.Fatalf("%q: ours %x, entity %x %v", s, dst, want, err)
		}
		if !ok && err == nil && strings.Count(s, "-") == 4 {
			t.Fatalf("%q: rejected, entity accepts", s)
		}
	}
}

func TestParseIntAgrees(t *testing.T) {
	inputs := []string{"", "+", "-", "0", "-0", "+0", "007", "2147483647", "2147483648", "-2147483648",
		"-2147483649", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
		"-9223372036854775809", "99999999999999999999", "1e3", " 1", "1 ", "1_000", "0x10", "++1", "-+1"}
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 5000; i++ {
		inputs = append(inputs, strconv.FormatInt(int64(r.Uint64()), 10), strconv.FormatInt(int64(r.Uint64()>>r.IntN(64)), 10))
	}
	for _, s := range inputs {
		for _, bits := range []int{32, 64} {
			got, ok := parseInt([]byte(s), bits)
			want, err := strconv.ParseInt(s, 10, bits)
			if ok != (err == nil) || (ok && got != want) {
				t.Fatalf("parseInt(%q, %d) = %d, %v; strconv %d, %v", s, bits, got, ok, want, err)
			}
		}
	}
}

func TestInt32BoundariesAnnotated(t *testing.T) {
	for _, v := range []int64{math.MinInt32, math.MaxInt32, 0, -1} {
		body := fmt.Sprintf(`{"a@odata.type":"Edm.Int32","a":%d,"b@odata.type":"Edm.Int32","b":"%d"}`, v, v)
		e, _, err := DecodeEntity([]byte(body))
		if err != nil || !e.Props[0].Value.Equal(entity.Int32Value(int32(v))) || !e.Props[1].Value.Equal(entity.Int32Value(int32(v))) {
			t.Fatalf("%s: %v %v", body, describe(&e), err)
		}
	}
}
