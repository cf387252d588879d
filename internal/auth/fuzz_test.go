package auth

import (
	"bufio"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

// FuzzParseAuthorization: never panics; accepted headers are well-formed and round-trip;
// rejected ones are InvalidAuthenticationInfo.
func FuzzParseAuthorization(f *testing.F) {
	for _, s := range []string{
		"SharedKeyLite devstoreaccount1:Q2hhbmdlIG1lIHRvIGEgcmVhbCBzaWduYXR1cmUgcGxzPQ==",
		"SharedKey acct:sig",
		"sharedkey \t acct:a:b",
		"Bearer eyJ0eXAiOiJKV1QifQ.e30.sig",
		"Bearer",
		"SharedKey :",
		"SharedKeyLite acct:",
		"Basic dXNlcjpwYXNz",
		"",
		"SharedKey\x00acct:sig",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		scheme, account, sig, err := ParseAuthorization(header)
		if err != nil {
			var ae *azerr.Error
			if !errors.As(err, &ae) || ae.Code != azerr.InvalidAuthenticationInfo || ae.Status != 400 {
				t.Fatalf("ParseAuthorization(%q) error %v is not InvalidAuthenticationInfo", header, err)
			}
			if scheme != "" || account != "" || sig != "" {
				t.Fatalf("ParseAuthorization(%q) returned values with an error", header)
			}
			return
		}
		if got := Scheme(header); got != scheme {
			t.Fatalf("Scheme(%q) = %q, ParseAuthorization's %q", header, got, scheme)
		}
		switch scheme {
		case SchemeBearer:
			if account != "" || sig == "" || !printable(sig) {
				t.Fatalf("ParseAuthorization(%q) = bearer %q %q", header, account, sig)
			}
			return
		case SchemeSharedKey, SchemeSharedKeyLite:
		default:
			t.Fatalf("ParseAuthorization(%q): unexpected scheme %q", header, scheme)
		}
		if account == "" || sig == "" || !printable(account) || !printable(sig) || strings.Contains(account, ":") {
			t.Fatalf("ParseAuthorization(%q) = %q %q %q", header, scheme, account, sig)
		}
		s2, a2, sig2, err := ParseAuthorization(scheme + " " + account + ":" + sig)
		if err != nil || s2 != scheme || a2 != account || sig2 != sig {
			t.Fatalf("round trip of %q: %q %q %q %v", header, s2, a2, sig2, err)
		}
	})
}

// FuzzAuthenticate feeds arbitrary request lines and headers through the whole verifier.
// It checks that Authenticate never panics and only returns the three auth errors; that
// the canonicalized resource uses the exact raw path and the same comp value url.ParseQuery
// (the Go SDK's signer) finds; and that the request, once properly signed with either
// scheme, verifies.
func FuzzAuthenticate(f *testing.F) {
	f.Add("GET", "/devstoreaccount1/Tables", "SharedKeyLite devstoreaccount1:c2ln", testDate, "")
	f.Add("GET", "/devstoreaccount1/t(PartitionKey='a%27%27b%20c',RowKey='')?comp=acl&timeout=3", "SharedKey devstoreaccount1:x", testDate, "")
	f.Add("POST", "/devstoreaccount1/$batch", "SharedKey devstoreaccount1:AAAA", testDate, "multipart/mixed; boundary=batch_1")
	f.Add("GET", "/devstoreaccount1-secondary?restype=service&comp=stats", "SharedKeyLite devstoreaccount1:AAAA", testDate, "")
	f.Add("GET", "/?comp=a%3Bb;comp=x&comp=%zz&COMP=y&co%6Dp=z", "Bearer tok", testDate, "")
	f.Add("GET", "http://acct.table.core.windows.net?comp=properties", "SharedKeyLite devstoreaccount1:AAAA", "Wed, 01 May 2024 09:40:00 GMT", "")
	f.Add("OPTIONS", "*", "", "", "")
	f.Add("MERGE", "/devstoreaccount1/t(PartitionKey='x',RowKey='y')", "SharedKeyLite DevStoreAccount1:AAAA", "garbage", "application/json")
	v := testVerifier()
	f.Fuzz(func(t *testing.T, method, target, authz, date, contentType string) {
		raw := method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		if authz != "" {
			raw += "Authorization: " + authz + "\r\n"
		}
		if date != "" {
			raw += "x-ms-date: " + date + "\r\n"
		}
		if contentType != "" {
			raw += "Content-Type: " + contentType + "\r\n"
		}
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw + "\r\n")))
		if err != nil {
			return
		}
		if err := v.Authenticate(r, dev); err != nil {
			var ae *azerr.Error
			if !errors.As(err, &ae) {
				t.Fatalf("Authenticate returned a non-azerr error %T %v", err, err)
			}
			switch ae.Code {
			case azerr.NoAuthenticationInformation, azerr.InvalidAuthenticationInfo, azerr.AuthenticationFailed:
			default:
				t.Fatalf("Authenticate returned %s", ae.Code)
			}
			if ae.Status != azerr.Status(ae.Code) {
				t.Fatalf("status %d for %s", ae.Status, ae.Code)
			}
		}

		// Raw path: the request target up to '?', byte for byte.
		if strings.HasPrefix(r.RequestURI, "/") {
			want, _, _ := strings.Cut(r.RequestURI, "?")
			if got := requestPath(r); got != want {
				t.Fatalf("requestPath = %q, want %q", got, want)
			}
		}
		// comp: the same value the Go SDK's url.ParseQuery-based signer picks.
		if values, err := url.ParseQuery(r.URL.RawQuery); err == nil || !strings.Contains(err.Error(), "exceeded limit") {
			gotV, gotOK := compParam(r.URL.RawQuery)
			wantV, wantOK := values["comp"]
			if gotOK != wantOK || (wantOK && gotV != wantV[0]) {
				t.Fatalf("compParam(%q) = %q %v, url.ParseQuery gives %q %v", r.URL.RawQuery, gotV, gotOK, wantV, wantOK)
			}
		}

		// Properly signed, it verifies, whatever the path, verb and content type.
		r.Header.Del("Date")
		r.Header.Set("x-ms-date", testDate)
		for _, scheme := range []string{SchemeSharedKeyLite, SchemeSharedKey} {
			for _, key := range [][]byte{key1, key2} {
				SignRequest(r, scheme, dev, key, testNow)
				if err := v.Authenticate(r, dev); err != nil {
					t.Fatalf("%s %q signed with %s: %v", method, target, scheme, err)
				}
			}
		}
		SignRequest(r, SchemeSharedKeyLite, dev, wrongKey, testNow)
		if err := v.Authenticate(r, dev); err == nil {
			t.Fatalf("%s %q: wrong key accepted", method, target)
		}
	})
}
