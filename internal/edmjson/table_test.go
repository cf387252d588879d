package edmjson

import (
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/storage"
)

func TestDecodeTable(t *testing.T) {
	type st = storage.TableSettings
	for _, tc := range []struct {
		body     string
		want     string
		settings st
		has      bool
		code     azerr.Code
		detail   string // a part of the message or detail, for errors
	}{
		{body: `{"TableName":"mytable"}`, want: "mytable"},
		{body: ` {"odata.metadata":"x","TableName":"Tbl1","other":5} `, want: "Tbl1"},
		{body: `{"TableName@odata.type":"Edm.String","TableName":"t\u0041b"}`, want: "tAb"},
		{body: `{"TableName":""}`, want: ""},
		{body: `{}`, code: azerr.PropertiesNeedValue},
		{body: `{"tablename":"x"}`, code: azerr.PropertiesNeedValue},
		{body: `{"TableName":null}`, code: azerr.PropertiesNeedValue},
		{body: `{"TableName":5}`, code: azerr.InvalidInput},
		{body: `{"TableName":"a","TableName":"b"}`, code: azerr.DuplicatePropertiesSpecified},
		{body: `{"TableName":["a"]}`, code: azerr.InvalidInput},
		{body: `{"TableName":"a"`, code: azerr.InvalidInput},
		{body: ``, code: azerr.InvalidInput},

		// Settings members.
		{body: `{"TableName":"e","Elastic":true}`, want: "e", settings: st{Elastic: true}, has: true},
		{body: `{"Elastic":false,"TableName":"e"}`, want: "e", has: true},
		{body: `{"TableName":"e","Elastic":null}`, want: "e", has: true},
		{body: `{"TableName":"e","Elastic":true,"DefaultTimeToLive":86400}`, want: "e", settings: st{Elastic: true, DefaultTTL: 86400}, has: true},
		{body: `{"TableName":"e","Elastic":true,"DefaultTimeToLive":-1,"TimeToLiveProperty":"ttl"}`, want: "e", settings: st{Elastic: true, DefaultTTL: -1, TTLProperty: "ttl"}, has: true},
		{body: `{"TableName":"e","Elastic":true,"DefaultTimeToLive":2147483647}`, want: "e", settings: st{Elastic: true, DefaultTTL: 2147483647}, has: true},
		{body: `{"TableName":"e","Elastic":true,"DefaultTimeToLive":null,"TimeToLiveProperty":null}`, want: "e", settings: st{Elastic: true}, has: true},
		// Consistency is the table layer's check: TTL without Elastic decodes.
		{body: `{"TableName":"e","DefaultTimeToLive":60}`, want: "e", settings: st{DefaultTTL: 60}, has: true},
		{body: `{"TableName":"e","Elastic":"true"}`, code: azerr.InvalidInput, detail: "'Elastic' must be true or false"},
		{body: `{"TableName":"e","Elastic":1}`, code: azerr.InvalidInput, detail: "'Elastic' must be true or false"},
		{body: `{"TableName":"e","Elastic":true,"DefaultTimeToLive":0}`, code: azerr.InvalidInput, detail: "The value 0 of 'DefaultTimeToLive'"},
		{body: `{"TableName":"e","Elastic":true,"DefaultTimeToLive":-2}`, code: azerr.InvalidInput, detail: "The value -2 of 'DefaultTimeToLive'"},
		{body: `{"TableName":"e","Elastic":true,"DefaultTimeToLive":2147483648}`, code: azerr.InvalidInput, detail: "2147483648"},
		{body: `{"TableName":"e","Elastic":true,"DefaultTimeToLive":99999999999999999999999}`, code: azerr.InvalidInput, detail: "DefaultTimeToLive"},
		{body: `{"TableName":"e","Elastic":true,"DefaultTimeToLive":1.5}`, code: azerr.InvalidInput, detail: "The value 1.5 of 'DefaultTimeToLive'"},
		{body: `{"TableName":"e","Elastic":true,"DefaultTimeToLive":1e3}`, code: azerr.InvalidInput, detail: "DefaultTimeToLive"},
		{body: `{"TableName":"e","Elastic":true,"DefaultTimeToLive":"60"}`, code: azerr.InvalidInput, detail: `The value "60" of 'DefaultTimeToLive'`},
		{body: `{"TableName":"e","Elastic":true,"DefaultTimeToLive":true}`, code: azerr.InvalidInput, detail: "DefaultTimeToLive"},
		{body: `{"TableName":"e","Elastic":true,"TimeToLiveProperty":""}`, code: azerr.InvalidInput, detail: "'TimeToLiveProperty' must be a property name"},
		{body: `{"TableName":"e","Elastic":true,"TimeToLiveProperty":5}`, code: azerr.InvalidInput, detail: "'TimeToLiveProperty' must be a property name"},
		{body: `{"TableName":"e","Elastic":true,"Elastic":false}`, code: azerr.DuplicatePropertiesSpecified},
		{body: `{"TableName":"e","Elastic":{"a":1}}`, code: azerr.InvalidInput},

		// Index declarations: an array of objects, strictly decoded; State (an answer's)
		// is ignored.
		{body: `{"TableName":"e","Elastic":true,"Indexes":[{"Name":"ByA","Properties":["A"]},{"Name":"U","Properties":["B","C"],"Unique":true,"State":"ready"}]}`,
			want: "e", has: true, settings: st{Elastic: true, Indexes: []storage.IndexDef{
				{Name: "ByA", Properties: []string{"A"}}, {Name: "U", Properties: []string{"B", "C"}, Unique: true}}}},
		{body: `{"TableName":"e","Elastic":true,"Indexes":[{"Name":"a\"]}","Properties":["x"]}]}`,
			want: "e", has: true, settings: st{Elastic: true, Indexes: []storage.IndexDef{{Name: `a"]}`, Properties: []string{"x"}}}}},
		{body: `{"TableName":"e","Elastic":true,"Indexes":null}`, want: "e", has: true, settings: st{Elastic: true}},
		{body: `{"TableName":"e","Elastic":true,"Indexes":[]}`, want: "e", has: true, settings: st{Elastic: true, Indexes: []storage.IndexDef{}}},
		{body: `{"TableName":"e","Indexes":[{"Name":"A","Props":["A"]}]}`, code: azerr.InvalidInput, detail: "'Indexes' must be an array of objects"},
		{body: `{"TableName":"e","Indexes":[{"Name":"A","Properties":"A"}]}`, code: azerr.InvalidInput, detail: "'Indexes'"},
		{body: `{"TableName":"e","Indexes":5}`, code: azerr.InvalidInput, detail: "'Indexes' must be an array"},
		{body: `{"TableName":"e","Indexes":[{"Name":"A"}`, code: azerr.InvalidInput},
		{body: `{"TableName":"e","Elastic":[true]}`, code: azerr.InvalidInput, detail: "must not be an array"},
	} {
		got, err := DecodeTable([]byte(tc.body))
		if codeOf(err) != tc.code || (err != nil) != (tc.code != "") {
			t.Errorf("DecodeTable(%s) = %+v, %v; want code %q", tc.body, got, err, tc.code)
			continue
		}
		if err != nil {
			if e, _ := azerr.As(err); !strings.Contains(e.Message+e.Detail, tc.detail) {
				t.Errorf("DecodeTable(%s): message %q, detail %q; want %q in them", tc.body, e.Message, e.Detail, tc.detail)
			}
			continue
		}
		if got.Name != tc.want || !got.HasName || !got.Settings.Equal(tc.settings) || got.HasSettings != tc.has {
			t.Errorf("DecodeTable(%s) = %+v; want name %q, settings %+v, has %v", tc.body, got, tc.want, tc.settings, tc.has)
		}
	}
}

func TestDecodeTableSettings(t *testing.T) {
	type st = storage.TableSettings
	for _, tc := range []struct {
		body     string
		name     string
		settings st
		code     azerr.Code
		detail   string
	}{
		{body: `{}`},
		{body: `{"Elastic":true}`, settings: st{Elastic: true}},
		{body: `{"TableName":"Events","Elastic":true,"DefaultTimeToLive":5,"TimeToLiveProperty":"Expiry"}`, name: "Events", settings: st{Elastic: true, DefaultTTL: 5, TTLProperty: "Expiry"}},
		{body: `{"odata.metadata":"x","Elastic@odata.type":"Edm.Boolean","Elastic":true}`, settings: st{Elastic: true}},
		{body: `{"TableName":null,"Elastic":false}`},
		{body: `{"Elastic":true,"DefaultTTL":5}`, code: azerr.InvalidInput, detail: "The member 'DefaultTTL' is not a table setting"},
		{body: `{"elastic":true}`, code: azerr.InvalidInput, detail: "The member 'elastic' is not a table setting"},
		{body: `{"TableName":1}`, code: azerr.InvalidInput},
		{body: `{"DefaultTimeToLive":0}`, code: azerr.InvalidInput, detail: "DefaultTimeToLive"},
		{body: `[]`, code: azerr.InvalidInput},
		{body: ``, code: azerr.InvalidInput},
	} {
		got, err := DecodeTableSettings([]byte(tc.body))
		if codeOf(err) != tc.code || (err != nil) != (tc.code != "") {
			t.Errorf("DecodeTableSettings(%s) = %+v, %v; want code %q", tc.body, got, err, tc.code)
			continue
		}
		if err != nil {
			if e, _ := azerr.As(err); !strings.Contains(e.Message+e.Detail, tc.detail) {
				t.Errorf("DecodeTableSettings(%s): message %q, detail %q; want %q in them", tc.body, e.Message, e.Detail, tc.detail)
			}
			continue
		}
		if got.Name != tc.name || got.HasName != (tc.name != "") || !got.Settings.Equal(tc.settings) {
			t.Errorf("DecodeTableSettings(%s) = %+v; want name %q, settings %+v", tc.body, got, tc.name, tc.settings)
		}
	}
}

func TestTableSelect(t *testing.T) {
	all := SelectElastic | SelectDefaultTTL | SelectTTLProperty
	for _, tc := range []struct {
		names []string
		want  TableSelect
	}{
		{nil, 0},
		{[]string{"TableName"}, 0},
		{[]string{"TableName", "Elastic"}, SelectElastic},
		{[]string{"DefaultTimeToLive", "elastic", "x"}, SelectDefaultTTL}, // names are case-sensitive
		{[]string{"TimeToLiveProperty", "Elastic", "DefaultTimeToLive"}, all},
	} {
		if got := NewTableSelect(tc.names); got != tc.want {
			t.Errorf("NewTableSelect(%q) = %b, want %b", tc.names, got, tc.want)
		}
	}
	o := TableOptions{Level: NoMetadata, Select: all}
	for _, tc := range []struct {
		s    storage.TableSettings
		sel  TableSelect
		want string
	}{
		{storage.TableSettings{}, all, `{"TableName":"t","Elastic":false,"DefaultTimeToLive":null,"TimeToLiveProperty":null}`},
		{storage.TableSettings{Elastic: true}, all, `{"TableName":"t","Elastic":true,"DefaultTimeToLive":null,"TimeToLiveProperty":"TTLInSeconds"}`},
		{storage.TableSettings{Elastic: true, DefaultTTL: -1, TTLProperty: "exp"}, all, `{"TableName":"t","Elastic":true,"DefaultTimeToLive":-1,"TimeToLiveProperty":"exp"}`},
		{storage.TableSettings{Elastic: true, DefaultTTL: 60}, SelectDefaultTTL, `{"TableName":"t","DefaultTimeToLive":60}`},
		{storage.TableSettings{Elastic: true, DefaultTTL: 60}, 0, `{"TableName":"t"}`},
	} {
		o.Select = tc.sel
		if got := string(AppendTableInfo(nil, storage.TableInfo{Name: "t", Settings: tc.s}, o)); got != tc.want {
			t.Errorf("AppendTableInfo(%+v, %b):\n got %s\nwant %s", tc.s, tc.sel, got, tc.want)
		}
	}
	// Full metadata: the members follow TableName.
	got := string(AppendTableInfo(nil, storage.TableInfo{Name: "t", Settings: storage.TableSettings{Elastic: true}},
		TableOptions{Level: FullMetadata, ServiceRoot: testRoot, Account: testAccount, Select: SelectElastic}))
	want := `{"odata.type":"devstoreaccount1.Tables","odata.id":"` + testRoot + `/Tables('t')","odata.editLink":"Tables('t')","TableName":"t","Elastic":true}`
	if got != want {
		t.Errorf("full metadata:\n got %s\nwant %s", got, want)
	}
}

func TestAppendTableSettings(t *testing.T) {
	for _, tc := range []struct {
		s    storage.TableSettings
		want string
	}{
		{storage.TableSettings{}, `{"TableName":"T1","Elastic":false}`},
		{storage.TableSettings{Elastic: true}, `{"TableName":"T1","Elastic":true,"TimeToLiveProperty":"TTLInSeconds"}`},
		{storage.TableSettings{Elastic: true, DefaultTTL: 86400}, `{"TableName":"T1","Elastic":true,"DefaultTimeToLive":86400,"TimeToLiveProperty":"TTLInSeconds"}`},
		{storage.TableSettings{Elastic: true, DefaultTTL: -1, TTLProperty: "Exp"}, `{"TableName":"T1","Elastic":true,"DefaultTimeToLive":-1,"TimeToLiveProperty":"Exp"}`},
	} {
		got := AppendTableSettings(nil, storage.TableInfo{Name: "T1", Settings: tc.s})
		if string(got) != tc.want {
			t.Errorf("AppendTableSettings(%+v):\n got %s\nwant %s", tc.s, got, tc.want)
		}
		// The answer is a PUT body for the same settings.
		back, err := DecodeTableSettings(got)
		want := tc.s
		if want.TTLProperty == "" && want.Elastic {
			want.TTLProperty = storage.DefaultTTLProperty
		}
		if err != nil || back.Name != "T1" || !back.Settings.Equal(want) {
			t.Errorf("DecodeTableSettings(%s) = %+v, %v; want %+v", got, back, err, want)
		}
	}
}

// TestIndexesRoundTrip: a settings answer with indexes is a PUT body for the same
// declarations, and Query Tables writes them when $select names Indexes.
func TestIndexesRoundTrip(t *testing.T) {
	s := storage.TableSettings{Elastic: true, IndexIDs: 5, Indexes: []storage.IndexDef{
		{Name: "ByA", Properties: []string{"A"}, ID: 1, State: storage.IndexReady, Progress: 40},
		{Name: "U", Properties: []string{"B", "C"}, Unique: true, ID: 2, State: storage.IndexBuilding},
		{Name: "V", Properties: []string{"D"}, ID: 4, State: storage.IndexBuilding, Progress: 1234},
		{Name: "W", Properties: []string{"E"}, Unique: true, ID: 5, State: storage.IndexFailed, Progress: 9, Failure: `two entities hold one value: ("p", "1") and ("p", "2")`}}}
	body := AppendTableSettings(nil, storage.TableInfo{Name: "t", Settings: s})
	// Progress while building (0 too), Failure when failed; neither otherwise.
	if !strings.Contains(string(body), `"Indexes":[{"Name":"ByA","Properties":["A"],"State":"ready"},`+
		`{"Name":"U","Properties":["B","C"],"Unique":true,"State":"building","Progress":0},`+
		`{"Name":"V","Properties":["D"],"State":"building","Progress":1234},`+
		`{"Name":"W","Properties":["E"],"Unique":true,"State":"failed","Failure":"two entities hold one value: (\"p\", \"1\") and (\"p\", \"2\")"}]`) {
		t.Fatalf("answer %s", body)
	}
	// The answer is a PUT body: the engine's members are accepted and ignored.
	back, err := DecodeTableSettings(body)
	if err != nil || len(back.Settings.Indexes) != 4 {
		t.Fatalf("DecodeTableSettings(%s) = %+v, %v", body, back, err)
	}
	for i, d := range back.Settings.Indexes {
		if !d.SameDefinition(s.Indexes[i]) || d.ID != 0 || d.State != "" || d.Progress != 0 || d.Failure != "" {
			t.Fatalf("index %d read back as %+v, want the declaration of %+v", i, d, s.Indexes[i])
		}
	}
	sel := appendSelectedSettings(nil, s, NewTableSelect([]string{"Indexes"}))
	if !strings.HasPrefix(string(sel), `,"Indexes":[{"Name":"ByA"`) {
		t.Fatalf("selected %s", sel)
	}
	if sel := appendSelectedSettings(nil, storage.TableSettings{}, SelectIndexes); string(sel) != `,"Indexes":null` {
		t.Fatalf("selected on a table without indexes: %s", sel)
	}
}
