package auth

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
)

func TestDevAccount(t *testing.T) {
	a := DevAccount()
	if a.Name != "devstoreaccount1" || len(a.Keys) != 1 || len(a.Keys[0]) != 64 {
		t.Fatalf("DevAccount() = %q with %d keys", a.Name, len(a.Keys))
	}
	if got := base64.StdEncoding.EncodeToString(a.Keys[0]); got != DevAccountKey {
		t.Fatalf("dev key round trip = %q", got)
	}
	a.Keys[0][0] ^= 0xff // fresh copy each call
	if b := DevAccount(); bytes.Equal(a.Keys[0], b.Keys[0]) {
		t.Fatal("DevAccount shares key memory between calls")
	}
}

func TestValidAccountName(t *testing.T) {
	for name, want := range map[string]bool{
		"abc": true, "devstoreaccount1": true, "a23456789012345678901234": true,
		"ab": false, "a234567890123456789012345": false, "Abc": false, "ab-c": false,
		"ab_c": false, "": false, "abc ": false, "ab\u00e9": false,
	} {
		if got := ValidAccountName(name); got != want {
			t.Errorf("ValidAccountName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestParseAccounts(t *testing.T) {
	k1 := base64.StdEncoding.EncodeToString([]byte("key-one"))
	k2 := base64.StdEncoding.EncodeToString([]byte("key-two"))
	k3 := base64.StdEncoding.EncodeToString([]byte("key-three"))
	type acct struct {
		name string
		keys []string
	}
	tests := []struct {
		name    string
		spec    string
		want    []acct
		wantErr string
	}{
		{name: "empty", spec: "", want: nil},
		{name: "blank items", spec: " ; ;  ", want: nil},
		{name: "one", spec: "alpha:" + k1, want: []acct{{"alpha", []string{"key-one"}}}},
		{name: "two accounts, spaces, trailing semicolon",
			spec: "  alpha : " + k1 + " ;beta:" + k2 + ";",
			want: []acct{{"alpha", []string{"key-one"}}, {"beta", []string{"key-two"}}}},
		{name: "repeated name gives key2",
			spec: "alpha:" + k1 + ";beta:" + k3 + ";alpha:" + k2,
			want: []acct{{"alpha", []string{"key-one", "key-two"}}, {"beta", []string{"key-three"}}}},
		{name: "azurite form name:key1:key2",
			spec: "alpha:" + k1 + ":" + k2,
			want: []acct{{"alpha", []string{"key-one", "key-two"}}}},
		{name: "dev key", spec: "devstoreaccount1:" + DevAccountKey,
			want: []acct{{"devstoreaccount1", []string{string(DevAccount().Keys[0])}}}},
		{name: "three keys", spec: "alpha:" + k1 + ";alpha:" + k2 + ";alpha:" + k3, wantErr: "more than 2 keys"},
		{name: "three keys azurite form", spec: "alpha:" + k1 + ":" + k2 + ":" + k3, wantErr: "more than 2 keys"},
		{name: "no key", spec: "alpha", wantErr: "want name:base64key"},
		{name: "empty key", spec: "alpha:", wantErr: "empty key"},
		{name: "empty key between", spec: "alpha:" + k1 + "::" + k2, wantErr: "empty key"},
		{name: "bad base64", spec: "alpha:not*base64", wantErr: "not valid standard base64"},
		{name: "unpadded base64", spec: "alpha:" + strings.TrimRight(k1, "="), wantErr: "not valid standard base64"},
		{name: "uppercase name", spec: "Alpha:" + k1, wantErr: "invalid account name"},
		{name: "short name", spec: "ab:" + k1, wantErr: "invalid account name"},
		{name: "long name", spec: strings.Repeat("a", 25) + ":" + k1, wantErr: "invalid account name"},
		{name: "dash in name", spec: "my-acct:" + k1, wantErr: "invalid account name"},
		{name: "empty name", spec: ":" + k1, wantErr: "invalid account name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAccounts(tc.spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseAccounts(%q) error = %v, want containing %q", tc.spec, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseAccounts(%q): %v", tc.spec, err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d accounts, want %d: %+v", len(got), len(tc.want), got)
			}
			for i, w := range tc.want {
				if got[i].Name != w.name || len(got[i].Keys) != len(w.keys) {
					t.Fatalf("account %d = %q with %d keys, want %q with %d", i, got[i].Name, len(got[i].Keys), w.name, len(w.keys))
				}
				for j, k := range w.keys {
					if string(got[i].Keys[j]) != k {
						t.Errorf("account %q key %d = %q, want %q", w.name, j, got[i].Keys[j], k)
					}
				}
			}
		})
	}
}

func TestParseAccountsErrorHidesKey(t *testing.T) {
	secret := "c2VjcmV0LWtleS1tYXRlcmlhbA*" // valid base64 prefix, then junk
	_, err := ParseAccounts("alpha:" + secret)
	if err == nil {
		t.Fatal("want error")
	}
	if strings.Contains(err.Error(), "c2VjcmV0") {
		t.Fatalf("error leaks key material: %v", err)
	}
}
