package edmjson

import (
	"fmt"
	"math"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

const (
	testRoot    = "http://127.0.0.1:10002/devstoreaccount1"
	testAccount = "devstoreaccount1"
	testTable   = "t1"
	testETag    = `"odata.etag":"W/\"datetime'2024-05-01T10%3A00%3A01.0000001Z'\""`
	testTS      = `"Timestamp":"2024-05-01T10:00:01.0000001Z"`
)

func testVersion(t testing.TB) int64 {
	v, err := entity.ParseDateTime("2024-05-01T10:00:01.0000001Z")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustTicks(t testing.TB, s string) int64 {
	v, err := entity.ParseDateTime(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustGUID(t testing.TB, s string) entity.Value {
	g, err := entity.ParseGUID(s)
	if err != nil {
		t.Fatal(err)
	}
	return entity.Value{Type: entity.GUID, Bytes: g}
}

func opts(l Level) EntityOptions {
	return EntityOptions{Level: l, ServiceRoot: testRoot, Account: testAccount, Table: testTable}
}

// prefix is an entity {PK "p", RK "r"} in a collection at each level, up to the custom
// properties.
var prefix = map[Level]string{
	NoMetadata:      `{"PartitionKey":"p","RowKey":"r",` + testTS,
	MinimalMetadata: `{` + testETag + `,"PartitionKey":"p","RowKey":"r",` + testTS,
	FullMetadata: `{"odata.type":"devstoreaccount1.t1","odata.id":"http://127.0.0.1:10002/devstoreaccount1/t1(PartitionKey='p',RowKey='r')",` +
		testETag + `,"odata.editLink":"t1(PartitionKey='p',RowKey='r')","PartitionKey":"p","RowKey":"r","Timestamp@odata.type":"Edm.DateTime",` + testTS,
}

// TestAppendEntityTypes pins the exact JSON of every EDM type at every level.
func TestAppendEntityTypes(t *testing.T) {
	ver := testVersion(t)
	cases := []struct {
		name string
		v    entity.Value
		meta string // minimal and full metadata
		none string
	}{
		{"string", entity.StringValue("hi"), `"X":"hi"`, ""},
		{"string-empty", entity.StringValue(""), `"X":""`, ""},
		{"string-escapes", entity.StringValue("a\"b\\c\n\r\t\x01\x1f\x7f\u2028\u2029<>&é😀/"),
			`"X":"a\"b\\c\n\r\t\u0001\u001f` + "\x7f" + `\u2028\u2029<>&é😀/"`, ""},
		{"string-invalid-utf8", entity.StringValue("a\xffb"), `"X":"a\ufffdb"`, ""},
		{"bool-true", entity.BoolValue(true), `"X":true`, ""},
		{"bool-false", entity.BoolValue(false), `"X":false`, ""},
		{"int32-zero", entity.Int32Value(0), `"X":0`, ""},
		{"int32-min", entity.Int32Value(math.MinInt32), `"X":-2147483648`, ""},
		{"int32-max", entity.Int32Value(math.MaxInt32), `"X":2147483647`, ""},
		{"int64-max", entity.Int64Value(math.MaxInt64), `"X@odata.type":"Edm.Int64","X":"9223372036854775807"`, `"X":"9223372036854775807"`},
		{"int64-min", entity.Int64Value(math.MinInt64), `"X@odata.type":"Edm.Int64","X":"-9223372036854775808"`, `"X":"-9223372036854775808"`},
		{"int64-small", entity.Int64Value(5), `"X@odata.type":"Edm.Int64","X":"5"`, `"X":"5"`},
		{"double-integral", entity.DoubleValue(5), `"X":5.0`, ""},
		{"double-half", entity.DoubleValue(0.5), `"X":0.5`, ""},
		{"double-zero", entity.DoubleValue(0), `"X":0.0`, ""},
		{"double-neg-zero", entity.DoubleValue(math.Copysign(0, -1)), `"X":-0.0`, ""},
		{"double-1e20", entity.DoubleValue(1e20), `"X":100000000000000000000.0`, ""},
		{"double-1e21", entity.DoubleValue(1e21), `"X":1e+21`, ""},
		{"double-neg-big", entity.DoubleValue(-1.5e300), `"X":-1.5e+300`, ""},
		{"double-max", entity.DoubleValue(math.MaxFloat64), `"X":1.7976931348623157e+308`, ""},
		{"double-min-subnormal", entity.DoubleValue(5e-324), `"X":5e-324`, ""},
		{"double-1e-7", entity.DoubleValue(1e-7), `"X":1e-7`, ""},
		{"double-1e-6", entity.DoubleValue(1e-6), `"X":0.000001`, ""},
		{"double-big-integral", entity.DoubleValue(123456789), `"X":123456789.0`, ""},
		{"double-2^53+", entity.DoubleValue(6824053932181), `"X":6824053932181.0`, ""},
		{"double-pi", entity.DoubleValue(3.141592653589793), `"X":3.141592653589793`, ""},
		{"double-nan", entity.DoubleValue(math.NaN()), `"X@odata.type":"Edm.Double","X":"NaN"`, `"X":"NaN"`},
		{"double-inf", entity.DoubleValue(math.Inf(1)), `"X@odata.type":"Edm.Double","X":"Infinity"`, `"X":"Infinity"`},
		{"double-neg-inf", entity.DoubleValue(math.Inf(-1)), `"X@odata.type":"Edm.Double","X":"-Infinity"`, `"X":"-Infinity"`},
		{"datetime", entity.Value{Type: entity.DateTime, Int: mustTicks(t, "2024-05-01T10:00:00.1234567Z")},
			`"X@odata.type":"Edm.DateTime","X":"2024-05-01T10:00:00.1234567Z"`, `"X":"2024-05-01T10:00:00.1234567Z"`},
		{"datetime-ms", entity.Value{Type: entity.DateTime, Int: mustTicks(t, "2021-03-04T05:06:07.089Z")},
			`"X@odata.type":"Edm.DateTime","X":"2021-03-04T05:06:07.0890000Z"`, `"X":"2021-03-04T05:06:07.0890000Z"`},
		{"datetime-min", entity.Value{Type: entity.DateTime, Int: entity.MinDateTime},
			`"X@odata.type":"Edm.DateTime","X":"1601-01-01T00:00:00.0000000Z"`, `"X":"1601-01-01T00:00:00.0000000Z"`},
		{"datetime-max", entity.Value{Type: entity.DateTime, Int: entity.MaxDateTime},
			`"X@odata.type":"Edm.DateTime","X":"9999-12-31T23:59:59.9999999Z"`, `"X":"9999-12-31T23:59:59.9999999Z"`},
		{"guid", mustGUID(t, "C9DA6455-213D-42C9-9A79-3E9149A57833"),
			`"X@odata.type":"Edm.Guid","X":"c9da6455-213d-42c9-9a79-3e9149a57833"`, `"X":"c9da6455-213d-42c9-9a79-3e9149a57833"`},
		{"guid-bad-length", entity.Value{Type: entity.GUID, Bytes: []byte{1}}, `"X":null`, ""},
		{"binary", entity.BinaryValue([]byte{1, 2, 3}), `"X@odata.type":"Edm.Binary","X":"AQID"`, `"X":"AQID"`},
		{"binary-padded", entity.BinaryValue([]byte{0xfb, 0xff}), `"X@odata.type":"Edm.Binary","X":"+/8="`, `"X":"+/8="`},
		{"binary-empty", entity.BinaryValue(nil), `"X@odata.type":"Edm.Binary","X":""`, `"X":""`},
		{"unknown-type", entity.Value{Type: 99}, `"X":null`, ""},
	}
	for _, c := range cases {
		e := &entity.Entity{PartitionKey: "p", RowKey: "r", Props: []entity.Property{{Name: "X", Value: c.v}}}
		for _, l := range []Level{NoMetadata, MinimalMetadata, FullMetadata} {
			want := c.meta
			if l == NoMetadata && c.none != "" {
				want = c.none
			}
			want = prefix[l] + "," + want + "}"
			got := string(AppendEntity(nil, e, ver, opts(l)))
			if got != want {
				t.Errorf("%s at %s:\n got %s\nwant %s", c.name, l, got, want)
			}
		}
	}
}

// TestAppendEntityGolden pins whole single-entity responses (docs/protocol.md §4.4).
func TestAppendEntityGolden(t *testing.T) {
	ver := testVersion(t)
	e, _, err := DecodeEntity([]byte(`{"PartitionKey":"p1","RowKey":"r1","Age":23,"Ratio":0.5,
 "Big@odata.type":"Edm.Int64","Big":"9007199254740993",
 "When@odata.type":"Edm.DateTime","When":"2024-05-01T10:00:00.1234567Z",
 "Id@odata.type":"Edm.Guid","Id":"c9da6455-213d-42c9-9a79-3e9149a57833",
 "Blob@odata.type":"Edm.Binary","Blob":"AQID"}`))
	if err != nil {
		t.Fatal(err)
	}
	const props = `"Age":23,"Ratio":0.5,"Big@odata.type":"Edm.Int64","Big":"9007199254740993",` +
		`"When@odata.type":"Edm.DateTime","When":"2024-05-01T10:00:00.1234567Z",` +
		`"Id@odata.type":"Edm.Guid","Id":"c9da6455-213d-42c9-9a79-3e9149a57833",` +
		`"Blob@odata.type":"Edm.Binary","Blob":"AQID"}`
	const propsNone = `"Age":23,"Ratio":0.5,"Big":"9007199254740993","When":"2024-05-01T10:00:00.1234567Z",` +
		`"Id":"c9da6455-213d-42c9-9a79-3e9149a57833","Blob":"AQID"}`
	want := map[Level]string{
		MinimalMetadata: `{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#t1/@Element",` +
			testETag + `,"PartitionKey":"p1","RowKey":"r1",` + testTS + `,` + props,
		FullMetadata: `{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#t1/@Element",` +
			`"odata.type":"devstoreaccount1.t1",` +
			`"odata.id":"http://127.0.0.1:10002/devstoreaccount1/t1(PartitionKey='p1',RowKey='r1')",` +
			testETag + `,"odata.editLink":"t1(PartitionKey='p1',RowKey='r1')",` +
			`"PartitionKey":"p1","RowKey":"r1","Timestamp@odata.type":"Edm.DateTime",` + testTS + `,` + props,
		NoMetadata: `{"PartitionKey":"p1","RowKey":"r1",` + testTS + `,` + propsNone,
	}
	for l, w := range want {
		o := opts(l)
		o.Element = true
		if got := string(AppendEntity(nil, &e, ver, o)); got != w {
			t.Errorf("%s:\n got %s\nwant %s", l, got, w)
		}
		// A trailing slash on the root is tolerated.
		o.ServiceRoot += "/"
		if got := string(AppendEntity(nil, &e, ver, o)); got != w {
			t.Errorf("%s with trailing slash:\n got %s\nwant %s", l, got, w)
		}
	}
	// Appending keeps what dst held.
	if got := string(AppendEntity([]byte("xx"), &e, ver, opts(NoMetadata))); !strings.HasPrefix(got, `xx{"PartitionKey"`) {
		t.Errorf("dst prefix lost: %s", got)
	}
}

func TestAppendEntitySelect(t *testing.T) {
	ver := testVersion(t)
	e := &entity.Entity{PartitionKey: "p", RowKey: "r", Props: []entity.Property{
		{Name: "A", Value: entity.Int32Value(1)},
		{Name: "B", Value: entity.Int64Value(2)},
		{Name: "C", Value: entity.StringValue("c")},
	}}
	cases := []struct {
		level   Level
		element bool
		sel     []string
		want    string
	}{
		{MinimalMetadata, false, []string{"C", "Missing", "A"},
			`{` + testETag + `,"A":1,"C":"c","Missing":null}`},
		{MinimalMetadata, true, []string{"PartitionKey", "B"},
			`{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#t1/@Element",` + testETag + `,"PartitionKey":"p","B@odata.type":"Edm.Int64","B":"2"}`},
		{NoMetadata, false, []string{"RowKey"}, `{"RowKey":"r"}`},
		{NoMetadata, false, []string{"Nope"}, `{"Nope":null}`},
		{NoMetadata, false, []string{"B", "Timestamp"}, `{` + testTS + `,"B":"2"}`},
		{FullMetadata, false, []string{"Timestamp"},
			`{"odata.type":"devstoreaccount1.t1","odata.id":"http://127.0.0.1:10002/devstoreaccount1/t1(PartitionKey='p',RowKey='r')",` +
				testETag + `,"odata.editLink":"t1(PartitionKey='p',RowKey='r')","Timestamp@odata.type":"Edm.DateTime",` + testTS + `}`},
		// Repeats, odata.* names, annotations and empty names are ignored.
		{NoMetadata, false, []string{"M", "M", "odata.etag", "A@odata.type", "", "A", "A"}, `{"A":1,"M":null}`},
		// An empty list means everything.
		{NoMetadata, false, []string{}, `{"PartitionKey":"p","RowKey":"r",` + testTS + `,"A":1,"B":"2","C":"c"}`},
	}
	for _, c := range cases {
		o := opts(c.level)
		o.Element, o.Select = c.element, NewSelection(c.sel)
		if got := string(AppendEntity(nil, e, ver, o)); got != c.want {
			t.Errorf("%s %q:\n got %s\nwant %s", c.level, c.sel, got, c.want)
		}
	}
}

// Long selections: which names an entity had is tracked one bit per name, on the stack up
// to 256 names and on the heap beyond (which odata.ParseSelect does not allow, but
// NewSelection does not rely on).
func TestAppendEntityLongSelect(t *testing.T) {
	ver := testVersion(t)
	for _, n := range []int{63, 64, 65, 255, 256, 300} {
		names := make([]string, n)
		e := &entity.Entity{PartitionKey: "p", RowKey: "r"}
		for i := range names {
			names[i] = fmt.Sprintf("P%d", i)
			if i%7 == 3 || i == n-1 {
				e.Props = append(e.Props, entity.Property{Name: names[i], Value: entity.Int32Value(int32(i))})
			}
		}
		var want strings.Builder
		want.WriteString("{")
		for _, p := range e.Props {
			fmt.Fprintf(&want, `"%s":%d,`, p.Name, p.Value.Int)
		}
		for i, name := range names {
			if !(i%7 == 3 || i == n-1) {
				fmt.Fprintf(&want, `"%s":null,`, name)
			}
		}
		w := strings.TrimSuffix(want.String(), ",") + "}"
		o := opts(NoMetadata)
		o.Select = NewSelection(append(names, names[:10]...)) // repeats count once
		if got := string(AppendEntity(nil, e, ver, o)); got != w {
			t.Errorf("%d names:\n got %s\nwant %s", n, got, w)
		}
	}
}

func TestEntityURLKeyEscaping(t *testing.T) {
	ver := testVersion(t)
	e := &entity.Entity{PartitionKey: "a'b c/é", RowKey: "x(1)$&+:=@;,?%\"\\"}
	got := string(AppendEntity(nil, e, ver, opts(FullMetadata)))
	want := `{"odata.type":"devstoreaccount1.t1",` +
		`"odata.id":"http://127.0.0.1:10002/devstoreaccount1/t1(PartitionKey='a%27%27b%20c%2F%C3%A9',RowKey='x%281%29$&+:=@%3B%2C%3F%25%22%5C')",` +
		testETag + `,"odata.editLink":"t1(PartitionKey='a%27%27b%20c%2F%C3%A9',RowKey='x%281%29$&+:=@%3B%2C%3F%25%22%5C')",` +
		`"PartitionKey":"a'b c/é","RowKey":"x(1)$&+:=@;,?%\"\\","Timestamp@odata.type":"Edm.DateTime",` + testTS + `}`
	if got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
	// Every byte: our escaper equals url.PathEscape after doubling quotes.
	var all strings.Builder
	for c := 0; c < 256; c++ {
		all.WriteByte(byte(c))
	}
	for _, k := range []string{all.String(), "", "'", "''", "日本語", "a b+c"} {
		if got, want := string(AppendKeyEscaped(nil, k)), url.PathEscape(strings.ReplaceAll(k, "'", "''")); got != want {
			t.Errorf("AppendKeyEscaped(%q) = %q, want %q", k, got, want)
		}
	}
}

func TestCollections(t *testing.T) {
	ver := testVersion(t)
	e := &entity.Entity{PartitionKey: "p", RowKey: "r"}
	build := func(l Level, n int) string {
		o := opts(l)
		b := AppendCollectionStart(nil, o)
		for i := 0; i < n; i++ {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendEntity(b, e, ver, o)
		}
		return string(AppendCollectionEnd(b))
	}
	ent := map[Level]string{
		MinimalMetadata: `{` + testETag + `,"PartitionKey":"p","RowKey":"r",` + testTS + `}`,
		NoMetadata:      `{"PartitionKey":"p","RowKey":"r",` + testTS + `}`,
	}
	for _, c := range []struct {
		l    Level
		n    int
		want string
	}{
		{MinimalMetadata, 0, `{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#t1","value":[]}`},
		{MinimalMetadata, 2, `{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#t1","value":[` + ent[MinimalMetadata] + "," + ent[MinimalMetadata] + `]}`},
		{NoMetadata, 1, `{"value":[` + ent[NoMetadata] + `]}`},
		{FullMetadata, 0, `{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#t1","value":[]}`},
	} {
		if got := build(c.l, c.n); got != c.want {
			t.Errorf("%s/%d:\n got %s\nwant %s", c.l, c.n, got, c.want)
		}
	}
}

func TestTables(t *testing.T) {
	to := func(l Level, el bool) TableOptions {
		return TableOptions{Level: l, ServiceRoot: testRoot, Account: testAccount, Element: el}
	}
	cases := []struct {
		o    TableOptions
		want string
	}{
		{to(MinimalMetadata, true), `{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#Tables/@Element","TableName":"mytable"}`},
		{to(MinimalMetadata, false), `{"TableName":"mytable"}`},
		{to(NoMetadata, true), `{"TableName":"mytable"}`},
		{to(NoMetadata, false), `{"TableName":"mytable"}`},
		{to(FullMetadata, true), `{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#Tables/@Element",` +
			`"odata.type":"devstoreaccount1.Tables","odata.id":"http://127.0.0.1:10002/devstoreaccount1/Tables('mytable')",` +
			`"odata.editLink":"Tables('mytable')","TableName":"mytable"}`},
		{to(FullMetadata, false), `{"odata.type":"devstoreaccount1.Tables","odata.id":"http://127.0.0.1:10002/devstoreaccount1/Tables('mytable')",` +
			`"odata.editLink":"Tables('mytable')","TableName":"mytable"}`},
	}
	for _, c := range cases {
		if got := string(AppendTable(nil, "mytable", c.o)); got != c.want {
			t.Errorf("%s element=%v:\n got %s\nwant %s", c.o.Level, c.o.Element, got, c.want)
		}
	}
	list := func(l Level) string {
		o := to(l, false)
		b := AppendTablesStart(nil, o)
		b = AppendTable(b, "a", o)
		b = append(b, ',')
		b = AppendTable(b, "b", o)
		return string(AppendCollectionEnd(b))
	}
	for l, want := range map[Level]string{
		MinimalMetadata: `{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#Tables","value":[{"TableName":"a"},{"TableName":"b"}]}`,
		NoMetadata:      `{"value":[{"TableName":"a"},{"TableName":"b"}]}`,
		FullMetadata: `{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#Tables","value":[` +
			`{"odata.type":"devstoreaccount1.Tables","odata.id":"http://127.0.0.1:10002/devstoreaccount1/Tables('a')","odata.editLink":"Tables('a')","TableName":"a"},` +
			`{"odata.type":"devstoreaccount1.Tables","odata.id":"http://127.0.0.1:10002/devstoreaccount1/Tables('b')","odata.editLink":"Tables('b')","TableName":"b"}]}`,
	} {
		if got := list(l); got != want {
			t.Errorf("tables %s:\n got %s\nwant %s", l, got, want)
		}
		if got := string(AppendTables(nil, []storage.TableInfo{{Name: "a"}, {Name: "b"}}, to(l, true))); got != want {
			t.Errorf("AppendTables %s:\n got %s\nwant %s", l, got, want)
		}
	}
}

func TestAppendTablesEmpty(t *testing.T) {
	got := string(AppendTables(nil, nil, TableOptions{ServiceRoot: testRoot}))
	if want := `{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#Tables","value":[]}`; got != want {
		t.Errorf("got %s", got)
	}
}

func TestAppendError(t *testing.T) {
	got := string(AppendError(nil, "TableNotFound", "The table specified does not exist.\nRequestId:b6d10273-9002-003d-3628-2b91da000000\nTime:2024-05-01T10:00:01.1234567Z"))
	want := `{"odata.error":{"code":"TableNotFound","message":{"lang":"en-US","value":"The table specified does not exist.\nRequestId:b6d10273-9002-003d-3628-2b91da000000\nTime:2024-05-01T10:00:01.1234567Z"}}}`
	if got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
	if got := string(AppendError(nil, "X", `a "quoted" \ <b>`)); got != `{"odata.error":{"code":"X","message":{"lang":"en-US","value":"a \"quoted\" \\ <b>"}}}` {
		t.Errorf("escaping: %s", got)
	}
}

// The expiry annotation: written only when asked for, on a record that has an expiry,
// after the metadata and before the keys at every level, whatever $select says; the
// same from decoded and stored properties.
func TestAppendRecordExpiry(t *testing.T) {
	props := []entity.Property{{Name: "A", Value: entity.Int32Value(1)}}
	exp := entity.TimeToTicks(time.Date(2026, 12, 5, 10, 0, 0, 123456700, time.UTC))
	ver := entity.TimeToTicks(time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC))
	dec := storage.Record{Entity: entity.Entity{PartitionKey: "p", RowKey: "r", Props: props}, Version: ver, Expiry: exp}
	enc := dec
	enc.Entity.Props, enc.Encoded = nil, entity.AppendProps(nil, props)
	never := dec
	never.Expiry = 0
	const ann = `"cerulean.expiry":"2026-12-05T10:00:00.1234567Z"`
	for _, c := range []struct {
		level Level
		sel   []string
		want  string
	}{
		{NoMetadata, nil, `{` + ann + `,"PartitionKey":"p"`},
		{MinimalMetadata, nil, `"odata.etag":"W/\"datetime'2026-12-04T10%3A00%3A00.0000000Z'\"",` + ann + `,"PartitionKey":"p"`},
		{FullMetadata, nil, `"odata.editLink":"t(PartitionKey='p',RowKey='r')",` + ann + `,"PartitionKey":"p"`},
		{MinimalMetadata, []string{"A"}, `"odata.etag":"W/\"datetime'2026-12-04T10%3A00%3A00.0000000Z'\"",` + ann + `,"A":1}`},
		{NoMetadata, []string{"A"}, `{` + ann + `,"A":1}`},
	} {
		opts := EntityOptions{Level: c.level, ServiceRoot: "http://h/a", Account: "a", Table: "t", Select: NewSelection(c.sel)}
		plain := string(AppendRecord(nil, &dec, opts))
		opts.Expiry = true
		for _, rec := range []*storage.Record{&dec, &enc} {
			got := string(AppendRecord(nil, rec, opts))
			if !strings.Contains(got, c.want) {
				t.Errorf("%v %v (encoded %v): %s, want …%s…", c.level, c.sel, rec.Encoded != nil, got, c.want)
			}
			if strings.Replace(got, ann+",", "", 1) != plain {
				t.Errorf("%v %v: with the annotation %s, without %s", c.level, c.sel, got, plain)
			}
		}
		if got := string(AppendRecord(nil, &never, opts)); got != plain {
			t.Errorf("%v %v: a record without an expiry: %s, want %s", c.level, c.sel, got, plain)
		}
		opts.Expiry = false
		if strings.Contains(string(AppendRecord(nil, &dec, opts)), "cerulean") {
			t.Errorf("%v: the annotation without being asked", c.level)
		}
	}
}
