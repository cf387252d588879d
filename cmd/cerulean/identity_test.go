package main

import (
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/auth"
)

// TestIdentityFlags: the identity flags refuse what could not work — tokens over plain
// HTTP, tokens without assignments, assignments or audiences without issuers, an unknown
// account's shared key turned off — and take the rest.
func TestIdentityFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string // "" for none
	}{
		{[]string{"--oidc-issuer", "https://idp.example", "--role-assignments", "r.json"}, "--oidc-issuer needs HTTPS"},
		{[]string{"--tls-self-signed", "--oidc-issuer", "https://idp.example"}, "--oidc-issuer needs --role-assignments"},
		{[]string{"--role-assignments", "r.json"}, "--role-assignments needs --oidc-issuer"},
		{[]string{"--oidc-audience", "api://x"}, "--oidc-audience needs --oidc-issuer"},
		{[]string{"--tls-self-signed", "--oidc-issuer", "https://idp.example", "--role-assignments", "r.json", "--oidc-audience", "api://x"}, ""},
		{[]string{"--shared-key-off", "devstoreaccount1"}, ""},
	} {
		_, err := parseServe(tc.args)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: %v, want an error saying %q", tc.args, err, tc.err)
		}
	}
	accounts := []auth.Account{auth.DevAccount(), {Name: "other"}}
	if err := (identityOptions{sharedKeyOff: "other, devstoreaccount1"}).applySharedKeyOff(accounts); err != nil ||
		!accounts[0].SharedKeyOff || !accounts[1].SharedKeyOff {
		t.Errorf("--shared-key-off of two accounts: %v, %+v", err, accounts)
	}
	if err := (identityOptions{sharedKeyOff: "nosuch"}).applySharedKeyOff(accounts); err == nil || !strings.Contains(err.Error(), `no account "nosuch"`) {
		t.Errorf("--shared-key-off of an unknown account: %v", err)
	}
}
