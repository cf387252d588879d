package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/client"
)

// `cerulean table` against a running server: what each command prints, and its exit
// status (0 done, 1 refused or unreachable with one line on stderr, 2 a command-line
// mistake with the usage).
func TestTableCommand(t *testing.T) {
	srv := startServer(t, withArgs("--elastic-tables", "clipat*:60"))
	conn := []string{"--endpoint", srv.Endpoint(devAccount), "--account", devAccount, "--key", devKey}
	id := runID
	tbl := func(args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, append(append([]string{"table"}, args...), conn...)...)
	}
	settings := func(name, elastic, ttl, prop string) string {
		s := "TableName:          " + name + "\nElastic:            " + elastic + "\n"
		if elastic == "true" {
			s += "DefaultTimeToLive:  " + ttl + "\nTimeToLiveProperty: " + prop + "\n"
		}
		return s
	}
	ok := func(want string, args ...string) {
		t.Helper()
		status, out, errOut := tbl(args...)
		if status != 0 || out != want || errOut != "" {
			t.Errorf("cerulean table %s: status %d\nstdout %q\nwant   %q\nstderr %q", strings.Join(args, " "), status, out, want, errOut)
		}
	}
	fails := func(status int, want string, args ...string) {
		t.Helper()
		st, out, errOut := tbl(args...)
		lines := strings.Count(errOut, "\n")
		if st != status || out != "" || !strings.Contains(errOut, want) || (status == 1 && lines != 1) {
			t.Errorf("cerulean table %s: status %d, stdout %q, stderr %q; want %d with %q", strings.Join(args, " "), st, out, errOut, status, want)
		}
	}
	ev, pat, std := "Events"+id, "clipat"+id, "plain"+id
	ok(settings(ev, "true", "5 s", "Expiry"), "create", ev, "--elastic", "--ttl", "5", "--ttl-property", "Expiry")
	ok(settings(pat, "true", "60 s", "TTLInSeconds"), "create", pat)
	ok(settings(std, "false", "", ""), "create", std)
	fails(1, "cerulean: table create "+std+": 409 TableAlreadyExists: The table specified already exists.", "create", std)

	ok(settings(ev, "true", "5 s", "Expiry"), "show", ev)
	ok(`{"TableName":"`+ev+`","Elastic":true,"DefaultTimeToLive":5,"TimeToLiveProperty":"Expiry"}`+"\n", "show", "--json", strings.ToLower(ev))
	ok(settings(ev, "true", "-1 (on, no default: only entities with their own TTL expire)", "Expiry"), "set", ev, "--ttl", "-1")
	ok(settings(ev, "true", "off", "TTLInSeconds"), "set", ev, "--ttl", "off", "--ttl-property", "TTLInSeconds")
	ok(settings(std, "true", "30 s", "TTLInSeconds"), "set", std, "--elastic", "--ttl", "30")
	ok(settings(std, "false", "", ""), "set", std, "--elastic=false")
	fails(1, "cerulean: table set "+std+": 400 InvalidInput: Time-to-live is available on elastic tables only.", "set", std, "--ttl", "30")

	// The change feed, on any table; shown only while on.
	feed := "ChangeFeed:         on, retention 604800 s (7d)\n"
	ok("TableName:          "+std+"\nElastic:            false\n"+feed, "set", std, "--change-feed", "7d")
	ok(`{"TableName":"`+std+`","Elastic":false,"ChangeFeedRetention":604800}`+"\n", "show", "--json", std)
	ok(settings(std, "false", "", ""), "set", std, "--change-feed", "off")
	fails(2, "--change-feed: change feed retention \"0\"", "set", std, "--change-feed", "0")
	fails(1, "cerulean: table show nosuch"+id+": 404 TableNotFound: The table specified does not exist.", "show", "nosuch"+id)
	fails(1, "400 InvalidInput: The time-to-live property name '1x' is not a valid property name.", "set", ev, "--ttl-property", "1x")

	// Tables are listed in case-insensitive name order. On the postgres engine the
	// database holds other tests' tables too: only this test's lines are compared.
	ours := func(out string, header bool) []string {
		var got []string
		for i, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			f := strings.Fields(l)
			if i == 0 && header || len(f) > 0 && slices.Contains([]string{pat, ev, std}, f[0]) {
				got = append(got, strings.Join(f, " "))
			}
		}
		return got
	}
	status, out, errOut := tbl("list")
	if got := ours(out, false); status != 0 || errOut != "" || !slices.Equal(got, []string{pat, ev, std}) {
		t.Errorf("cerulean table list: status %d, stdout %q, stderr %q", status, out, errOut)
	}
	status, out, errOut = tbl("list", "--settings")
	want := []string{"NAME ELASTIC DEFAULT TTL TTL PROPERTY CHANGE FEED INDEXES", pat + " true 60 TTLInSeconds off -", ev + " true off TTLInSeconds off -", std + " false - - off -"}
	if got := ours(out, true); status != 0 || errOut != "" || !slices.Equal(got, want) {
		t.Errorf("cerulean table list --settings: status %d, stderr %q, stdout:\n%s", status, errOut, out)
	}

	fails(2, "create: missing the table NAME", "create")
	fails(2, "--ttl and --ttl-property need --elastic", "create", "x"+id, "--ttl", "5")
	status, _, errOut = runCLI(t, "table", "list", "--endpoint", srv.Endpoint(devAccount), "--key", randomKey(t))
	if status != 1 || !strings.Contains(errOut, "403 AuthenticationFailed") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("wrong key: status %d, stderr %q", status, errOut)
	}
}

// `cerulean table index` against a running server: add, drop and list print the indexes
// in force with their states; a change keeps the table's other settings and indexes
// (and `table set` keeps the indexes); refusals exit 1 with one line, mistakes 2. Lines
// are compared by their fields (TestWriteIndexes checks the layout), with an index
// declared on an existing table taken as ready whether or not its background build has
// finished: its state and progress are the engine's (docs/indexes.md).
func TestTableIndexCommand(t *testing.T) {
	srv := startServer(t)
	conn := []string{"--endpoint", srv.Endpoint(devAccount), "--account", devAccount, "--key", devKey}
	id := runID
	tbl := func(args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, append(append([]string{"table"}, args...), conn...)...)
	}
	building := regexp.MustCompile(`\bbuilding( \d+ rows)?`)
	fields := func(out string) string {
		var ls []string
		for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			l = strings.Join(strings.Fields(l), " ")
			ls = append(ls, building.ReplaceAllStringFunc(l, func(m string) string {
				if m == "building" {
					return "ready"
				}
				return "ready -"
			}))
		}
		return strings.Join(ls, "\n")
	}
	ok := func(want string, args ...string) {
		t.Helper()
		status, out, errOut := tbl(args...)
		if status != 0 || fields(out) != want || errOut != "" {
			t.Errorf("cerulean table %s: status %d\nstdout %q\nwant   %q\nstderr %q", strings.Join(args, " "), status, out, want, errOut)
		}
	}
	fails := func(status int, want string, args ...string) {
		t.Helper()
		st, out, errOut := tbl(args...)
		if st != status || out != "" || !strings.Contains(errOut, want) || (status == 1 && strings.Count(errOut, "\n") != 1) {
			t.Errorf("cerulean table %s: status %d, stdout %q, stderr %q; want %d with %q", strings.Join(args, " "), st, out, errOut, status, want)
		}
	}
	ord, std := "Orders"+id, "plainix"+id
	const header = "NAME PROPERTIES UNIQUE STATE PROGRESS"
	if st, _, errOut := tbl("create", ord, "--elastic", "--ttl", "60", "--change-feed", "1h"); st != 0 {
		t.Fatalf("create: %d %s", st, errOut)
	}
	if st, _, errOut := tbl("create", std); st != 0 {
		t.Fatalf("create: %d %s", st, errOut)
	}
	ok(header, "index", "list", ord)
	ok("[]", "index", "list", ord, "--json")
	ok(header+"\nByEmail Email true ready -", "index", "add", ord, "ByEmail", "Email", "--unique")
	ok(header+"\nByEmail Email true ready -\nByCD Customer,OrderDate false ready -", "index", "add", "--", ord, "ByCD", "Customer, OrderDate")
	status, out, errOut := tbl("index", "list", "--json", strings.ToLower(ord))
	var got []client.Index
	if err := json.Unmarshal([]byte(out), &got); status != 0 || errOut != "" || err != nil || len(got) != 2 ||
		got[0].Name != "ByEmail" || !got[0].Unique || got[1].Name != "ByCD" || !slices.Equal(got[1].Properties, []string{"Customer", "OrderDate"}) {
		t.Errorf("cerulean table index list --json: status %d, stdout %q (%v), stderr %q", status, out, err, errOut)
	}
	for _, ix := range got {
		if ix.State != "building" && ix.State != "ready" {
			t.Errorf("index %s: state %q", ix.Name, ix.State)
		}
	}

	fails(1, "cerulean: table index add "+ord+": the table has an index named ByEmail already (Email; unique): drop it first", "index", "add", ord, "byemail", "Other")
	fails(1, "cerulean: table index add "+std+": "+std+" is a standard table: secondary indexes are for elastic tables", "index", "add", std, "ByA", "A")
	fails(1, "400 InvalidInput: The index 'ByKey' names 'RowKey', which is not an indexable property", "index", "add", ord, "ByKey", "RowKey")
	fails(1, "400 InvalidInput: The index name '1x' is not valid", "index", "add", ord, "1x", "A")
	fails(1, "the table has no index named ByZ: its indexes are ByEmail, ByCD", "index", "drop", ord, "ByZ")
	fails(1, "404 TableNotFound", "index", "list", "nosuch"+id)
	fails(2, "index add: missing the index's PROPERTIES", "index", "add", ord, "ByX")

	// The other settings survive index changes, and indexes survive setting changes.
	show := "TableName: " + ord + "\nElastic: true\nChangeFeed: on, retention 3600 s (1h)\n" +
		"DefaultTimeToLive: 60 s\nTimeToLiveProperty: TTLInSeconds\n" +
		"Indexes: ByEmail (Email; unique) ready; ByCD (Customer, OrderDate) ready"
	ok(show, "show", ord)
	ok(strings.Replace(show, "60 s", "120 s", 1), "set", ord, "--ttl", "120")
	ok(header+"\nByCD Customer,OrderDate false ready -", "index", "drop", ord, "byemail")
	ok("TableName: "+ord+"\nElastic: true\nChangeFeed: on, retention 3600 s (1h)\n"+
		"DefaultTimeToLive: 120 s\nTimeToLiveProperty: TTLInSeconds\nIndexes: ByCD (Customer, OrderDate) ready", "show", ord)

	status, out, errOut = tbl("list", "--settings")
	var line string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == ord {
			line = strings.Join(f, " ")
		}
	}
	if status != 0 || errOut != "" || line != ord+" true 120 TTLInSeconds 3600 ByCD" {
		t.Errorf("cerulean table list --settings: status %d, stderr %q, line %q in\n%s", status, errOut, line, out)
	}
}

// `cerulean table index add --wait` over a table with entities: the build runs online and
// the command returns once the index is ready (exit 0, the list printed); a unique index
// whose build meets one value twice fails, and the command says why (exit 1), as `index
// list` does.
func TestTableIndexWait(t *testing.T) {
	srv := startServer(t)
	conn := []string{"--endpoint", srv.Endpoint(devAccount), "--account", devAccount, "--key", devKey}
	tbl := func(args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, append(append([]string{"table"}, args...), conn...)...)
	}
	name := tableName(t)
	if st, _, errOut := tbl("create", name, "--elastic"); st != 0 {
		t.Fatalf("create: %d %s", st, errOut)
	}
	var ops []client.BulkOp
	for i := range 3000 {
		email := fmt.Sprintf("u%d@x", i)
		if i == 2999 {
			email = "u7@x" // one value twice
		}
		ops = append(ops, client.BulkOp{Op: client.BulkInsert, Entity: marshal(t, map[string]any{
			"PartitionKey": fmt.Sprintf("p%02d", i%20), "RowKey": fmt.Sprintf("%05d", i), "Email": email, "Group": i % 7})})
	}
	if res, err := bulkClient(t, srv).Bulk(ctx(t), name, ops); err != nil || res.Failed != 0 {
		t.Fatalf("bulk: %+v, %v", res, err)
	}

	status, out, errOut := tbl("index", "add", name, "ByGroup", "Group", "--wait")
	if status != 0 || strings.Join(strings.Fields(out), " ") != "NAME PROPERTIES UNIQUE STATE PROGRESS ByGroup Group false ready -" ||
		!strings.Contains(errOut, "ByGroup: ready after ") {
		t.Errorf("index add --wait: status %d\nstdout %q\nstderr %q", status, out, errOut)
	}
	status, out, errOut = tbl("index", "add", name, "ByEmail", "Email", "--unique", "--wait")
	last := errOut[strings.LastIndex(strings.TrimSuffix(errOut, "\n"), "\n")+1:]
	if status != 1 || out != "" || !strings.HasPrefix(last, "cerulean: table index add "+name+": the index ByEmail failed: ") || !strings.Contains(last, "u7@x") && !strings.Contains(last, "00007") {
		t.Errorf("index add --unique --wait over a duplicate: status %d\nstdout %q\nstderr %q", status, out, errOut)
	}
	status, out, errOut = tbl("index", "list", name)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if status != 0 || errOut != "" || len(lines) != 4 ||
		strings.Join(strings.Fields(lines[2]), " ") != "ByEmail Email true failed -" || !strings.HasPrefix(lines[3], "ByEmail failed: ") {
		t.Errorf("index list: status %d, stderr %q, stdout:\n%s", status, errOut, out)
	}
}
