package edmjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// FuzzDecodeEntity: DecodeEntity never panics, fails only with a 400 *azerr.Error,
// succeeds only on valid JSON, and whatever it accepts survives encode → decode unchanged
// at minimal and full metadata.
func FuzzDecodeEntity(f *testing.F) {
	for _, c := range loadDecodeCases(f, "testdata/decode.txt") {
		f.Add(c.body)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		e, keys, err := DecodeEntity(body)
		if err != nil {
			var ae *azerr.Error
			if !errors.As(err, &ae) || ae.Status != 400 {
				t.Fatalf("error %v is not a 400 *azerr.Error", err)
			}
			return
		}
		if !json.Valid(bytes.TrimPrefix(body, []byte("\xEF\xBB\xBF"))) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		if (!keys.PartitionKey && e.PartitionKey != "") || (!keys.RowKey && e.RowKey != "") {
			t.Fatalf("keys %+v but entity %s", keys, describe(&e))
		}
		for _, l := range []Level{MinimalMetadata, FullMetadata} {
			out := AppendEntity(nil, &e, 12345, EntityOptions{Level: l, ServiceRoot: "http://h/a", Account: "a", Table: "t", Element: true})
			if !json.Valid(out) {
				t.Fatalf("encoder wrote invalid JSON %q", out)
			}
			back, keys2, err := DecodeEntity(out)
			if err != nil {
				t.Fatalf("re-decode at %s: %v\n%s", l, err, out)
			}
			if !keys2.Complete() || !entityEqual(&back, &e) {
				t.Fatalf("round trip at %s:\n in %s\nout %s\n%s", l, describe(&e), describe(&back), out)
			}
		}
		if !json.Valid(AppendEntity(nil, &e, 12345, EntityOptions{Level: NoMetadata})) {
			t.Fatal("nometadata output invalid")
		}
	})
}

// FuzzDecodeTable: DecodeTable and DecodeTableSettings never panic and fail only with a
// 400 *azerr.Error; what DecodeTable accepts survives AppendTableInfo (all settings
// selected) → DecodeTable, and settings survive AppendTableSettings → DecodeTableSettings.
func FuzzDecodeTable(f *testing.F) {
	f.Add([]byte(`{"TableName":"mytable"}`))
	f.Add([]byte(`{"odata.type":"x","TableName":"t\u0041"}`))
	f.Add([]byte(`{"TableName":"events","Elastic":true,"DefaultTimeToLive":86400,"TimeToLiveProperty":"ttl"}`))
	f.Add([]byte(`{"TableName":"c","Elastic":true,"DefaultTimeToLive":-1}`))
	f.Add([]byte(`{"TableName":"c","Elastic":false,"DefaultTimeToLive":null,"TimeToLiveProperty":null}`))
	f.Add([]byte(`{"TableName":"c","Elastic":"yes","DefaultTimeToLive":1.5}`))
	f.Add([]byte(`{"Elastic":true,"DefaultTimeToLive":2147483648}`))
	f.Add([]byte(`{"TableName":"i","Elastic":true,"Indexes":[{"Name":"ByA","Properties":["A","B"],"Unique":true}]}`))
	f.Add([]byte(`{"TableName":"i","x":[1,{"y":"]"}],"Indexes":null}`))
	f.Add([]byte(`{"TableName":"i","Elastic":true,"Indexes":[{"Name":"B","Properties":["A"],"State":"building","Progress":12},{"Name":"F","Properties":["C"],"Unique":true,"State":"failed","Failure":"x"}]}`))
	f.Add([]byte(`{"TableName":"i","Elastic":true,"Indexes":[{"Name":"B","Properties":["A"],"Progress":"12"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		is400 := func(err error) {
			var ae *azerr.Error
			if !errors.As(err, &ae) || ae.Status != 400 {
				t.Fatalf("error %v is not a 400 *azerr.Error", err)
			}
		}
		if tb, err := DecodeTableSettings(body); err != nil {
			is400(err)
		} else {
			out := AppendTableSettings(nil, storage.TableInfo{Name: tb.Name, Settings: tb.Settings})
			back, err := DecodeTableSettings(out)
			if err != nil || back.Settings.Elastic != tb.Settings.Elastic ||
				(tb.Settings.TTLOn() && back.Settings.DefaultTTL != tb.Settings.DefaultTTL) ||
				(tb.Settings.Elastic && back.Settings.TTLPropertyName() != tb.Settings.TTLPropertyName()) ||
				len(back.Settings.Indexes) != len(tb.Settings.Indexes) {
				t.Fatalf("settings %+v: %+v %v (%s)", tb.Settings, back.Settings, err, out)
			}
		}
		tb, err := DecodeTable(body)
		if err != nil {
			is400(err)
			return
		}
		if !json.Valid(bytes.TrimPrefix(body, []byte("\xEF\xBB\xBF"))) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		out := AppendTableInfo(nil, storage.TableInfo{Name: tb.Name, Settings: tb.Settings},
			TableOptions{Level: FullMetadata, ServiceRoot: "http://h/a", Account: "a", Element: true, Select: SelectElastic | SelectDefaultTTL | SelectTTLProperty})
		back, err := DecodeTable(out)
		if err != nil || back.Name != tb.Name || !back.HasSettings || back.Settings.Elastic != tb.Settings.Elastic {
			t.Fatalf("table %q %+v: %+v %v (%s)", tb.Name, tb.Settings, back, err, out)
		}
	})
}

// FuzzParseLevel: never panics; $format and Accept agree on single media types.
func FuzzParseLevel(f *testing.F) {
	for _, s := range []string{"application/json", "application/json;odata=nometadata",
		"application/json; odata=fullmetadata;streaming=true", "application/atom+xml",
		"*/*", "application/json;odata=nometadata;q=0.5, application/json;odata=fullmetadata", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, ok := ParseLevel(s)
		if l2, ok2 := NegotiateLevel(s, "application/xml"); trimSpace(s) != "" && !equalFoldJSON(s) && (ok2 != ok || (ok && l2 != l)) {
			t.Fatalf("ParseLevel(%q) = %s,%v but NegotiateLevel($format) = %s,%v", s, l, ok, l2, ok2)
		}
		NegotiateLevel("", s)
		if ok && l > FullMetadata {
			t.Fatalf("level %d", l)
		}
	})
}

func equalFoldJSON(s string) bool {
	return len(trimSpace(s)) == 4 && bytes.EqualFold([]byte(trimSpace(s)), []byte("json"))
}

// FuzzParseDateTimeFast: the fast path agrees with entity.ParseDateTime.
func FuzzParseDateTimeFast(f *testing.F) {
	for _, s := range []string{"2024-05-01T10:00:00.1234567Z", "2024-02-29T00:00:00Z", "0000-01-01T00:00:00.1Z", "1601-01-01T00:00:00Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseDateTimeFast([]byte(s))
		if !ok {
			return
		}
		want, err := entity.ParseDateTime(s)
		if err != nil || got != want {
			t.Fatalf("%q: fast %d, entity %d %v", s, got, want, err)
		}
	})
}

// FuzzDecodeTypedValue drives the conversion paths directly: one property, a given type
// annotation (or none), and any value text as a JSON string or as a raw JSON literal.
func FuzzDecodeTypedValue(f *testing.F) {
	for _, s := range []string{"123", "-9223372036854775808", "1.5e3", "NaN", "-Infinity", "true",
		"2024-05-01T10:00:00.1234567Z", "2008-07-10T02:00:00+02:00", "c9da6455-213d-42c9-9a79-3e9149a57833",
		"AQID", "AQ", ""} {
		for typ := range uint8(9) {
			f.Add(typ, s, false)
		}
	}
	f.Add(uint8(5), "5", true)
	f.Add(uint8(3), "2147483648", true)
	f.Fuzz(func(t *testing.T, typ uint8, value string, raw bool) {
		body := []byte(`{"PartitionKey":"p","RowKey":"r",`)
		if typ%9 != 0 {
			body = append(body, `"v@odata.type":"`...)
			body = append(body, edmNames[typ%9]...)
			body = append(body, `",`...)
		}
		body = append(body, `"v":`...)
		if raw {
			body = append(body, value...)
		} else {
			body = AppendString(body, value)
		}
		body = append(body, '}')
		e, _, err := DecodeEntity(body)
		if err != nil {
			var ae *azerr.Error
			if !errors.As(err, &ae) || ae.Status != 400 {
				t.Fatalf("error %v is not a 400 *azerr.Error", err)
			}
			return
		}
		out := AppendEntity(nil, &e, 1, EntityOptions{Level: MinimalMetadata})
		back, _, err := DecodeEntity(out)
		if err != nil || !entityEqual(&back, &e) {
			t.Fatalf("round trip: %s -> %s -> %v %s", body, out, err, describe(&back))
		}
		if len(e.Props) == 1 && e.Props[0].Value.Type == entity.DateTime {
			if err := entity.ValidateValue("v", e.Props[0].Value); err != nil {
				t.Fatalf("decoded DateTime fails validation: %v", err)
			}
		}
	})
}

// FuzzAppendEntitySelect: the prepared Selection writes exactly what the straightforward
// reading of $select does (selected properties in stored order, then each selected name the
// entity lacks as null, once, in list order; system properties only when named; odata.*
// and '@' names ignored), and valid JSON.
func FuzzAppendEntitySelect(f *testing.F) {
	f.Add("A,Missing,PartitionKey,A,B", "A,B,C")
	f.Add("odata.etag,x@y,,Timestamp,RowKey", "x@y,Timestamp2")
	f.Add("", "A")
	f.Fuzz(func(t *testing.T, list, props string) {
		names := strings.Split(list, ",")
		if list == "" {
			names = nil
		}
		var e entity.Entity
		e.PartitionKey, e.RowKey = "p", "r"
		seen := map[string]bool{}
		for i, p := range strings.Split(props, ",") {
			if seen[p] {
				continue
			}
			seen[p] = true
			e.Props = append(e.Props, entity.Property{Name: p, Value: entity.Int32Value(int32(i))})
		}
		o := EntityOptions{Level: NoMetadata, Select: NewSelection(names)}
		got := AppendEntity(nil, &e, 1, o)
		if !json.Valid(got) && utf8.ValidString(list) && utf8.ValidString(props) {
			t.Fatalf("invalid JSON %q", got)
		}
		if want := naiveSelect(&e, names); string(got) != string(want) {
			t.Fatalf("select %q of %q:\n got %s\nwant %s", list, props, got, want)
		}
		rec := storage.Record{Entity: entity.Entity{PartitionKey: "p", RowKey: "r"}, Version: 1, Encoded: entity.AppendProps(nil, e.Props)}
		if stored := AppendRecord(nil, &rec, o); string(stored) != string(got) {
			t.Fatalf("select %q of %q from the stored form:\n got %s\nwant %s", list, props, stored, got)
		}
	})
}

// naiveSelect is the reading of $select the encoder implements, written plainly.
func naiveSelect(e *entity.Entity, names []string) []byte {
	if len(names) == 0 {
		return AppendEntity(nil, e, 1, EntityOptions{Level: NoMetadata})
	}
	has := func(n string) bool { return slices.Contains(names, n) }
	dst := []byte{'{'}
	if has("PartitionKey") {
		dst = append(comma(dst), `"PartitionKey":`...)
		dst = AppendString(dst, e.PartitionKey)
	}
	if has("RowKey") {
		dst = append(comma(dst), `"RowKey":`...)
		dst = AppendString(dst, e.RowKey)
	}
	if has("Timestamp") {
		dst = append(comma(dst), `"Timestamp":"`...)
		dst = append(appendTicks(dst, 1), '"')
	}
	for _, p := range e.Props {
		if has(p.Name) && selectableCustom(p.Name) {
			dst = appendProperty(comma(dst), p.Name, &p.Value, false)
		}
	}
	for i, n := range names {
		if !selectableCustom(n) || slices.Contains(names[:i], n) {
			continue
		}
		if _, ok := e.Get(n); !ok {
			dst = append(AppendString(comma(dst), n), ":null"...)
		}
	}
	return append(dst, '}')
}
