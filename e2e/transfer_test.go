package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// The data tools (issue 15): cerulean export, import and copy driven as a user runs them,
// checked entity by entity through the Go SDK.

// connString is a connection string for the server's default account.
func connString(srv *server) string {
	a := srv.Default()
	return fmt.Sprintf("DefaultEndpointsProtocol=%s;AccountName=%s;AccountKey=%s;TableEndpoint=%s", srv.scheme, a.Name, a.Key, srv.Endpoint(a.Name))
}

// edgeEntities are OData JSON bodies covering every EDM type and its edge values, and
// keys with quotes, '%', unicode, and empty. They are sent as raw JSON because the Go
// SDK's own marshalling cannot write NaN or Infinity.
var edgeEntities = []string{
	`{"PartitionKey":"p'1","RowKey":"it's","I64@odata.type":"Edm.Int64","I64":"9223372036854775807","I64min@odata.type":"Edm.Int64","I64min":"-9223372036854775808","I32":2147483647,"I32min":-2147483648}`,
	`{"PartitionKey":"p'1","RowKey":"100%","Dnan@odata.type":"Edm.Double","Dnan":"NaN","Dinf@odata.type":"Edm.Double","Dinf":"Infinity","Dninf@odata.type":"Edm.Double","Dninf":"-Infinity","Dz@odata.type":"Edm.Double","Dz":-0.0,"Done@odata.type":"Edm.Double","Done":1.0,"Dtiny":5e-324,"Dmax":1.7976931348623157e308,"Dpi":3.141592653589793}`,
	`{"PartitionKey":"üñí©ødé 😀","RowKey":"a\"b","T1@odata.type":"Edm.DateTime","T1":"1601-01-01T00:00:00.0000000Z","T2@odata.type":"Edm.DateTime","T2":"9999-12-31T23:59:59.9999999Z","T3@odata.type":"Edm.DateTime","T3":"2020-01-02T03:04:05.1234567Z"}`,
	`{"PartitionKey":"%25 and %","RowKey":"","S":"","S2":"line\nbreak \"quoted\" \\ tab\t ü 😀","B":true,"B2":false}`,
	`{"PartitionKey":"g","RowKey":"guid-binary","G@odata.type":"Edm.Guid","G":"01234567-89ab-cdef-0123-456789abcdef","Bin@odata.type":"Edm.Binary","Bin":"AAEC/w==","Empty@odata.type":"Edm.Binary","Empty":""}`,
	`{"PartitionKey":"g","RowKey":"plain","Name":"x,y;z","Count":1}`,
}

// fillEntities inserts raw JSON entities into a table through the SDK.
func fillEntities(t testing.TB, tc *aztables.Client, bodies []string) {
	t.Helper()
	for _, b := range bodies {
		if _, err := tc.AddEntity(ctx(t), []byte(b), nil); err != nil {
			t.Fatalf("AddEntity %s: %v", b, err)
		}
	}
}

// sdkEntities lists a table through the SDK at full metadata: key → the entity's
// properties with their type annotations (odata.* and Timestamp left out), numbers kept
// as their text, so two tables compare exactly.
func sdkEntities(t testing.TB, tc *aztables.Client) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	format := aztables.MetadataFormatFull
	p := tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Format: &format})
	for p.More() {
		page, err := p.NextPage(ctx(t))
		if err != nil {
			t.Fatalf("ListEntities: %v", err)
		}
		for _, raw := range page.Entities {
			d := json.NewDecoder(bytes.NewReader(raw))
			d.UseNumber()
			var m map[string]any
			if err := d.Decode(&m); err != nil {
				t.Fatalf("entity %s: %v", raw, err)
			}
			for k := range m {
				if strings.HasPrefix(k, "odata.") || strings.HasPrefix(k, "Timestamp") {
					delete(m, k)
				}
			}
			key := fmt.Sprintf("%q/%q", m["PartitionKey"], m["RowKey"])
			if _, dup := out[key]; dup {
				t.Fatalf("entity %s listed twice", key)
			}
			out[key] = m
		}
	}
	return out
}

// sameEntities fails unless two tables hold exactly the same entities.
func sameEntities(t testing.TB, what string, want, got map[string]map[string]any) {
	t.Helper()
	if len(want) != len(got) {
		t.Errorf("%s: %d entities, want %d", what, len(got), len(want))
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	bad := 0
	for _, k := range keys {
		if !reflect.DeepEqual(want[k], got[k]) {
			if bad++; bad <= 5 {
				t.Errorf("%s: entity %s:\n got  %v\n want %v", what, k, got[k], want[k])
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d entities differ", what, bad)
	}
}

// Export → import into another server → export again gives identical files, in both
// formats, for entities covering every EDM type and edge value; and the second server
// holds exactly the first one's entities, as the SDK sees them.
func TestTransferRoundTrip(t *testing.T) {
	a, b := startOwnServer(t), startOwnServer(t)
	svcA, svcB := newServiceClient(t, a), newServiceClient(t, b)
	edge, edgeName := newTable(t, svcA)
	fillEntities(t, edge, edgeEntities)
	second, secondName := newTable(t, svcA)
	fillEntities(t, second, []string{`{"PartitionKey":"a","RowKey":"1","X":1}`, `{"PartitionKey":"b","RowKey":"2","Y@odata.type":"Edm.Int64","Y":"-1"}`})
	dir := t.TempDir()

	for _, format := range []string{"jsonl", "csv"} {
		t.Run(format, func(t *testing.T) {
			first := filepath.Join(dir, "first."+format)
			again := filepath.Join(dir, "again."+format)
			target := edgeName + format
			if st, _, errOut := runTool(t, time.Minute, nil, "export", "--from", connString(a), "--table", edgeName, "--timestamp=false", "--out", first, "--quiet"); st != 0 {
				t.Fatalf("export: status %d: %s", st, errOut)
			}
			if st, _, errOut := runTool(t, time.Minute, nil, "import", "--to", connString(b), "--table", target, "--in", first, "--quiet"); st != 0 {
				t.Fatalf("import: status %d: %s", st, errOut)
			}
			if st, _, errOut := runTool(t, time.Minute, nil, "export", "--from", connString(b), "--table", target, "--timestamp=false", "--out", again, "--quiet"); st != 0 {
				t.Fatalf("export again: status %d: %s", st, errOut)
			}
			f1, _ := os.ReadFile(first)
			f2, _ := os.ReadFile(again)
			if len(f1) == 0 || !bytes.Equal(f1, f2) {
				t.Errorf("the files differ:\n%s\n----\n%s", f1, f2)
			}
			want := map[string][]string{
				"jsonl": {`"Dnan@odata.type":"Edm.Double","Dnan":"NaN"`, `"Dz":-0.0`, `"I64min":"-9223372036854775808"`, `"T2":"9999-12-31T23:59:59.9999999Z"`, `"PartitionKey":"p'1","RowKey":"it's"`, `"RowKey":"a\"b"`},
				"csv":   {"PartitionKey,RowKey,Timestamp,", "NaN,Edm.Double", "-0.0,Edm.Double", "-9223372036854775808,Edm.Int64", `"x,y;z",Edm.String`},
			}[format]
			for _, w := range want {
				if !bytes.Contains(f1, []byte(w)) {
					t.Errorf("the %s export lacks %s:\n%s", format, w, f1)
				}
			}
			sameEntities(t, "imported "+format, sdkEntities(t, edge), sdkEntities(t, svcB.NewClient(target)))
		})
	}

	// Every table of the account into one JSON Lines stream on stdout, and back from stdin.
	t.Run("all tables via stdout and stdin", func(t *testing.T) {
		c := startOwnServer(t)
		st, out, errOut := runTool(t, time.Minute, nil, "export", "--from", connString(a), "--quiet")
		if st != 0 || !strings.Contains(out, `"odata.table":"`+secondName+`"`) {
			t.Fatalf("export: status %d: %s\n%s", st, errOut, out)
		}
		if st, _, errOut := runTool(t, time.Minute, []byte(out), "import", "--to", connString(c), "--quiet"); st != 0 {
			t.Fatalf("import: status %d: %s", st, errOut)
		}
		svcC := newServiceClient(t, c)
		sameEntities(t, "edge table", sdkEntities(t, edge), sdkEntities(t, svcC.NewClient(edgeName)))
		sameEntities(t, "second table", sdkEntities(t, second), sdkEntities(t, svcC.NewClient(secondName)))
	})

	// --select keeps the keys (and Timestamp) whatever the list names.
	t.Run("select", func(t *testing.T) {
		st, out, errOut := runTool(t, time.Minute, nil, "export", "--from", connString(a), "--table", edgeName, "--filter", "PartitionKey eq 'g'", "--select", "Name", "--timestamp=false", "--quiet")
		want := `{"odata.settings":{"Elastic":false}}` + "\n" + `{"PartitionKey":"g","RowKey":"guid-binary"}` + "\n" + `{"PartitionKey":"g","RowKey":"plain","Name@odata.type":"Edm.String","Name":"x,y;z"}` + "\n"
		if st != 0 || out != want {
			t.Errorf("export --select Name: status %d: %s\n%q, want %q", st, errOut, out, want)
		}
	})

	// SAS URLs: a table SAS (read) names the source table, an account SAS (write) the
	// target account.
	t.Run("sas", func(t *testing.T) {
		u, err := edge.GetTableSASURL(aztables.SASPermissions{Read: true}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		_, qs, _ := strings.Cut(u, "?") // the SDK joins endpoint and table without '/'
		from := a.Endpoint(a.Default().Name) + "/" + edgeName + "?" + qs
		to, err := svcB.GetAccountSASURL(aztables.AccountSASResourceTypes{Service: true, Container: true, Object: true},
			aztables.AccountSASPermissions{Read: true, Write: true, List: true, Add: true, Create: true, Update: true}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		// A table SAS cannot read the table's settings: the copy says so, and
		// --settings=false copies the entities alone.
		if st, _, errOut := runTool(t, time.Minute, nil, "copy", "--from", from, "--to", to, "--to-table", edgeName+"sas", "--mode", "replace", "--quiet", "--checkpoint", filepath.Join(dir, "sas.checkpoint")); st != 1 || !strings.Contains(errOut, "a table SAS cannot read them") || !strings.Contains(errOut, "--settings=false") {
			t.Errorf("copy by table SAS: status %d: %s", st, errOut)
		}
		if st, _, errOut := runTool(t, time.Minute, nil, "copy", "--from", from, "--to", to, "--to-table", edgeName+"sas", "--mode", "replace", "--settings=false", "--quiet"); st != 0 {
			t.Fatalf("copy by SAS: status %d: %s", st, errOut)
		}
		sameEntities(t, "copied by SAS", sdkEntities(t, edge), sdkEntities(t, svcB.NewClient(edgeName+"sas")))
		if st, out, errOut := runTool(t, time.Minute, nil, "export", "--from", from, "--settings=false", "--quiet"); st != 0 || strings.Count(out, "\n") != len(edgeEntities) {
			t.Errorf("export by table SAS: status %d: %s\n%s", st, errOut, out)
		}
	})

	// copy, with a $filter, straight between the servers.
	t.Run("copy", func(t *testing.T) {
		st, _, errOut := runTool(t, time.Minute, nil, "copy", "--from", connString(a), "--to", connString(b), "--table", edgeName, "--to-table", edgeName+"copy", "--quiet")
		if st != 0 {
			t.Fatalf("copy: status %d: %s", st, errOut)
		}
		sameEntities(t, "copied", sdkEntities(t, edge), sdkEntities(t, svcB.NewClient(edgeName+"copy")))
		st, _, errOut = runTool(t, time.Minute, nil, "copy", "--from", connString(a), "--to", connString(b), "--table", edgeName, "--to-table", edgeName+"g", "--filter", "PartitionKey eq 'g'", "--quiet")
		if st != 0 {
			t.Fatalf("copy --filter: status %d: %s", st, errOut)
		}
		if got := sdkEntities(t, svcB.NewClient(edgeName+"g")); len(got) != 2 {
			t.Errorf("copy --filter PartitionKey eq 'g': %d entities, want 2", len(got))
		}
	})
}
