package auth

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

const dev = "devstoreaccount1"

var (
	testNow  = time.Date(2024, time.May, 1, 10, 0, 0, 0, time.UTC)
	testDate = "Wed, 01 May 2024 10:00:00 GMT"
	key1     = DevAccount().Keys[0]
	key2     = []byte("the second key of devstoreaccount1, used while rotating key1")
	wrongKey = []byte("not a key of any account")
	otherKey = []byte("key of account other1")
)

// mac is written independently of the package under test: base64(HMAC-SHA256(key, sts)).
func mac(key []byte, sts string) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(sts))
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// rawRequest parses a request from wire text, so RequestURI holds the exact target bytes.
func rawRequest(t testing.TB, method, target string, headers ...string) *http.Request {
	t.Helper()
	var b strings.Builder
	b.WriteString(method + " " + target + " HTTP/1.1\r\n")
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(b.String())))
	if err != nil {
		t.Fatalf("ReadRequest(%q): %v", b.String(), err)
	}
	return r
}

func testVerifier() *Verifier {
	return NewVerifier([]Account{
		{Name: dev, Keys: [][]byte{key1, key2}},
		{Name: "other1", Keys: [][]byte{otherKey}},
	}, func() time.Time { return testNow })
}

func at(d time.Duration) string { return testNow.Add(d).Format(http.TimeFormat) }

func TestAuthenticate(t *testing.T) {
	const (
		lite = SchemeSharedKeyLite
		full = SchemeSharedKey
		host = "Host: 127.0.0.1:10002"
	)
	xmsDate := "x-ms-date: " + testDate
	tests := []struct {
		name    string
		account string // resolved by the server; default dev
		method  string // default GET
		target  string
		headers []string // besides Authorization
		// Authorization: literal if auth != "", else scheme + " " + hdrAcct + ":" + mac(key, sts).
		auth    string
		noAuth  bool
		scheme  string
		hdrAcct string // default account
		key     []byte // default key1
		sts     string
		// Expected result: "" for success.
		wantCode   azerr.Code
		wantDetail string
	}{
		// --- canonicalized resource ---
		{name: "lite path-style repeats account", target: "/devstoreaccount1/Tables",
			headers: []string{host, xmsDate}, scheme: lite,
			sts: testDate + "\n/devstoreaccount1/devstoreaccount1/Tables"},
		{name: "lite host-style", target: "/Tables",
			headers: []string{"Host: devstoreaccount1.table.core.windows.net", xmsDate}, scheme: lite,
			sts: testDate + "\n/devstoreaccount1/Tables"},
		{name: "host-style root with comp", target: "/?restype=service&comp=properties",
			headers: []string{"Host: devstoreaccount1.table.core.windows.net", xmsDate}, scheme: lite,
			sts: testDate + "\n/devstoreaccount1/?comp=properties"},
		{name: "path-style service root without slash (Go)", target: "/devstoreaccount1?restype=service&comp=properties",
			headers: []string{host, xmsDate}, scheme: lite,
			sts: testDate + "\n/devstoreaccount1/devstoreaccount1?comp=properties"},
		{name: "Go-style %27 escaped keys signed raw", target: "/devstoreaccount1/t1(PartitionKey='a%27%27b%20c',RowKey='r%2F1')",
			headers: []string{host, xmsDate}, scheme: lite,
			sts: testDate + "\n/devstoreaccount1/devstoreaccount1/t1(PartitionKey='a%27%27b%20c',RowKey='r%2F1')"},
		{name: "literal quotes signed raw", target: "/devstoreaccount1/t1(PartitionKey='a''b%20c',RowKey='r')",
			headers: []string{host, xmsDate}, scheme: lite,
			sts: testDate + "\n/devstoreaccount1/devstoreaccount1/t1(PartitionKey='a''b%20c',RowKey='r')"},
		{name: "re-escaped path is not the signed path", target: "/devstoreaccount1/t1(PartitionKey='a''b%20c',RowKey='r')",
			headers: []string{host, xmsDate}, scheme: lite,
			sts:      testDate + "\n/devstoreaccount1/devstoreaccount1/t1(PartitionKey='a%27%27b%20c',RowKey='r')",
			wantCode: azerr.AuthenticationFailed, wantDetail: "t1(PartitionKey='a''b%20c',RowKey='r')'."},
		{name: "decoded path is not the signed path", target: "/devstoreaccount1/t1(PartitionKey='a%20b',RowKey='r')",
			headers: []string{host, xmsDate}, scheme: lite,
			sts:      testDate + "\n/devstoreaccount1/devstoreaccount1/t1(PartitionKey='a b',RowKey='r')",
			wantCode: azerr.AuthenticationFailed},
		{name: "comp=acl included, timeout excluded", target: "/devstoreaccount1/mytable?timeout=30&comp=acl",
			headers: []string{host, xmsDate}, scheme: lite,
			sts: testDate + "\n/devstoreaccount1/devstoreaccount1/mytable?comp=acl"},
		{name: "percent-encoded comp value is decoded", target: "/devstoreaccount1/mytable?comp=%61cl",
			headers: []string{host, xmsDate}, scheme: lite,
			sts: testDate + "\n/devstoreaccount1/devstoreaccount1/mytable?comp=acl"},
		{name: "first comp wins", target: "/devstoreaccount1/mytable?comp=acl&comp=stats",
			headers: []string{host, xmsDate}, scheme: lite,
			sts: testDate + "\n/devstoreaccount1/devstoreaccount1/mytable?comp=acl"},
		{name: "other query params excluded", target: "/devstoreaccount1/mytable()?$filter=PartitionKey%20eq%20'a'&$top=5&NextPartitionKey=1!4!YQ--",
			headers: []string{host, xmsDate}, scheme: lite,
			sts: testDate + "\n/devstoreaccount1/devstoreaccount1/mytable()"},
		{name: "signing the whole query fails", target: "/devstoreaccount1/mytable()?$top=5",
			headers: []string{host, xmsDate}, scheme: lite,
			sts:      testDate + "\n/devstoreaccount1/devstoreaccount1/mytable()?$top=5",
			wantCode: azerr.AuthenticationFailed},
		{name: "absolute-form target signs only its path", target: "http://127.0.0.1:10002/devstoreaccount1/Tables?comp=acl",
			headers: []string{xmsDate}, scheme: lite,
			sts: testDate + "\n/devstoreaccount1/devstoreaccount1/Tables?comp=acl"},
		{name: "absolute-form target without path", target: "http://devstoreaccount1.table.core.windows.net?restype=service&comp=properties",
			headers: []string{xmsDate}, scheme: lite,
			sts: testDate + "\n/devstoreaccount1/?comp=properties"},

		// --- secondary endpoint ---
		{name: "secondary path-style signed as sent", target: "/devstoreaccount1-secondary/?restype=service&comp=stats",
			headers: []string{host, xmsDate}, scheme: lite,
			sts: testDate + "\n/devstoreaccount1/devstoreaccount1-secondary/?comp=stats"},
		{name: "secondary path-style signed with primary path", target: "/devstoreaccount1-secondary/?restype=service&comp=stats",
			headers: []string{host, xmsDate}, scheme: lite,
			sts: testDate + "\n/devstoreaccount1/devstoreaccount1/?comp=stats"},
		{name: "secondary without trailing slash", target: "/devstoreaccount1-secondary?restype=service&comp=stats",
			headers: []string{host, xmsDate}, scheme: full,
			sts: "GET\n\n\n" + testDate + "\n/devstoreaccount1/devstoreaccount1?comp=stats"},
		// The Python SDK (and az) signs the primary URL, then swaps the host for
		// "host/acct-secondary": the wire path gains a segment the signature lacks.
		{name: "secondary Python SDK stats", target: "/devstoreaccount1-secondary/devstoreaccount1/?restype=service&comp=stats",
			headers: []string{host, xmsDate, "Date: " + testDate}, scheme: full,
			sts: "GET\n\n\n" + testDate + "\n/devstoreaccount1/devstoreaccount1/?comp=stats"},
		{name: "secondary Python SDK list tables", target: "/devstoreaccount1-secondary/devstoreaccount1/Tables",
			headers: []string{host, xmsDate}, scheme: full,
			sts: "GET\n\n\n" + testDate + "\n/devstoreaccount1/devstoreaccount1/Tables"},
		{name: "secondary root without path, segment dropped", target: "/devstoreaccount1-secondary?restype=service&comp=stats",
			headers: []string{host, xmsDate}, scheme: lite,
			sts: testDate + "\n/devstoreaccount1/?comp=stats"},
		{name: "secondary signature of another resource refused", target: "/devstoreaccount1-secondary/t2()",
			headers: []string{host, xmsDate}, scheme: lite,
			sts:      testDate + "\n/devstoreaccount1/t1()",
			wantCode: azerr.AuthenticationFailed},
		{name: "secondary host-style", target: "/?restype=service&comp=stats",
			headers: []string{"Host: devstoreaccount1-secondary.table.core.windows.net", xmsDate}, scheme: lite,
			sts: testDate + "\n/devstoreaccount1/?comp=stats"},
		{name: "secondary header account is refused", target: "/devstoreaccount1-secondary/?restype=service&comp=stats",
			headers: []string{host, xmsDate}, scheme: lite, hdrAcct: "devstoreaccount1-secondary",
			sts:      testDate + "\n/devstoreaccount1-secondary/devstoreaccount1-secondary/?comp=stats",
			wantCode: azerr.AuthenticationFailed, wantDetail: "is not the account"},
		{name: "-secondaryX is not the secondary", target: "/devstoreaccount1-secondaryX/Tables",
			headers: []string{host, xmsDate}, scheme: lite,
			sts:      testDate + "\n/devstoreaccount1/devstoreaccount1X/Tables",
			wantCode: azerr.AuthenticationFailed},

		// --- SharedKey (Table variant) ---
		{name: "sharedkey batch multipart content type", method: "POST", target: "/devstoreaccount1/$batch",
			headers: []string{host, xmsDate, "Content-Type: multipart/mixed; boundary=batch_0f2c4b7e-6a51-4a3d-9d7e-1c2b3a4d5e6f"},
			scheme:  full,
			sts:     "POST\n\nmultipart/mixed; boundary=batch_0f2c4b7e-6a51-4a3d-9d7e-1c2b3a4d5e6f\n" + testDate + "\n/devstoreaccount1/devstoreaccount1/$batch"},
		{name: "sharedkey with content-md5", method: "PUT", target: "/devstoreaccount1/mytable?comp=acl",
			headers: []string{host, xmsDate, "Content-Type: application/xml", "Content-MD5: 1B2M2Y8AsgTpgAmY7PhCfg=="},
			scheme:  full,
			sts:     "PUT\n1B2M2Y8AsgTpgAmY7PhCfg==\napplication/xml\n" + testDate + "\n/devstoreaccount1/devstoreaccount1/mytable?comp=acl"},
		{name: "sharedkey content type is signed verbatim", method: "POST", target: "/devstoreaccount1/Tables",
			headers:  []string{host, xmsDate, "Content-Type: application/json;odata=nometadata"},
			scheme:   full,
			sts:      "POST\n\napplication/json; odata=nometadata\n" + testDate + "\n/devstoreaccount1/devstoreaccount1/Tables",
			wantCode: azerr.AuthenticationFailed},
		{name: "sharedkey verb is signed", method: "DELETE", target: "/devstoreaccount1/Tables('t1')",
			headers: []string{host, xmsDate}, scheme: full,
			sts:      "GET\n\n\n" + testDate + "\n/devstoreaccount1/devstoreaccount1/Tables('t1')",
			wantCode: azerr.AuthenticationFailed},
		{name: "sharedkey lite string is not a sharedkey string", target: "/devstoreaccount1/Tables",
			headers: []string{host, xmsDate}, scheme: full,
			sts:      testDate + "\n/devstoreaccount1/devstoreaccount1/Tables",
			wantCode: azerr.AuthenticationFailed},

		// --- dates ---
		{name: "lite with Date only", target: "/devstoreaccount1/Tables",
			headers: []string{host, "Date: " + at(-time.Minute)}, scheme: lite,
			sts: at(-time.Minute) + "\n/devstoreaccount1/devstoreaccount1/Tables"},
		{name: "lite uses x-ms-date over Date", target: "/devstoreaccount1/Tables",
			headers: []string{host, xmsDate, "Date: " + at(-time.Minute)}, scheme: lite,
			sts: testDate + "\n/devstoreaccount1/devstoreaccount1/Tables"},
		{name: "lite signed with Date while x-ms-date present fails", target: "/devstoreaccount1/Tables",
			headers: []string{host, xmsDate, "Date: " + at(-time.Minute)}, scheme: lite,
			sts:      at(-time.Minute) + "\n/devstoreaccount1/devstoreaccount1/Tables",
			wantCode: azerr.AuthenticationFailed},
		{name: "sharedkey x-ms-date in date slot", target: "/devstoreaccount1/Tables",
			headers: []string{host, xmsDate, "Date: " + at(-time.Minute)}, scheme: full,
			sts: "GET\n\n\n" + testDate + "\n/devstoreaccount1/devstoreaccount1/Tables"},
		{name: "sharedkey Date in date slot", target: "/devstoreaccount1/Tables",
			headers: []string{host, xmsDate, "Date: " + at(-time.Minute)}, scheme: full,
			sts: "GET\n\n\n" + at(-time.Minute) + "\n/devstoreaccount1/devstoreaccount1/Tables"},
		{name: "sharedkey stale Date in date slot fails", target: "/devstoreaccount1/Tables",
			headers: []string{host, xmsDate, "Date: " + at(-time.Hour)}, scheme: full,
			sts:      "GET\n\n\n" + at(-time.Hour) + "\n/devstoreaccount1/devstoreaccount1/Tables",
			wantCode: azerr.AuthenticationFailed, wantDetail: "The MAC signature"},
		{name: "sharedkey with Date only", target: "/devstoreaccount1/Tables",
			headers: []string{host, "Date: " + testDate}, scheme: full,
			sts: "GET\n\n\n" + testDate + "\n/devstoreaccount1/devstoreaccount1/Tables"},
		{name: "date 14 minutes ahead ok", target: "/devstoreaccount1/Tables",
			headers: []string{host, "x-ms-date: " + at(14*time.Minute)}, scheme: lite,
			sts: at(14*time.Minute) + "\n/devstoreaccount1/devstoreaccount1/Tables"},
		{name: "date exactly 15 minutes old ok", target: "/devstoreaccount1/Tables",
			headers: []string{host, "x-ms-date: " + at(-15*time.Minute)}, scheme: lite,
			sts: at(-15*time.Minute) + "\n/devstoreaccount1/devstoreaccount1/Tables"},
		{name: "date 16 minutes old", target: "/devstoreaccount1/Tables",
			headers: []string{host, "x-ms-date: " + at(-16*time.Minute)}, scheme: lite,
			sts:      at(-16*time.Minute) + "\n/devstoreaccount1/devstoreaccount1/Tables",
			wantCode: azerr.AuthenticationFailed, wantDetail: "Request date header too old: '" + at(-16*time.Minute) + "'"},
		{name: "date 16 minutes ahead", target: "/devstoreaccount1/Tables",
			headers: []string{host, "x-ms-date: " + at(16*time.Minute)}, scheme: lite,
			sts:      at(16*time.Minute) + "\n/devstoreaccount1/devstoreaccount1/Tables",
			wantCode: azerr.AuthenticationFailed, wantDetail: "too far in the future"},
		{name: "stale x-ms-date is not rescued by fresh Date", target: "/devstoreaccount1/Tables",
			headers: []string{host, "x-ms-date: " + at(-time.Hour), "Date: " + testDate}, scheme: full,
			sts:      "GET\n\n\n" + testDate + "\n/devstoreaccount1/devstoreaccount1/Tables",
			wantCode: azerr.AuthenticationFailed, wantDetail: "too old"},
		// The service requires the date for SharedKeyLite too; the detail says what to send.
		{name: "missing date", target: "/devstoreaccount1/Tables",
			headers: []string{host}, scheme: lite,
			sts:      "\n/devstoreaccount1/devstoreaccount1/Tables",
			wantCode: azerr.AuthenticationFailed, wantDetail: "date header not specified: SharedKey and SharedKeyLite requests must carry x-ms-date (or Date) with the current time in RFC 1123 format, e.g. 'x-ms-date: Mon, 02 Jan 2006 15:04:05 GMT'"},
		{name: "missing date (SharedKey)", target: "/devstoreaccount1/Tables",
			headers: []string{host}, scheme: full,
			sts:      "GET\n\n\n\n/devstoreaccount1/devstoreaccount1/Tables",
			wantCode: azerr.AuthenticationFailed, wantDetail: "must carry x-ms-date (or Date)"},
		{name: "empty x-ms-date falls back to Date", target: "/devstoreaccount1/Tables",
			headers: []string{host, "x-ms-date:", "Date: " + testDate}, scheme: lite,
			sts: testDate + "\n/devstoreaccount1/devstoreaccount1/Tables"},
		{name: "unparseable date", target: "/devstoreaccount1/Tables",
			headers: []string{host, "x-ms-date: 2024-05-01T10:00:00Z"}, scheme: lite,
			sts:      "2024-05-01T10:00:00Z\n/devstoreaccount1/devstoreaccount1/Tables",
			wantCode: azerr.AuthenticationFailed, wantDetail: "not a valid RFC 1123 date"},

		// --- keys and accounts ---
		{name: "key2", target: "/devstoreaccount1/Tables", headers: []string{host, xmsDate},
			scheme: lite, key: key2, sts: testDate + "\n/devstoreaccount1/devstoreaccount1/Tables"},
		{name: "wrong key", target: "/devstoreaccount1/Tables", headers: []string{host, xmsDate},
			scheme: lite, key: wrongKey, sts: testDate + "\n/devstoreaccount1/devstoreaccount1/Tables",
			wantCode:   azerr.AuthenticationFailed,
			wantDetail: "is not the same as any computed signature. Server used following string to sign: '" + testDate + "\n/devstoreaccount1/devstoreaccount1/Tables'."},
		{name: "other account's key", target: "/devstoreaccount1/Tables", headers: []string{host, xmsDate},
			scheme: lite, key: otherKey, sts: testDate + "\n/devstoreaccount1/devstoreaccount1/Tables",
			wantCode: azerr.AuthenticationFailed},
		{name: "second account", account: "other1", target: "/other1/Tables", headers: []string{host, xmsDate},
			scheme: full, key: otherKey, sts: "GET\n\n\n" + testDate + "\n/other1/other1/Tables"},
		{name: "unknown account fails like a bad signature", account: "nosuchacct", target: "/nosuchacct/Tables",
			headers: []string{host, xmsDate}, scheme: lite,
			sts:      testDate + "\n/nosuchacct/nosuchacct/Tables",
			wantCode: azerr.AuthenticationFailed, wantDetail: "The MAC signature found in the HTTP request"},
		{name: "header account differs from request account", target: "/devstoreaccount1/Tables",
			headers: []string{host, xmsDate}, scheme: lite, hdrAcct: "other1", key: otherKey,
			sts:      testDate + "\n/other1/devstoreaccount1/Tables",
			wantCode: azerr.AuthenticationFailed, wantDetail: "'other1' in the Authorization header is not the account 'devstoreaccount1'"},
		{name: "header account case differs", target: "/devstoreaccount1/Tables",
			headers: []string{host, xmsDate}, scheme: lite, hdrAcct: "DevStoreAccount1",
			sts:      testDate + "\n/DevStoreAccount1/devstoreaccount1/Tables",
			wantCode: azerr.AuthenticationFailed},
		{name: "signature not base64", target: "/devstoreaccount1/Tables", headers: []string{host, xmsDate},
			auth:     "SharedKeyLite devstoreaccount1:" + strings.Repeat("!", 44),
			wantCode: azerr.AuthenticationFailed, wantDetail: "'" + strings.Repeat("!", 44) + "'"},
		{name: "signature wrong length", target: "/devstoreaccount1/Tables", headers: []string{host, xmsDate},
			auth:     "SharedKeyLite devstoreaccount1:" + mac(key1, testDate+"\n/devstoreaccount1/devstoreaccount1/Tables") + "AA",
			wantCode: azerr.AuthenticationFailed},
		{name: "non-canonical base64 rejected", target: "/devstoreaccount1/Tables", headers: []string{host, xmsDate},
			auth:     "SharedKeyLite devstoreaccount1:" + tweakLastBits(mac(key1, testDate+"\n/devstoreaccount1/devstoreaccount1/Tables")),
			wantCode: azerr.AuthenticationFailed},

		// --- header shape ---
		{name: "no authorization", target: "/devstoreaccount1/Tables", headers: []string{host, xmsDate},
			noAuth: true, wantCode: azerr.NoAuthenticationInformation},
		{name: "empty authorization", target: "/devstoreaccount1/Tables", headers: []string{host, xmsDate, "Authorization:"},
			noAuth: true, wantCode: azerr.InvalidAuthenticationInfo},
		{name: "two authorization headers", target: "/devstoreaccount1/Tables",
			headers: []string{host, xmsDate, "Authorization: SharedKeyLite devstoreaccount1:" + mac(key1, testDate+"\n/devstoreaccount1/devstoreaccount1/Tables")},
			scheme:  lite, sts: testDate + "\n/devstoreaccount1/devstoreaccount1/Tables",
			wantCode: azerr.InvalidAuthenticationInfo, wantDetail: "More than one"},
		{name: "malformed", target: "/devstoreaccount1/Tables", headers: []string{host, xmsDate},
			auth: "SharedKeyLite devstoreaccount1", wantCode: azerr.InvalidAuthenticationInfo},
		{name: "unknown scheme", target: "/devstoreaccount1/Tables", headers: []string{host, xmsDate},
			auth: "Basic dXNlcjpwYXNz", wantCode: azerr.InvalidAuthenticationInfo},
		{name: "bearer", target: "/devstoreaccount1/Tables", headers: []string{host, xmsDate},
			auth: "Bearer eyJhbGciOiJSUzI1NiJ9.e30.c2ln", wantCode: azerr.AuthenticationFailed, wantDetail: "Bearer"},
	}
	v := testVerifier()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			account := tc.account
			if account == "" {
				account = dev
			}
			method := tc.method
			if method == "" {
				method = "GET"
			}
			headers := append([]string(nil), tc.headers...)
			switch {
			case tc.noAuth:
			case tc.auth != "":
				headers = append(headers, "Authorization: "+tc.auth)
			default:
				hdrAcct, key := tc.hdrAcct, tc.key
				if hdrAcct == "" {
					hdrAcct = account
				}
				if key == nil {
					key = key1
				}
				headers = append(headers, "Authorization: "+tc.scheme+" "+hdrAcct+":"+mac(key, tc.sts))
			}
			r := rawRequest(t, method, tc.target, headers...)
			err := v.Authenticate(r, account)
			if tc.wantCode == "" {
				if err != nil {
					t.Fatalf("Authenticate: %v", err)
				}
				return
			}
			var ae *azerr.Error
			if !errors.As(err, &ae) {
				t.Fatalf("Authenticate = %v, want *azerr.Error %s", err, tc.wantCode)
			}
			if ae.Code != tc.wantCode || ae.Status != azerr.Status(tc.wantCode) {
				t.Fatalf("Authenticate = %s/%d (%s), want %s", ae.Code, ae.Status, ae.Detail, tc.wantCode)
			}
			if !strings.Contains(ae.Detail, tc.wantDetail) {
				t.Fatalf("detail = %q, want containing %q", ae.Detail, tc.wantDetail)
			}
		})
	}
}

// tweakLastBits re-spells a base64 signature with non-zero padding bits: same decoded bytes
// for a lenient decoder, a different string.
func tweakLastBits(sig string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	c := sig[len(sig)-2] // the character before '=' carries 2 unused bits
	i := strings.IndexByte(alphabet, c)
	return sig[:len(sig)-2] + string(alphabet[i^1]) + "="
}

func TestAuthenticateStatuses(t *testing.T) {
	// The statuses the server will send, straight from the catalogue.
	for code, status := range map[azerr.Code]int{
		azerr.NoAuthenticationInformation: 401,
		azerr.InvalidAuthenticationInfo:   400,
		azerr.AuthenticationFailed:        403,
	} {
		if got := azerr.Status(code); got != status {
			t.Errorf("%s status = %d, want %d", code, got, status)
		}
	}
}

func TestMismatchDetailExact(t *testing.T) {
	v := testVerifier()
	sts := "PUT\n\napplication/json\n" + testDate + "\n/devstoreaccount1/devstoreaccount1/t(PartitionKey='p',RowKey='r')"
	sig := mac(wrongKey, sts)
	r := rawRequest(t, "PUT", "/devstoreaccount1/t(PartitionKey='p',RowKey='r')?timeout=5",
		"x-ms-date: "+testDate, "Content-Type: application/json", "Authorization: SharedKey devstoreaccount1:"+sig)
	err := v.Authenticate(r, dev)
	want := "The MAC signature found in the HTTP request '" + sig + "' is not the same as any computed signature. Server used following string to sign: '" + sts + "'."
	var ae *azerr.Error
	if !errors.As(err, &ae) || ae.Detail != want {
		t.Fatalf("Authenticate = %v\nwant detail %q", err, want)
	}
	if ae.Message != azerr.New(azerr.AuthenticationFailed).Message {
		t.Fatalf("message = %q, want the catalogue's", ae.Message)
	}
}

func TestClientRequestUsesEscapedPath(t *testing.T) {
	// A request built with http.NewRequest has no RequestURI; the path is what Go puts on
	// the wire (URL.EscapedPath), which is also what the Go SDK signs.
	r, err := http.NewRequest("GET", "http://127.0.0.1:10002/devstoreaccount1/t1(PartitionKey='a%27%27b%20c',RowKey='')?comp=acl&timeout=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("x-ms-date", testDate)
	sts := testDate + "\n/devstoreaccount1/devstoreaccount1/t1(PartitionKey='a%27%27b%20c',RowKey='')?comp=acl"
	if got := StringToSign(r, SchemeSharedKeyLite, dev); got != sts {
		t.Fatalf("StringToSign = %q, want %q", got, sts)
	}
	r.Header.Set("Authorization", "SharedKeyLite devstoreaccount1:"+mac(key1, sts))
	if err := testVerifier().Authenticate(r, dev); err != nil {
		t.Fatal(err)
	}
}

func TestHelpers(t *testing.T) {
	r := rawRequest(t, "POST", "/devstoreaccount1/$batch?comp=x%20y&restype=service",
		"x-ms-date: "+testDate, "Date: Tue, 30 Apr 2024 10:00:00 GMT", "Content-Type: multipart/mixed; boundary=b", "Content-MD5: bWQ1")
	if got, want := CanonicalizedResource(r, dev), "/devstoreaccount1/devstoreaccount1/$batch?comp=x y"; got != want {
		t.Errorf("CanonicalizedResource = %q, want %q", got, want)
	}
	if got, want := StringToSign(r, SchemeSharedKeyLite, dev), testDate+"\n/devstoreaccount1/devstoreaccount1/$batch?comp=x y"; got != want {
		t.Errorf("StringToSign(lite) = %q, want %q", got, want)
	}
	if got, want := StringToSign(r, SchemeSharedKey, dev), "POST\nbWQ1\nmultipart/mixed; boundary=b\n"+testDate+"\n/devstoreaccount1/devstoreaccount1/$batch?comp=x y"; got != want {
		t.Errorf("StringToSign(full) = %q, want %q", got, want)
	}
	if got, want := Sign(key1, "abc"), mac(key1, "abc"); got != want {
		t.Errorf("Sign = %q, want %q", got, want)
	}
	root := rawRequest(t, "GET", "/", "Host: acct1.table.core.windows.net")
	if got, want := CanonicalizedResource(root, "acct1"), "/acct1/"; got != want {
		t.Errorf("root CanonicalizedResource = %q, want %q", got, want)
	}
}

func TestSignRequestRoundTrip(t *testing.T) {
	v := testVerifier()
	for _, scheme := range []string{SchemeSharedKey, SchemeSharedKeyLite} {
		r, err := http.NewRequest("PATCH", "http://h/devstoreaccount1/t(PartitionKey='x',RowKey='y')", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Content-Type", "application/json")
		SignRequest(r, scheme, dev, key2, testNow)
		if got := r.Header.Get("x-ms-date"); got != testDate {
			t.Fatalf("x-ms-date = %q", got)
		}
		if err := v.Authenticate(r, dev); err != nil {
			t.Fatalf("%s: %v", scheme, err)
		}
		// Any change to a signed part breaks it.
		r.Header.Set("Content-Type", "application/json;odata=nometadata")
		err = v.Authenticate(r, dev)
		if (scheme == SchemeSharedKey) != (err != nil) {
			t.Fatalf("%s after Content-Type change: %v", scheme, err)
		}
	}
}

func TestVerifierAccount(t *testing.T) {
	v := NewVerifier([]Account{{Name: "alpha", Keys: [][]byte{[]byte("k1")}}, {Name: "alpha", Keys: [][]byte{[]byte("k2")}}}, nil)
	a, ok := v.Account("alpha")
	if !ok || len(a.Keys) != 2 || string(a.Keys[0]) != "k1" || string(a.Keys[1]) != "k2" {
		t.Fatalf("Account(alpha) = %+v, %v", a, ok)
	}
	a.Keys[0][0] = 'X'
	if b, _ := v.Account("alpha"); string(b.Keys[0]) != "k1" {
		t.Fatal("Account returned shared key memory")
	}
	if _, ok := v.Account("beta"); ok {
		t.Fatal("Account(beta) found")
	}
	// nil clock means time.Now: a freshly signed request verifies.
	r, _ := http.NewRequest("GET", "http://h/alpha/Tables", nil)
	SignRequest(r, SchemeSharedKeyLite, "alpha", []byte("k2"), time.Now())
	if err := v.Authenticate(r, "alpha"); err != nil {
		t.Fatal(err)
	}
}

func TestAuthenticateConcurrent(t *testing.T) {
	v := testVerifier()
	done := make(chan error)
	for g := 0; g < 8; g++ {
		go func(g int) {
			var err error
			for i := 0; i < 200 && err == nil; i++ {
				key := key1
				if (g+i)%2 == 1 {
					key = key2
				}
				r, _ := http.NewRequest("GET", "http://h/devstoreaccount1/t"+strings.Repeat("x", i%7)+"()", nil)
				SignRequest(r, SchemeSharedKeyLite, dev, key, testNow)
				err = v.Authenticate(r, dev)
				if i%10 == 0 { // interleave failures, which use the same pools
					r.Header.Set("Authorization", "SharedKeyLite devstoreaccount1:"+mac(wrongKey, "x"))
					if v.Authenticate(r, dev) == nil {
						err = errors.New("wrong key accepted")
					}
				}
			}
			done <- err
		}(g)
	}
	for g := 0; g < 8; g++ {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

func TestAuthenticateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops objects under -race")
	}
	v := testVerifier()
	r := benchRequest(t)
	if err := v.Authenticate(r, dev); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(200, func() {
		if err := v.Authenticate(r, dev); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Errorf("successful Authenticate allocates %.1f times per call, want 0", allocs)
	}
}

func benchRequest(t testing.TB) *http.Request {
	const target = "/devstoreaccount1/mytable(PartitionKey='partition%20one',RowKey='row%27%2742')"
	sts := testDate + "\n/devstoreaccount1/devstoreaccount1/mytable(PartitionKey='partition%20one',RowKey='row%27%2742')"
	return rawRequest(t, "GET", target,
		"Host: 127.0.0.1:10002",
		"x-ms-date: "+testDate,
		"x-ms-version: 2019-02-02",
		"Accept: application/json;odata=minimalmetadata",
		"DataServiceVersion: 3.0",
		"Authorization: SharedKeyLite devstoreaccount1:"+mac(key1, sts))
}

// BenchmarkAuthenticate measures one successful verification (parse header, check the
// date, build the string to sign, one HMAC-SHA256, compare).
func BenchmarkAuthenticate(b *testing.B) {
	v := testVerifier()
	r := benchRequest(b)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := v.Authenticate(r, dev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := v.Authenticate(r, dev); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("key2", func(b *testing.B) { // worst successful case: key1 tried first
		r := benchRequest(b)
		sts := testDate + "\n/devstoreaccount1/devstoreaccount1/mytable(PartitionKey='partition%20one',RowKey='row%27%2742')"
		r.Header.Set("Authorization", "SharedKeyLite devstoreaccount1:"+mac(key2, sts))
		b.ReportAllocs()
		for b.Loop() {
			if err := v.Authenticate(r, dev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hmac.New per request", func(b *testing.B) { // the alternative to pooling, for comparison
		b.ReportAllocs()
		msg := []byte(testDate + "\n/devstoreaccount1/devstoreaccount1/mytable(PartitionKey='partition%20one',RowKey='row%27%2742')")
		var sum [sha256.Size]byte
		for b.Loop() {
			h := hmac.New(sha256.New, key1)
			h.Write(msg)
			h.Sum(sum[:0])
		}
	})
}

// TestAuthenticateDateMemo checks that the memoised parse of the last request date (see
// Verifier.lastDate) never carries a verdict: the same date header is judged against the
// clock of each call, and a malformed date after a good one is still refused.
func TestAuthenticateDateMemo(t *testing.T) {
	now := testNow
	v := NewVerifier([]Account{{Name: dev, Keys: [][]byte{key1}}}, func() time.Time { return now })
	r := benchRequest(t)
	for _, c := range []struct {
		now    time.Time
		detail string // "" for success
	}{
		{testNow, ""},
		{testNow.Add(MaxClockSkew), ""},
		{testNow.Add(MaxClockSkew + time.Second), "Request date header too old"},
		{testNow.Add(-MaxClockSkew - time.Second), "Request date header too far in the future"},
		{testNow, ""},
	} {
		now = c.now
		err := v.Authenticate(r, dev)
		if c.detail == "" {
			if err != nil {
				t.Errorf("at %v: %v", c.now, err)
			}
			continue
		}
		if e, ok := azerr.As(err); !ok || !strings.HasPrefix(e.Detail, c.detail) {
			t.Errorf("at %v: %v, want detail %q", c.now, err, c.detail)
		}
	}
	bad := benchRequest(t)
	bad.Header.Set("x-ms-date", "Wed, 01 May 2024 10:00:00 XYZ")
	if e, ok := azerr.As(v.Authenticate(bad, dev)); !ok || !strings.Contains(e.Detail, "not a valid RFC 1123 date") {
		t.Errorf("malformed date after a good one: %v", e)
	}
}
