package e2e

import (
	"slices"
	"strings"
	"testing"
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
	want := []string{"NAME ELASTIC DEFAULT TTL TTL PROPERTY CHANGE FEED", pat + " true 60 TTLInSeconds off", ev + " true off TTLInSeconds off", std + " false - - off"}
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
