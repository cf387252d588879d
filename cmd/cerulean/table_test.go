package main

import (
	"bytes"
	"strings"
	"testing"
)

// Mistakes on a `cerulean table` command line exit 2 with the message and the usage on
// stderr, before any request; help exits 0 on stdout; an unreachable server exits 1 with
// one line.
func TestTableCommandLine(t *testing.T) {
	t.Setenv("CERULEAN_TABLE_ENDPOINT", "")
	t.Setenv("CERULEAN_TABLE_ACCOUNT", "")
	t.Setenv("CERULEAN_TABLE_KEY", "")
	for _, c := range []struct {
		args   []string
		status int
		want   string // in stdout for 0, in stderr otherwise
	}{
		{[]string{"table", "-h"}, 0, "cerulean table set NAME [--elastic=true|false]"},
		{[]string{"help", "table"}, 0, "CERULEAN_TABLE_KEY"},
		{[]string{"table", "create", "--help"}, 0, "Flags of cerulean table create:"},
		{[]string{"table"}, 2, "cerulean table: missing command: create, show, set, list or index"},
		{[]string{"table", "drop", "x"}, 2, `unknown command "drop"`},
		{[]string{"table", "create"}, 2, "create: missing the table NAME"},
		{[]string{"table", "show", "a", "b"}, 2, "show: unexpected arguments: b"},
		{[]string{"table", "list", "x"}, 2, "list: unexpected arguments: x"},
		{[]string{"table", "create", "events", "--ttl", "60"}, 2, "--ttl and --ttl-property need --elastic"},
		{[]string{"table", "create", "events", "--ttl-property", "Exp"}, 2, "--ttl and --ttl-property need --elastic"},
		{[]string{"table", "set", "events", "--ttl", "0"}, 2, `--ttl "0": want seconds (1 to 2147483647), -1 (on, no default) or off`},
		{[]string{"table", "set", "events", "--ttl", "2147483648"}, 2, `--ttl "2147483648"`},
		{[]string{"table", "set", "events", "--ttl", "1h"}, 2, `--ttl "1h"`},
		{[]string{"table", "set", "events", "--elastic=maybe"}, 2, "invalid boolean value"},
		{[]string{"table", "show", "x", "--settings"}, 2, "flag provided but not defined: -settings"},
		{[]string{"table", "list", "--account", "acct2"}, 2, `--key (or CERULEAN_TABLE_KEY) is needed for account "acct2"`},
		{[]string{"table", "list", "--key", "not base64!"}, 2, "--key: account key:"},
		{[]string{"table", "list", "--endpoint", "127.0.0.1:10002"}, 2, `--endpoint "127.0.0.1:10002": want an http:// or https:// URL`},
		{[]string{"table", "list", "--endpoint", "http://127.0.0.1:1/devstoreaccount1"}, 1, "cerulean: table list: Get"},
	} {
		checkCommandLine(t, c.args, c.status, c.want, "Usage of cerulean table")
	}
}

// checkCommandLine runs cerulean with args and checks the CLI's contract for status: 0
// with want in stdout; 1 with want in one line on stderr and nothing on stdout (a failure
// of the work); 2 with want and the usage (usage names it) on stderr and nothing on
// stdout (a mistake on the command line).
func checkCommandLine(t *testing.T, args []string, wantStatus int, want, usage string) {
	t.Helper()
	var out, errb bytes.Buffer
	status := run(args, &out, &errb)
	got := errb.String()
	if wantStatus == 0 {
		got = out.String()
	}
	if status != wantStatus || !strings.Contains(got, want) {
		t.Errorf("%q: status %d, stdout %q, stderr %q; want %d with %q", args, status, out.String(), errb.String(), wantStatus, want)
	}
	switch wantStatus {
	case 1:
		if out.Len() != 0 || strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("%q: want one line on stderr and nothing on stdout; got %q, %q", args, out.String(), errb.String())
		}
	case 2:
		if out.Len() != 0 || !strings.Contains(errb.String(), usage) {
			t.Errorf("%q: want %q on stderr and nothing on stdout", args, usage)
		}
	}
}
