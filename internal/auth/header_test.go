package auth

import (
	"errors"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

func TestParseAuthorization(t *testing.T) {
	const sig = "c2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJlc2lnbmE="
	tests := []struct {
		header            string
		scheme, acct, sig string
		malformed         bool
	}{
		{header: "SharedKeyLite devstoreaccount1:" + sig, scheme: SchemeSharedKeyLite, acct: "devstoreaccount1", sig: sig},
		{header: "SharedKey devstoreaccount1:" + sig, scheme: SchemeSharedKey, acct: "devstoreaccount1", sig: sig},
		{header: "sharedkeylite acct:" + sig, scheme: SchemeSharedKeyLite, acct: "acct", sig: sig},
		{header: "SHAREDKEY acct:" + sig, scheme: SchemeSharedKey, acct: "acct", sig: sig},
		{header: "  SharedKey \t acct:" + sig + " ", scheme: SchemeSharedKey, acct: "acct", sig: sig},
		// Account case is preserved: the verifier decides (and refuses) a mismatch.
		{header: "SharedKey DevStoreAccount1:" + sig, scheme: SchemeSharedKey, acct: "DevStoreAccount1", sig: sig},
		// Only the first ':' separates; the rest is the signature (and fails later).
		{header: "SharedKey acct:a:b", scheme: SchemeSharedKey, acct: "acct", sig: "a:b"},
		// Not base64 is a wrong signature (403 later), not a malformed header.
		{header: "SharedKey acct:!!!", scheme: SchemeSharedKey, acct: "acct", sig: "!!!"},
		{header: "Bearer eyJ0eXAiOiJKV1QifQ.e30.sig", scheme: SchemeBearer, sig: "eyJ0eXAiOiJKV1QifQ.e30.sig"},
		{header: "bearer tok", scheme: SchemeBearer, sig: "tok"},

		{header: "", malformed: true},
		{header: "   ", malformed: true},
		{header: "SharedKey", malformed: true},
		{header: "SharedKey ", malformed: true},
		{header: "SharedKeyLite acct", malformed: true},
		{header: "SharedKeyLite acct:", malformed: true},
		{header: "SharedKeyLite :" + sig, malformed: true},
		{header: "SharedKeyLite acct :" + sig, malformed: true},
		{header: "SharedKeyLite acct: " + sig, malformed: true},
		{header: "SharedKeyLite acct:" + sig + " extra", malformed: true},
		{header: "SharedKeyLite acct:si\x00g", malformed: true},
		{header: "SharedKeyLiteacct:" + sig, malformed: true},
		{header: "SharedAccessSignature acct:" + sig, malformed: true},
		{header: "Basic dXNlcjpwYXNz", malformed: true},
		{header: "Bearer", malformed: true},
		{header: "Bearer a b", malformed: true},
		{header: "acct:" + sig, malformed: true},
	}
	for _, tc := range tests {
		scheme, acct, sig, err := ParseAuthorization(tc.header)
		if tc.malformed {
			var ae *azerr.Error
			if !errors.As(err, &ae) || ae.Code != azerr.InvalidAuthenticationInfo || ae.Status != 400 || ae.Detail == "" {
				t.Errorf("ParseAuthorization(%q) = %q %q %q %v, want InvalidAuthenticationInfo with detail", tc.header, scheme, acct, sig, err)
			}
			continue
		}
		if err != nil || scheme != tc.scheme || acct != tc.acct || sig != tc.sig {
			t.Errorf("ParseAuthorization(%q) = %q %q %q %v, want %q %q %q", tc.header, scheme, acct, sig, err, tc.scheme, tc.acct, tc.sig)
		}
	}
}

func TestParseAuthorizationDoesNotEchoToken(t *testing.T) {
	_, _, _, err := ParseAuthorization("Bearer secret-token extra")
	if err == nil {
		t.Fatal("want error")
	}
	if e := err.Error(); strings.Contains(e, "secret-token") {
		t.Fatalf("error echoes the token: %s", e)
	}
}
