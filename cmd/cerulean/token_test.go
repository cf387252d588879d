package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/bearer"
	"github.com/ceruleandb/cerulean/internal/devissuer"
)

// Mistakes on a `cerulean token` command line exit 2 with the message and the usage; a
// data directory without the development issuer exits 1 with one line saying what to do;
// help exits 0. Nothing reaches stdout but help.
func TestTokenCommandLine(t *testing.T) {
	t.Setenv("CERULEAN_DATA", "")
	empty := t.TempDir()
	for _, c := range []struct {
		args   []string
		status int
		want   string // in stdout for 0, in stderr otherwise
	}{
		{[]string{"token", "-h"}, 0, "cerulean token --role reader|contributor|ROLE"},
		{[]string{"help", "token"}, 0, "-lifetime"},
		{[]string{"token"}, 2, "--role is required"},
		{[]string{"token", "--role", "owner of all"}, 2, `--role "owner of all": want reader, contributor or a built-in role's name or id`},
		{[]string{"token", "--role", "reader", "--table", "no_such"}, 2, `"no_such" is not a table name`},
		{[]string{"token", "--role", "reader", "--account", "UPPER"}, 2, `"UPPER" is not a storage account name`},
		{[]string{"token", "--role", "reader", "--lifetime", "0s"}, 2, "--lifetime 0s: want more than 0 and at most 24h0m0s"},
		{[]string{"token", "--role", "reader", "--lifetime", "25h"}, 2, "--lifetime 25h0m0s"},
		{[]string{"token", "--role", "reader", "--subject", ""}, 2, "--subject is empty"},
		{[]string{"token", "--role", "reader", "extra"}, 2, "unexpected arguments: extra"},
		{[]string{"token", "--role", "reader", "--data", empty}, 1, "no development issuer in " + empty + ": start the server with --dev-issuer --data " + empty + " first"},
	} {
		checkCommandLine(t, c.args, c.status, c.want, "Usage of cerulean token")
	}
}

// TestTokenPrinted: the token printed is one line, signed by the issuer's key in --data,
// for the issuer URL the server recorded, granting the role asked for at the scope the
// flags name.
func TestTokenPrinted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	iss, _, err := devissuer.Open(dir, "https://127.0.0.1:10002")
	if err != nil {
		t.Fatal(err)
	}
	v, err := bearer.New(bearer.Config{Issuers: []bearer.IssuerConfig{{URL: iss.URL(), Keys: iss.Keys()}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		role string
		sub  string
	}{
		{[]string{"--role", "contributor"}, "Storage Table Data Contributor@/", "developer"},
		{[]string{"--role", "Reader", "--table", "orders"}, "Storage Table Data Reader@/devstoreaccount1/tables/orders", "developer"},
		{[]string{"--role", "reader", "--account", "acct2", "--subject", "ada"}, "Storage Table Data Reader@/acct2", "ada"},
		{[]string{"--role", "8e3af657-a8ff-443c-a75c-2fe8c4bcb635", "--account", "acct2", "--table", "t1x"}, "Owner@/acct2/tables/t1x", "developer"},
		{[]string{"--role", "storage table data contributor", "--lifetime", "5m"}, "Storage Table Data Contributor@/", "developer"},
	} {
		var out bytes.Buffer
		if err := printToken(&out, append(c.args, "--data", dir)); err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		tok := out.String()
		if strings.Count(tok, "\n") != 1 || !strings.HasSuffix(tok, "\n") {
			t.Errorf("%q: printed %q, want the token and a newline", c.args, tok)
		}
		p, err := v.Verify(context.Background(), strings.TrimSpace(tok), "devstoreaccount1")
		if err != nil {
			t.Errorf("%q: the token does not verify: %v", c.args, err)
			continue
		}
		if len(p.Roles) != 1 || p.Roles[0] != c.role || p.ObjectID != c.sub || p.Issuer != "https://127.0.0.1:10002/.cerulean/issuer" {
			t.Errorf("%q: principal %+v; want roles [%s], subject %s", c.args, p, c.role, c.sub)
		}
	}
}
