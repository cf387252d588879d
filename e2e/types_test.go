package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// typedProp is one property of the all-types entity and how it must come back.
type typedProp struct {
	name string
	// annotation expected at minimal/full metadata ("" = none may be present)
	annotation string
	// check validates the raw JSON value (identical at every metadata level)
	check func(raw json.RawMessage) string
}

const (
	tStr     = "héllo \"wörld\" 'x' \\ / 日本語 ключ 😀 \t\n\r\u0001 end"
	tDt7     = "2024-05-01T10:00:00.1234567Z"
	tGUID    = "c9da6455-213d-42c9-9a79-3e9149a57833"
	tStrDate = "2024-05-01T10:00:00Z"
)

var tBin = func() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}()

// exactRaw expects the raw JSON text exactly.
func exactRaw(want string) func(json.RawMessage) string {
	return func(raw json.RawMessage) string {
		if string(raw) != want {
			return "raw JSON " + string(raw) + ", want " + want
		}
		return ""
	}
}

// jsonString expects a JSON string equal to want.
func jsonString(want string) func(json.RawMessage) string {
	return func(raw json.RawMessage) string {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "not a JSON string: " + string(raw)
		}
		if s != want {
			return "string " + strconv.Quote(s) + ", want " + strconv.Quote(want)
		}
		return ""
	}
}

// jsonDouble expects a JSON number written as a double (with '.', 'e' or 'E') equal to want,
// including the sign of zero.
func jsonDouble(want float64) func(json.RawMessage) string {
	return func(raw json.RawMessage) string {
		s := string(raw)
		if !strings.ContainsAny(s, ".eE") || strings.HasPrefix(s, `"`) {
			return "double written as " + s + " (must be a JSON number with '.' or an exponent)"
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return "bad number " + s
		}
		if v != want || math.Signbit(v) != math.Signbit(want) {
			return "double " + s + ", want " + strconv.FormatFloat(want, 'g', -1, 64)
		}
		return ""
	}
}

// jsonDateTime expects a DateTime string ending in Z at the given instant.
func jsonDateTime(want time.Time) func(json.RawMessage) string {
	return func(raw json.RawMessage) string {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "not a JSON string: " + string(raw)
		}
		if !strings.HasSuffix(s, "Z") {
			return "DateTime " + s + " must be UTC with Z"
		}
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || !v.Equal(want) {
			return "DateTime " + s + ", want " + want.Format(time.RFC3339Nano)
		}
		return ""
	}
}

var typedProps = []typedProp{
	{"I32Min", "", exactRaw("-2147483648")},
	{"I32Max", "", exactRaw("2147483647")},
	{"I32Zero", "", exactRaw("0")},
	{"I64Min", "Edm.Int64", exactRaw(`"-9223372036854775808"`)},
	{"I64Max", "Edm.Int64", exactRaw(`"9223372036854775807"`)},
	{"I64Small", "Edm.Int64", exactRaw(`"5"`)},
	{"I64Precise", "Edm.Int64", exactRaw(`"9007199254740993"`)},
	{"DblFive", "", exactRaw("5.0")},
	{"DblTenth", "", jsonDouble(0.1)},
	{"DblBig", "", jsonDouble(1e300)},
	{"DblTiny", "", jsonDouble(-1.5e-300)},
	{"DblMaxInt", "", jsonDouble(9007199254740992)},
	{"DblNaN", "Edm.Double", exactRaw(`"NaN"`)},
	{"DblInf", "Edm.Double", exactRaw(`"Infinity"`)},
	{"DblNegInf", "Edm.Double", exactRaw(`"-Infinity"`)},
	{"Str", "", jsonString(tStr)},
	{"StrEmpty", "", jsonString("")},
	{"StrDateLike", "", jsonString(tStrDate)},
	{"StrNumeric", "", jsonString("123")},
	{"BoolT", "", exactRaw("true")},
	{"BoolF", "", exactRaw("false")},
	{"Dt7", "Edm.DateTime", jsonString(tDt7)},
	{"DtMin", "Edm.DateTime", jsonDateTime(time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC))},
	{"DtMax", "Edm.DateTime", jsonString("9999-12-31T23:59:59.9999999Z")},
	{"Guid", "Edm.Guid", jsonString(tGUID)},
	{"Bin", "Edm.Binary", jsonString(base64.StdEncoding.EncodeToString(tBin))},
	{"BinEmpty", "Edm.Binary", jsonString("")},
	{"name", "", jsonString("lower")},
	{"Name", "", jsonString("upper")},
}

// sdkTypedEntity is the all-types entity built with the SDK's EDM wrapper types.
func sdkTypedEntity(t testing.TB, pk, rk string) []byte {
	dt7, _ := time.Parse(time.RFC3339Nano, tDt7)
	props := map[string]any{
		"I32Min":     int32(math.MinInt32),
		"I32Max":     int32(math.MaxInt32),
		"I32Zero":    int32(0),
		"I64Min":     aztables.EDMInt64(math.MinInt64),
		"I64Max":     aztables.EDMInt64(math.MaxInt64),
		"I64Small":   aztables.EDMInt64(5),
		"I64Precise": aztables.EDMInt64(9007199254740993),
		// Go's JSON writes 5.0 as 5, so an integral double needs the annotation (the
		// server must accept Edm.Double on a JSON integer, docs/protocol.md §4.2).
		"DblFive":              5.0,
		"DblFive@odata.type":   "Edm.Double",
		"DblTenth":             0.1,
		"DblBig":               1e300,
		"DblTiny":              -1.5e-300,
		"DblMaxInt":            float64(9007199254740992),
		"DblMaxInt@odata.type": "Edm.Double",
		"DblNaN":               "NaN",
		"DblNaN@odata.type":    "Edm.Double",
		"DblInf":               "Infinity",
		"DblInf@odata.type":    "Edm.Double",
		"DblNegInf":            "-Infinity",
		"DblNegInf@odata.type": "Edm.Double",
		"Str":                  tStr,
		"StrEmpty":             "",
		"StrDateLike":          tStrDate,
		"StrNumeric":           "123",
		"BoolT":                true,
		"BoolF":                false,
		"Dt7":                  aztables.EDMDateTime(dt7),
		"DtMin":                aztables.EDMDateTime(time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC)),
		"DtMax":                aztables.EDMDateTime(time.Date(9999, 12, 31, 23, 59, 59, 999999900, time.UTC)),
		"Guid":                 aztables.EDMGUID(tGUID),
		"Bin":                  aztables.EDMBinary(tBin),
		"BinEmpty":             aztables.EDMBinary{},
		"name":                 "lower",
		"Name":                 "upper",
	}
	return marshal(t, aztables.EDMEntity{Entity: aztables.Entity{PartitionKey: pk, RowKey: rk}, Properties: props})
}

// rawTypedEntity is the same entity as hand-written JSON, the way .NET/Python/JS write it.
func rawTypedEntity(pk, rk string) []byte {
	strJSON, _ := json.Marshal(tStr)
	return []byte(`{"PartitionKey":"` + pk + `","RowKey":"` + rk + `",` +
		`"I32Min":-2147483648,"I32Max":2147483647,"I32Zero":0,` +
		`"I64Min@odata.type":"Edm.Int64","I64Min":"-9223372036854775808",` +
		`"I64Max@odata.type":"Edm.Int64","I64Max":"9223372036854775807",` +
		`"I64Small@odata.type":"Edm.Int64","I64Small":"5",` +
		`"I64Precise@odata.type":"Edm.Int64","I64Precise":"9007199254740993",` +
		`"DblFive":5.0,"DblTenth":0.1,"DblBig":1e300,"DblTiny":-1.5E-300,` +
		`"DblMaxInt@odata.type":"Edm.Double","DblMaxInt":9007199254740992,` +
		`"DblNaN@odata.type":"Edm.Double","DblNaN":"NaN",` +
		`"DblInf@odata.type":"Edm.Double","DblInf":"Infinity",` +
		`"DblNegInf@odata.type":"Edm.Double","DblNegInf":"-Infinity",` +
		`"Str":` + string(strJSON) + `,"StrEmpty":"","StrDateLike":"` + tStrDate + `","StrNumeric":"123",` +
		`"BoolT":true,"BoolF":false,` +
		`"Dt7@odata.type":"Edm.DateTime","Dt7":"` + tDt7 + `",` +
		`"DtMin@odata.type":"Edm.DateTime","DtMin":"1601-01-01T00:00:00Z",` +
		`"DtMax@odata.type":"Edm.DateTime","DtMax":"9999-12-31T23:59:59.9999999Z",` +
		`"Guid@odata.type":"Edm.Guid","Guid":"` + tGUID + `",` +
		`"Bin@odata.type":"Edm.Binary","Bin":"` + base64.StdEncoding.EncodeToString(tBin) + `",` +
		`"BinEmpty@odata.type":"Edm.Binary","BinEmpty":"",` +
		`"name":"lower","Name":"upper"}`)
}

// checkTypedEDM checks the all-types entity as the SDK decodes it.
func checkTypedEDM(t testing.TB, e aztables.EDMEntity, what string) {
	t.Helper()
	p := e.Properties
	expect := func(name string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %s = %#v, want %#v", what, name, got, want)
		}
	}
	expect("I32Min", p["I32Min"], int32(math.MinInt32))
	expect("I32Max", p["I32Max"], int32(math.MaxInt32))
	expect("I32Zero", p["I32Zero"], int32(0))
	expect("I64Min", p["I64Min"], aztables.EDMInt64(math.MinInt64))
	expect("I64Max", p["I64Max"], aztables.EDMInt64(math.MaxInt64))
	expect("I64Small", p["I64Small"], aztables.EDMInt64(5))
	expect("I64Precise", p["I64Precise"], aztables.EDMInt64(9007199254740993))
	// DblFive and DblMaxInt: the SDK re-marshals responses through map[string]any, so an
	// integral double reaches EDMEntity as "5" and decodes as int32 — an SDK limitation;
	// the raw tests check the wire form.
	expect("DblTenth", p["DblTenth"], 0.1)
	expect("DblBig", p["DblBig"], 1e300)
	expect("DblTiny", p["DblTiny"], -1.5e-300)
	expect("Str", p["Str"], tStr)
	expect("StrEmpty", p["StrEmpty"], "")
	expect("StrDateLike", p["StrDateLike"], tStrDate)
	expect("StrNumeric", p["StrNumeric"], "123")
	expect("BoolT", p["BoolT"], true)
	expect("BoolF", p["BoolF"], false)
	expect("Guid", p["Guid"], aztables.EDMGUID(tGUID))
	expect("name", p["name"], "lower")
	expect("Name", p["Name"], "upper")
	dt7, _ := time.Parse(time.RFC3339Nano, tDt7)
	for name, want := range map[string]time.Time{
		"Dt7":   dt7,
		"DtMin": time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC),
		"DtMax": time.Date(9999, 12, 31, 23, 59, 59, 999999900, time.UTC),
	} {
		v, ok := p[name].(aztables.EDMDateTime)
		if !ok || !time.Time(v).Equal(want) {
			t.Errorf("%s: %s = %#v, want EDMDateTime %v", what, name, p[name], want)
		}
	}
	if v, ok := p["Bin"].(aztables.EDMBinary); !ok || !bytes.Equal(v, tBin) {
		t.Errorf("%s: Bin = %#v", what, p["Bin"])
	}
	if v, ok := p["BinEmpty"].(aztables.EDMBinary); !ok || len(v) != 0 {
		t.Errorf("%s: BinEmpty = %#v, want empty EDMBinary", what, p["BinEmpty"])
	}
	if _, ok := p["DblNaN"]; !ok {
		t.Errorf("%s: DblNaN missing", what)
	}
	if len(p) != len(typedProps) {
		t.Errorf("%s: %d properties, want %d: %v", what, len(p), len(typedProps), p)
	}
}

// checkTypedWire checks one entity object of a raw response at the given metadata level.
func checkTypedWire(t testing.TB, obj map[string]json.RawMessage, level, acct, table, pk, rk string, single bool) {
	t.Helper()
	for _, tp := range typedProps {
		raw, ok := obj[tp.name]
		if !ok {
			t.Errorf("%s: property %s missing", level, tp.name)
			continue
		}
		if msg := tp.check(raw); msg != "" {
			t.Errorf("%s: %s: %s", level, tp.name, msg)
		}
		ann, hasAnn := rawString(t, obj, tp.name+"@odata.type")
		switch {
		case level == "nometadata" && hasAnn:
			t.Errorf("nometadata: %s has annotation %q", tp.name, ann)
		case level != "nometadata" && ann != tp.annotation:
			t.Errorf("%s: %s@odata.type = %q, want %q", level, tp.name, ann, tp.annotation)
		}
	}
	if got, _ := rawString(t, obj, "PartitionKey"); got != pk {
		t.Errorf("%s: PartitionKey %q", level, got)
	}
	if got, _ := rawString(t, obj, "RowKey"); got != rk {
		t.Errorf("%s: RowKey %q", level, got)
	}
	ts, ok := rawString(t, obj, "Timestamp")
	if !ok {
		t.Errorf("%s: Timestamp missing", level)
	} else {
		checkTimestamp(t, ts)
	}
	tsAnn, hasTSAnn := rawString(t, obj, "Timestamp@odata.type")
	etag, hasETag := rawString(t, obj, "odata.etag")
	_, hasType := obj["odata.type"]
	_, hasID := obj["odata.id"]
	_, hasEdit := obj["odata.editLink"]
	switch level {
	case "nometadata":
		for k := range obj {
			if strings.HasPrefix(k, "odata.") || strings.Contains(k, "@odata.") {
				t.Errorf("nometadata: key %q present", k)
			}
		}
	case "minimalmetadata":
		if !hasETag {
			t.Errorf("minimal: odata.etag missing")
		} else {
			checkETag(t, etag)
		}
		if hasTSAnn {
			t.Errorf("minimal: Timestamp@odata.type present")
		}
		if hasType || hasID || hasEdit {
			t.Errorf("minimal: odata.type/id/editLink present")
		}
	case "fullmetadata":
		if !hasETag {
			t.Errorf("full: odata.etag missing")
		} else {
			checkETag(t, etag)
		}
		if tsAnn != "Edm.DateTime" {
			t.Errorf("full: Timestamp@odata.type = %q, want Edm.DateTime", tsAnn)
		}
		link := table + "(PartitionKey='" + pk + "',RowKey='" + rk + "')"
		if got, _ := rawString(t, obj, "odata.editLink"); got != link {
			t.Errorf("full: odata.editLink = %q, want %q", got, link)
		}
		if got, _ := rawString(t, obj, "odata.id"); !strings.HasSuffix(got, "/"+link) {
			t.Errorf("full: odata.id = %q, want .../%s", got, link)
		}
		if got, _ := rawString(t, obj, "odata.type"); got != acct+"."+table {
			t.Errorf("full: odata.type = %q, want %q", got, acct+"."+table)
		}
	}
	if md, ok := rawString(t, obj, "odata.metadata"); single && level != "nometadata" {
		if !strings.HasSuffix(md, "$metadata#"+table+"/@Element") {
			t.Errorf("%s: odata.metadata = %q, want ...$metadata#%s/@Element", level, md, table)
		}
	} else if ok && level == "nometadata" {
		t.Errorf("nometadata: odata.metadata present")
	}
}

var levels = []string{"nometadata", "minimalmetadata", "fullmetadata"}

func TestTypes(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name
	c, table := newTable(t, svc)

	if _, err := c.AddEntity(ctx(t), sdkTypedEntity(t, "types", "sdk"), nil); err != nil {
		t.Fatalf("AddEntity (SDK EDM types): %v", err)
	}
	r := srv.do(t, rawReq{Method: http.MethodPost, Path: "/" + acct + "/" + table,
		Header: map[string]string{"Prefer": "return-no-content"}, Body: rawTypedEntity("types", "raw")})
	requireStatus(t, r, http.StatusNoContent, "raw insert with Prefer: return-no-content")
	if r.Header.Get("Preference-Applied") != "return-no-content" {
		t.Errorf("raw insert: Preference-Applied = %q", r.Header.Get("Preference-Applied"))
	}
	if len(bytes.TrimSpace(r.Body)) != 0 {
		t.Errorf("204 insert has a body: %s", r.Body)
	}
	checkETag(t, r.Header.Get("ETag"))
	rks := []string{"raw", "sdk"}

	t.Run("SDKGetEntity", func(t *testing.T) {
		for _, rk := range rks {
			e, _ := getEDM(t, c, "types", rk)
			checkTypedEDM(t, e, "GetEntity "+rk)
		}
	})

	t.Run("SDKListEntities", func(t *testing.T) {
		got := listAll(t, c, nil)
		if len(got) != 2 {
			t.Fatalf("ListEntities returned %d entities", len(got))
		}
		for i, b := range got {
			e := decodeEDM(t, b)
			if e.RowKey != rks[i] {
				t.Errorf("entity %d RowKey %q, want %q (order)", i, e.RowKey, rks[i])
			}
			checkTypedEDM(t, e, "ListEntities "+e.RowKey)
		}
	})

	t.Run("RawGetEntityLevels", func(t *testing.T) {
		for _, rk := range rks {
			var minimalETag string
			for _, level := range levels {
				for _, via := range []string{"Accept", "$format"} {
					hdr := map[string]string{
						"x-ms-client-request-id": "crid-" + level + "-" + via,
						"Accept":                 "application/json;odata=" + level,
					}
					q := ""
					if via == "$format" {
						// $format overrides a conflicting Accept.
						hdr["Accept"] = "application/json;odata=fullmetadata"
						if level == "fullmetadata" {
							hdr["Accept"] = "application/json;odata=nometadata"
						}
						q = "$format=" + url.QueryEscape("application/json;odata="+level)
					}
					r := srv.do(t, rawReq{Method: http.MethodGet, Path: entityPath(acct, table, "types", rk), Query: q, Header: hdr})
					what := rk + " " + level + " via " + via
					requireStatus(t, r, http.StatusOK, what)
					checkStdHeaders(t, r, "2019-02-02", hdr["x-ms-client-request-id"])
					if got := mediaLevel(t, r.Header.Get("Content-Type")); got != level {
						t.Errorf("%s: Content-Type %q", what, r.Header.Get("Content-Type"))
					}
					obj := rawObject(t, r.Body)
					checkTypedWire(t, obj, level, acct, table, "types", rk, true)
					et := r.Header.Get("ETag")
					checkETag(t, et)
					if level != "nometadata" {
						if got, _ := rawString(t, obj, "odata.etag"); got != et {
							t.Errorf("%s: ETag header %q != odata.etag %q", what, et, got)
						}
					}
					if minimalETag == "" {
						minimalETag = et
					} else if et != minimalETag {
						t.Errorf("%s: ETag %q differs between levels (%q)", what, et, minimalETag)
					}
				}
			}
		}
	})

	t.Run("RawQueryLevels", func(t *testing.T) {
		for _, level := range levels {
			for _, path := range []string{"/" + acct + "/" + table + "()", "/" + acct + "/" + table} {
				r := srv.do(t, rawReq{Method: http.MethodGet, Path: path,
					Header: map[string]string{"Accept": "application/json;odata=" + level}})
				what := "query " + path + " " + level
				requireStatus(t, r, http.StatusOK, what)
				checkStdHeaders(t, r, "2019-02-02", "")
				if got := mediaLevel(t, r.Header.Get("Content-Type")); got != level {
					t.Errorf("%s: Content-Type %q", what, r.Header.Get("Content-Type"))
				}
				var body struct {
					Metadata *string                      `json:"odata.metadata"`
					Value    []map[string]json.RawMessage `json:"value"`
				}
				if err := json.Unmarshal(r.Body, &body); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				switch {
				case level == "nometadata" && body.Metadata != nil:
					t.Errorf("%s: odata.metadata present", what)
				case level != "nometadata" && (body.Metadata == nil || !strings.HasSuffix(*body.Metadata, "$metadata#"+table)):
					t.Errorf("%s: odata.metadata = %v, want ...$metadata#%s", what, body.Metadata, table)
				}
				if len(body.Value) != 2 {
					t.Fatalf("%s: %d entities", what, len(body.Value))
				}
				for i, obj := range body.Value {
					checkTypedWire(t, obj, level, acct, table, "types", rks[i], false)
				}
			}
		}
	})

	t.Run("RawVersionAndBareJSON", func(t *testing.T) {
		// x-ms-version is echoed, newer versions accepted; bare application/json means minimal.
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: entityPath(acct, table, "types", "raw"),
			Header: map[string]string{"x-ms-version": "2020-12-06", "Accept": "application/json"}})
		requireStatus(t, r, http.StatusOK, "GET with x-ms-version 2020-12-06")
		checkStdHeaders(t, r, "2020-12-06", "")
		checkTypedWire(t, rawObject(t, r.Body), "minimalmetadata", acct, table, "types", "raw", true)
		// whitespace in the media-type parameters is normalised
		r = srv.do(t, rawReq{Method: http.MethodGet, Path: entityPath(acct, table, "types", "raw"),
			Header: map[string]string{"Accept": "application/json; odata=nometadata"}})
		requireStatus(t, r, http.StatusOK, "GET with Accept with a space")
		checkTypedWire(t, rawObject(t, r.Body), "nometadata", acct, table, "types", "raw", true)
	})

	t.Run("SDKFormatOption", func(t *testing.T) {
		for _, f := range []aztables.MetadataFormat{aztables.MetadataFormatNone, aztables.MetadataFormatFull} {
			resp, err := c.GetEntity(ctx(t), "types", "raw", &aztables.GetEntityOptions{Format: &f})
			if err != nil {
				t.Fatalf("GetEntity Format %s: %v", f, err)
			}
			obj := rawObject(t, resp.Value)
			_, hasETag := obj["odata.etag"]
			_, hasID := obj["odata.id"]
			if f == aztables.MetadataFormatNone && (hasETag || hasID) {
				t.Errorf("Format none: metadata present: %s", resp.Value)
			}
			if f == aztables.MetadataFormatFull && !(hasETag && hasID) {
				t.Errorf("Format full: metadata missing: %s", resp.Value)
			}
		}
	})

	t.Run("AtomRejected", func(t *testing.T) {
		for _, path := range []string{entityPath(acct, table, "types", "raw"), "/" + acct + "/" + table + "()"} {
			r := srv.do(t, rawReq{Method: http.MethodGet, Path: path,
				Header: map[string]string{"Accept": "application/atom+xml"}})
			if r.Status != http.StatusUnsupportedMediaType {
				t.Errorf("GET %s with Accept atom: status %d, want 415", path, r.Status)
			}
			if got := r.Header.Get("x-ms-error-code"); got != "AtomFormatNotSupported" {
				t.Errorf("GET %s with Accept atom: x-ms-error-code %q, want AtomFormatNotSupported", path, got)
			}
		}
	})

	t.Run("ResendReadEntity", func(t *testing.T) {
		// What the server writes at full metadata it must accept back (system keys ignored).
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: entityPath(acct, table, "types", "raw"),
			Header: map[string]string{"Accept": "application/json;odata=fullmetadata"}})
		requireStatus(t, r, http.StatusOK, "get")
		obj := rawObject(t, r.Body)
		obj["RowKey"] = json.RawMessage(`"resent"`)
		body, _ := json.Marshal(obj)
		r = srv.do(t, rawReq{Method: http.MethodPost, Path: "/" + acct + "/" + table, Body: body})
		requireStatus(t, r, http.StatusCreated, "re-insert of a read entity")
		r = srv.do(t, rawReq{Method: http.MethodGet, Path: entityPath(acct, table, "types", "resent"),
			Header: map[string]string{"Accept": "application/json;odata=minimalmetadata"}})
		requireStatus(t, r, http.StatusOK, "get resent")
		checkTypedWire(t, rawObject(t, r.Body), "minimalmetadata", acct, table, "types", "resent", true)
		if _, err := c.DeleteEntity(ctx(t), "types", "resent", nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("InputVariants", func(t *testing.T) {
		// What the other SDKs send (docs/protocol.md §4.2, §13.17): annotated values as strings (JS),
		// Edm.String annotations (Python), Edm.Double on JSON integers (.NET), DateTime with
		// 0-7 fraction digits.
		body := `{"PartitionKey":"variants","RowKey":"v",` +
			`"I@odata.type":"Edm.Int32","I":"42",` +
			`"D@odata.type":"Edm.Double","D":"6824053932181",` +
			`"D2@odata.type":"Edm.Double","D2":3,` +
			`"B@odata.type":"Edm.Boolean","B":"true",` +
			`"S@odata.type":"Edm.String","S":"str",` +
			`"L@odata.type":"Edm.Int64","L":"-7",` +
			`"T0@odata.type":"Edm.DateTime","T0":"2021-07-08T09:10:09Z",` +
			`"T3@odata.type":"Edm.DateTime","T3":"2021-07-08T09:10:09.123Z",` +
			`"T6@odata.type":"Edm.DateTime","T6":"2021-07-08T09:10:09.123456Z",` +
			`"G@odata.type":"Edm.Guid","G":"C9DA6455-213D-42C9-9A79-3E9149A57833"}`
		r := srv.do(t, rawReq{Method: http.MethodPost, Path: "/" + acct + "/" + table, Body: []byte(body),
			Header: map[string]string{"Content-Type": "application/json;odata=nometadata", "Prefer": "return-no-content"}})
		requireStatus(t, r, http.StatusNoContent, "insert SDK input variants")
		r = srv.do(t, rawReq{Method: http.MethodGet, Path: entityPath(acct, table, "variants", "v")})
		requireStatus(t, r, http.StatusOK, "get variants")
		obj := rawObject(t, r.Body)
		at := func(s string) time.Time { v, _ := time.Parse(time.RFC3339Nano, s); return v }
		for name, tc := range map[string]struct {
			ann   string
			check func(json.RawMessage) string
		}{
			"I":  {"", exactRaw("42")},
			"D":  {"", jsonDouble(6824053932181)},
			"D2": {"", jsonDouble(3)},
			"B":  {"", exactRaw("true")},
			"S":  {"", jsonString("str")},
			"L":  {"Edm.Int64", exactRaw(`"-7"`)},
			"T0": {"Edm.DateTime", jsonDateTime(at("2021-07-08T09:10:09Z"))},
			"T3": {"Edm.DateTime", jsonDateTime(at("2021-07-08T09:10:09.123Z"))},
			"T6": {"Edm.DateTime", jsonDateTime(at("2021-07-08T09:10:09.123456Z"))},
		} {
			if msg := tc.check(obj[name]); msg != "" {
				t.Errorf("%s: %s", name, msg)
			}
			if ann, _ := rawString(t, obj, name+"@odata.type"); ann != tc.ann {
				t.Errorf("%s@odata.type = %q, want %q", name, ann, tc.ann)
			}
		}
		var g string
		if err := json.Unmarshal(obj["G"], &g); err != nil || !strings.EqualFold(g, tGUID) {
			t.Errorf("G = %s, want %s (any case)", obj["G"], tGUID)
		}
		if _, err := c.DeleteEntity(ctx(t), "variants", "v", nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("NegativeZero", func(t *testing.T) {
		// -0.0 is a finite IEEE double: it stays a double and keeps its sign.
		r := srv.do(t, rawReq{Method: http.MethodPost, Path: "/" + acct + "/" + table,
			Body: []byte(`{"PartitionKey":"zero","RowKey":"z","Z@odata.type":"Edm.Double","Z":-0.0}`)})
		requireStatus(t, r, http.StatusCreated, "insert -0.0")
		r = srv.do(t, rawReq{Method: http.MethodGet, Path: entityPath(acct, table, "zero", "z")})
		requireStatus(t, r, http.StatusOK, "get -0.0")
		obj := rawObject(t, r.Body)
		if msg := jsonDouble(math.Copysign(0, -1))(obj["Z"]); msg != "" {
			t.Errorf("Z: %s", msg)
		}
		if _, err := c.DeleteEntity(ctx(t), "zero", "z", nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("Select", func(t *testing.T) {
		for _, level := range []string{"minimalmetadata", "nometadata"} {
			r := srv.do(t, rawReq{Method: http.MethodGet, Path: entityPath(acct, table, "types", "raw"),
				Query:  "$select=" + url.QueryEscape("I32Max,Str,I64Max"),
				Header: map[string]string{"Accept": "application/json;odata=" + level}})
			requireStatus(t, r, http.StatusOK, "GET entity $select "+level)
			obj := rawObject(t, r.Body)
			for _, name := range []string{"I32Max", "Str", "I64Max"} {
				if _, ok := obj[name]; !ok {
					t.Errorf("%s $select: %s missing: %s", level, name, r.Body)
				}
			}
			if string(obj["I64Max"]) != `"9223372036854775807"` {
				t.Errorf("%s $select: I64Max = %s", level, obj["I64Max"])
			}
			ann, _ := rawString(t, obj, "I64Max@odata.type")
			if (level == "minimalmetadata") != (ann == "Edm.Int64") {
				t.Errorf("%s $select: I64Max@odata.type = %q", level, ann)
			}
			for _, tp := range typedProps {
				if tp.name == "I32Max" || tp.name == "Str" || tp.name == "I64Max" {
					continue
				}
				if _, ok := obj[tp.name]; ok {
					t.Errorf("%s $select: unselected %s returned", level, tp.name)
				}
			}
			if _, ok := obj["odata.etag"]; (level == "minimalmetadata") != ok {
				t.Errorf("%s $select: odata.etag presence wrong: %s", level, r.Body)
			}
		}

		// SDK: ListEntities with Select written with a space after the comma.
		sel := "I32Max, Str"
		filter := "PartitionKey eq 'types'"
		got := listAll(t, c, &aztables.ListEntitiesOptions{Select: &sel, Filter: &filter})
		if len(got) != 2 {
			t.Errorf("ListEntities with Select and Filter: %d entities, want 2", len(got))
		}
		for _, b := range got {
			e := decodeEDM(t, b)
			if len(e.Properties) != 2 || e.Properties["I32Max"] != int32(math.MaxInt32) || e.Properties["Str"] != tStr {
				t.Errorf("ListEntities Select %q: properties %v", sel, e.Properties)
			}
		}
	})

	t.Run("SelectMissingPropertyIsNull", func(t *testing.T) {
		// docs/protocol.md §3.5/§5.3: the real service returns a selected-but-absent property as null.
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: entityPath(acct, table, "types", "raw"),
			Query: "$select=" + url.QueryEscape("Str,NoSuchProp")})
		requireStatus(t, r, http.StatusOK, "GET entity $select with a missing property")
		obj := rawObject(t, r.Body)
		if v, ok := obj["NoSuchProp"]; !ok || string(v) != "null" {
			t.Errorf("NoSuchProp = %s (present %v), want null: %s", v, ok, r.Body)
		}
	})
}
