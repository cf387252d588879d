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
		{[]string{"--role-assignments", "r.json"}, "--role-assignments needs --oidc-issuer or --dev-issuer"},
		{[]string{"--dev-issuer", "--role-assignments", "r.json"}, ""},
		{[]string{"--dev-issuer"}, ""},
		{[]string{"--dev-issuer", "--addr", "localhost:10002"}, ""},
		{[]string{"--dev-issuer", "--addr", "[::1]:10002"}, ""},
		{[]string{"--dev-issuer", "--addr", "0.0.0.0:10002"}, `--dev-issuer needs a loopback address (127.0.0.1, ::1 or localhost), not "0.0.0.0:10002"`},
		{[]string{"--dev-issuer", "--addr", ":10002"}, `not ":10002"`},
		{[]string{"--dev-issuer", "--addr", "10.1.2.3:10002"}, `not "10.1.2.3:10002"`},
		{[]string{"--dev-issuer", "--console-addr", "0.0.0.0:10003"}, `not "0.0.0.0:10003"`},
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
	// --dev-issuer alone turns HTTPS on (and says so); with a TLS flag it keeps that one.
	if o, err := parseServe([]string{"--dev-issuer"}); err != nil || !o.tlsSelfSigned || !o.id.autoTLS {
		t.Errorf("--dev-issuer alone: self-signed %v, auto %v, %v; want HTTPS turned on", o.tlsSelfSigned, o.id.autoTLS, err)
	}
	if o, err := parseServe([]string{"--dev-issuer", "--tls-cert", "c.pem", "--tls-key", "k.pem"}); err != nil || o.tlsSelfSigned || o.id.autoTLS {
		t.Errorf("--dev-issuer --tls-cert: self-signed %v, auto %v, %v", o.tlsSelfSigned, o.id.autoTLS, err)
	}
	t.Setenv("CERULEAN_DEV_ISSUER", "true")
	if o, err := parseServe(nil); err != nil || !o.id.devIssuer {
		t.Errorf("CERULEAN_DEV_ISSUER=true: %v, %v", o.id.devIssuer, err)
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
