package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/auth"
)

// Mistakes on a `cerulean table index` command line exit 2 with the message and the
// usage, before any request; help exits 0.
func TestTableIndexCommandLine(t *testing.T) {
	t.Setenv("CERULEAN_TABLE_ENDPOINT", "")
	t.Setenv("CERULEAN_TABLE_ACCOUNT", "")
	t.Setenv("CERULEAN_TABLE_KEY", "")
	for _, c := range []struct {
		args   []string
		status int
		want   string // in stdout for 0, in stderr otherwise
	}{
		{[]string{"table", "-h"}, 0, "cerulean table index add NAME INDEX PROP[,PROP…] [--unique] [--wait]"},
		{[]string{"table", "index", "-h"}, 0, "Flags of cerulean table index add:"},
		{[]string{"table", "index", "add", "--help"}, 0, "-unique"},
		{[]string{"table", "index"}, 2, "cerulean table: index: missing command: add, drop or list"},
		{[]string{"table", "index", "rebuild", "t"}, 2, `index: unknown command "rebuild": want add, drop or list`},
		{[]string{"table", "index", "add"}, 2, "index add: missing the table NAME"},
		{[]string{"table", "index", "add", "t"}, 2, "index add: missing the INDEX name"},
		{[]string{"table", "index", "add", "t", "ByA"}, 2, "index add: missing the index's PROPERTIES"},
		{[]string{"table", "index", "add", "t", "ByA", "A", "B"}, 2, "index add: unexpected arguments: B"},
		{[]string{"table", "index", "add", "t", "ByA", "A,,B"}, 2, `index add: properties "A,,B": want property names separated by commas, none empty`},
		{[]string{"table", "index", "add", "t", "ByA", "A", "--json"}, 2, "flag provided but not defined: -json"},
		{[]string{"table", "index", "drop", "t"}, 2, "index drop: missing the INDEX name"},
		{[]string{"table", "index", "drop", "t", "ByA", "--unique"}, 2, "flag provided but not defined: -unique"},
		{[]string{"table", "index", "list"}, 2, "index list: missing the table NAME"},
		{[]string{"table", "index", "list", "t", "x"}, 2, "index list: unexpected arguments: x"},
		{[]string{"table", "index", "list", "t", "--account", "acct2"}, 2, `--key (or CERULEAN_TABLE_KEY) is needed for account "acct2"`},
		{[]string{"table", "index", "list", "t", "--endpoint", "http://127.0.0.1:1/devstoreaccount1"}, 1, "cerulean: table index list t: Get"},
	} {
		checkCommandLine(t, c.args, c.status, c.want, "Usage of cerulean table")
	}
}

// addIndex and dropIndex change the one index named and carry back every other setting
// and index as read (settings are replaced whole: anything left out would be lost).
func TestAddDropIndexKeepsTheRest(t *testing.T) {
	read := client.Table{Name: "Orders", TableSettings: client.TableSettings{
		Elastic: true, DefaultTimeToLive: 60, TimeToLiveProperty: "Exp", ChangeFeedRetention: 3600,
		Indexes: []client.Index{
			{Name: "ByA", Properties: []string{"A"}, State: "ready"},
			{Name: "ByB", Properties: []string{"B", "C"}, Unique: true, State: "building", Progress: 7},
		}}}
	orig := read
	orig.Indexes = append([]client.Index(nil), read.Indexes...)

	st, err := addIndex(read, client.Index{Name: "ByD", Properties: []string{"D"}, Unique: true})
	want := read.TableSettings
	want.Indexes = append(append([]client.Index(nil), read.Indexes...), client.Index{Name: "ByD", Properties: []string{"D"}, Unique: true})
	if err != nil || !reflect.DeepEqual(st, want) {
		t.Errorf("addIndex = %+v, %v; want %+v", st, err, want)
	}
	st, err = dropIndex(read, "byb")
	want = read.TableSettings
	want.Indexes = read.Indexes[:1:1]
	if err != nil || !reflect.DeepEqual(st, want) {
		t.Errorf("dropIndex = %+v, %v; want %+v", st, err, want)
	}
	if !reflect.DeepEqual(read, orig) {
		t.Errorf("the settings read were changed: %+v", read)
	}

	for _, c := range []struct {
		err  error
		want string
	}{
		{second(addIndex(read, client.Index{Name: "BYA", Properties: []string{"Z"}})), "the table has an index named ByA already (A): drop it first"},
		{second(addIndex(client.Table{Name: "Plain"}, client.Index{Name: "X", Properties: []string{"Z"}})), "Plain is a standard table: secondary indexes are for elastic tables"},
		{second(dropIndex(read, "ByZ")), "the table has no index named ByZ: its indexes are ByA, ByB"},
		{second(dropIndex(client.Table{Name: "E", TableSettings: client.TableSettings{Elastic: true}}, "ByZ")), "the table has no index named ByZ: it has no indexes"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("error %v; want %q", c.err, c.want)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// The index list: a column each, progress while building, and why a failed one failed.
func TestWriteIndexes(t *testing.T) {
	var b bytes.Buffer
	writeIndexes(&b, []client.Index{
		{Name: "ByEmail", Properties: []string{"Email"}, Unique: true, State: "ready"},
		{Name: "ByCustomerDate", Properties: []string{"CustomerId", "OrderDate"}, State: "building", Progress: 5120},
		{Name: "BySku", Properties: []string{"Sku"}, Unique: true, State: "failed", Failure: "two entities hold one value"},
	})
	want := "NAME            PROPERTIES            UNIQUE  STATE     PROGRESS\n" +
		"ByEmail         Email                 true    ready     -\n" +
		"ByCustomerDate  CustomerId,OrderDate  false   building  5120 rows\n" +
		"BySku           Sku                   true    failed    -\n" +
		"BySku failed: two entities hold one value\n"
	if b.String() != want {
		t.Errorf("writeIndexes:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	if err := writeIndexesJSON(&b, nil); err != nil || b.String() != "[]\n" {
		t.Errorf("writeIndexesJSON(none) = %q, %v", b.String(), err)
	}
}

// waitIndex follows the index's state through the settings endpoint: it returns when the
// index is ready, counting the rows the build passed; it fails with the server's reason
// when the index fails, and when the index is dropped meanwhile.
func TestWaitIndex(t *testing.T) {
	for _, c := range []struct {
		name    string
		answers []string // the Indexes member of successive settings answers
		err     string   // "" for success
		summary string   // a regular expression
	}{
		{"ready", []string{
			`[{"Name":"ByA","Properties":["A"],"State":"building","Progress":0}]`,
			`[{"Name":"ByA","Properties":["A"],"State":"building","Progress":600}]`,
			`[{"Name":"ByA","Properties":["A"],"State":"ready"}]`,
		}, "", `ByA: building, 0 rows passed, elapsed 0:00\nByA: ready after [0-9.]+m?s\n`},
		{"failed", []string{
			`[{"Name":"ByA","Properties":["A"],"State":"building","Progress":7}]`,
			`[{"Name":"ByA","Properties":["A"],"Unique":true,"State":"failed","Failure":"two entities hold one value"}]`,
		}, "the index ByA failed: two entities hold one value", "ByA: building, 7 rows passed, elapsed 0:00\n"},
		{"dropped", []string{
			`[{"Name":"ByA","Properties":["A"],"State":"building","Progress":1}]`,
			`[]`,
		}, "the index ByA was dropped while it was being built", "ByA: building, 1 rows passed, elapsed 0:00\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var n atomic.Int32
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				i := min(int(n.Add(1))-1, len(c.answers)-1)
				fmt.Fprintf(w, `{"TableName":"t","Elastic":true,"TimeToLiveProperty":"TTLInSeconds","Indexes":%s}`, c.answers[i])
			}))
			defer hs.Close()
			cl, err := client.New(hs.URL+"/devstoreaccount1", auth.DevAccountName, auth.DevAccountKey)
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.CreateTemp(t.TempDir(), "progress")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			err = waitIndex(context.Background(), cl, "t", "bya", f)
			if c.err == "" && err != nil || c.err != "" && (err == nil || err.Error() != c.err) {
				t.Fatalf("waitIndex = %v; want %q", err, c.err)
			}
			if int(n.Load()) != len(c.answers) {
				t.Errorf("%d reads, want %d (one per answer, up to the last)", n.Load(), len(c.answers))
			}
			// Not a terminal: a line for the first progress (the next ones within 5 s
			// are not shown), and one when ready.
			out, _ := os.ReadFile(f.Name())
			if !regexp.MustCompile(`^` + c.summary + `$`).Match(out) {
				t.Errorf("progress output %q; want %q", out, c.summary)
			}
		})
	}
}
