package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

// MaxClockSkew is how far the request date may be from the server clock, in either
// direction, before the request is refused (the real service's limit, docs/protocol.md §2.1).
// It bounds how long a captured request can be replayed.
const MaxClockSkew = 15 * time.Minute

// Header keys in canonical MIME form. Requests parsed by net/http always carry canonical
// keys, so the verifier indexes the header map directly instead of canonicalising per call.
const (
	hdrAuthorization = "Authorization"
	hdrXMsDate       = "X-Ms-Date"
	hdrDate          = "Date"
	hdrContentMD5    = "Content-Md5"
	hdrContentType   = "Content-Type"
)

const secondarySuffix = "-secondary"

// dateExample shows the RFC 1123 date format in error messages.
const dateExample = "Mon, 02 Jan 2006 15:04:05 GMT"

// strictB64 rejects non-canonical encodings (stray bits in the last character), so that a
// signature has exactly one accepted spelling, as in the service.
var strictB64 = base64.StdEncoding.Strict()

// sigLen is the length of a base64 HMAC-SHA256: every valid signature has exactly this length.
var sigLen = base64.StdEncoding.EncodedLen(sha256.Size)

// Verifier checks shared-key signatures for a fixed set of accounts. It is immutable after
// NewVerifier and safe for concurrent use; to change accounts or keys, build a new one.
type Verifier struct {
	accounts map[string]*verifierAccount
	now      func() time.Time
	// lastDate memoises the last request date parsed: clients send the same x-ms-date
	// on every request within a second, and parsing it costs more than the rest of the
	// date check. It changes nothing a Verifier answers.
	lastDate atomic.Pointer[parsedDate]
}

// parsedDate is a request date header value and the time it parses to.
type parsedDate struct {
	value string
	t     time.Time
}

type verifierAccount struct {
	account Account
	keys    []*macKey
}

// macKey computes HMAC-SHA256 with one key. An HMAC hash.Hash is stateful and not safe for
// concurrent use, and hmac.New costs several allocations plus two SHA-256 blocks of key
// setup, so each key keeps a pool of ready instances.
type macKey struct {
	pool sync.Pool // of hash.Hash
}

func newMACKey(key []byte) *macKey {
	k := &macKey{}
	k.pool.New = func() any { return hmac.New(sha256.New, key) }
	return k
}

// sum stores HMAC(key, msg) in dst.
func (k *macKey) sum(dst *[sha256.Size]byte, msg []byte) {
	h := k.pool.Get().(hash.Hash)
	h.Write(msg)
	h.Sum(dst[:0])
	h.Reset()
	k.pool.Put(h)
}

// decoyKey is used for accounts that do not exist so that they cost the same HMAC work as
// a wrong signature on a real account (the response must not reveal which accounts exist).
var decoyKey = newMACKey([]byte("cerulean: no such account"))

// scratch is per-request working memory, pooled so that a successful verification does not
// allocate.
type scratch struct {
	sts  []byte            // a string to sign
	sig  []byte            // the signature text from the header, as bytes
	want [36]byte          // the decoded signature (DecodedLen(44) = 33)
	got  [sha256.Size]byte // a computed MAC
}

var scratchPool = sync.Pool{New: func() any { return &scratch{sts: make([]byte, 0, 256)} }}

// maxPooledSTS keeps a request with a huge URL from pinning a huge buffer in the pool.
const maxPooledSTS = 16 << 10

// NewVerifier returns a Verifier for accounts. Key slices are copied. An account listed
// twice gets the union of its keys. now is the clock for the date-skew check; nil means
// time.Now.
func NewVerifier(accounts []Account, now func() time.Time) *Verifier {
	if now == nil {
		now = time.Now
	}
	v := &Verifier{accounts: make(map[string]*verifierAccount, len(accounts)), now: now}
	for _, a := range accounts {
		va := v.accounts[a.Name]
		if va == nil {
			va = &verifierAccount{account: Account{Name: a.Name}}
			v.accounts[a.Name] = va
		}
		va.account.SharedKeyOff = va.account.SharedKeyOff || a.SharedKeyOff
		for _, key := range a.Keys {
			key = append([]byte(nil), key...)
			va.account.Keys = append(va.account.Keys, key)
			va.keys = append(va.keys, newMACKey(key))
		}
	}
	return v
}

// Account returns the named account (a copy: modifying it does not affect the Verifier).
func (v *Verifier) Account(name string) (Account, bool) {
	va, ok := v.accounts[name]
	if !ok {
		return Account{}, false
	}
	a := Account{Name: va.account.Name, Keys: make([][]byte, len(va.account.Keys))}
	for i, k := range va.account.Keys {
		a.Keys[i] = append([]byte(nil), k...)
	}
	return a, true
}

// Authenticate verifies the shared-key Authorization of r, a request the server received
// for account: the account name the server resolved from the host or the first path
// segment, with any "-secondary" suffix already removed. It returns nil when the request
// is signed with one of the account's keys, else a *azerr.Error:
//
//   - no Authorization header: 401 NoAuthenticationInformation (the server should add a
//     WWW-Authenticate challenge, as the catalogue message promises);
//   - malformed header, or several Authorization headers: 400 InvalidAuthenticationInfo;
//   - Bearer token, account in the header other than account (compared case-sensitively:
//     account names are lowercase), missing/unparseable date, date more than MaxClockSkew
//     from now, unknown account, or no key reproducing the signature: 403
//     AuthenticationFailed with an explanatory Detail. An unknown account fails exactly
//     like a wrong signature so that responses do not reveal which accounts exist.
//
// What is signed (docs/protocol.md §8.2–8.4):
//
//	CanonicalizedResource = "/" + account + <raw path> [+ "?comp=" + <comp value>]
//	SharedKeyLite: DateValue + "\n" + CanonicalizedResource
//	SharedKey:     VERB + "\n" + Content-MD5 + "\n" + Content-Type + "\n" + DateValue + "\n" + CanonicalizedResource
//
// The raw path is taken from r.RequestURI, the request target exactly as received, since
// clients sign their own escaping ('%27' from Go, a literal "'" from .NET/JS) and
// re-escaping r.URL would break one or the other. DateValue is x-ms-date if present and
// non-empty, else Date; that value must be RFC 1123 (http.ParseTime) and within
// MaxClockSkew. For SharedKey the Date header is also tried in the date slot, provided it
// is itself within the skew window (Python signs x-ms-date there, Azurite prefers Date).
// For a path-style secondary request ("/acct-secondary/x"), two more spellings of the
// path are tried: with the suffix removed ("/acct/x", so CanonicalizedResource
// "/acct/acct/x"; Azurite accepts it), and without the "/acct-secondary" segment
// (CanonicalizedResource "/acct/x"). The second is what the Python SDK, and so the Azure
// CLI, signs: its credential policy signs the primary URL ("http://host/acct/..."), and
// the StorageHosts policy that runs after it moves the request to the secondary by
// replacing the host with "host/acct-secondary", so "/acct-secondary/acct/..." goes on the
// wire signed as "/acct/acct/..." (azure-data-tables 12.4.2, _base_client.py
// _configure_policies and _policies.py StorageHosts). Both name the same resource of the
// same account as the request, so no signature covers more than it did.
func (v *Verifier) Authenticate(r *http.Request, account string) error {
	vals := r.Header[hdrAuthorization]
	if len(vals) == 0 {
		return azerr.New(azerr.NoAuthenticationInformation)
	}
	if len(vals) > 1 {
		return invalidAuthInfo("More than one Authorization header was sent.")
	}
	scheme, hdrAccount, sig, err := ParseAuthorization(vals[0])
	if err != nil {
		return err
	}
	if scheme == SchemeBearer {
		return authFailed("Bearer (OAuth) tokens are not supported by this server; sign requests with SharedKey or SharedKeyLite.")
	}
	if hdrAccount != account {
		return authFailed(fmt.Sprintf("The account '%s' in the Authorization header is not the account '%s' that the request addresses.", hdrAccount, account))
	}

	xmsDate, date := first(r.Header[hdrXMsDate]), first(r.Header[hdrDate])
	dateValue, dateName := xmsDate, "x-ms-date"
	if dateValue == "" {
		dateValue, dateName = date, "Date"
	}
	if dateValue == "" {
		// The service requires the date for both schemes; hand-written clients often omit it
		// with SharedKeyLite, so say exactly what to send.
		return authFailed("Request date header not specified: SharedKey and SharedKeyLite requests must carry " +
			"x-ms-date (or Date) with the current time in RFC 1123 format, e.g. 'x-ms-date: " + dateExample +
			"', and sign that same value (the first line of a SharedKeyLite string to sign).")
	}
	now := v.now()
	if e := v.checkDate(dateName, dateValue, now); e != nil {
		return e
	}

	p := stsParts{scheme: scheme, account: account}
	if scheme == SchemeSharedKey {
		p.method = r.Method
		p.contentMD5 = first(r.Header[hdrContentMD5])
		p.contentType = first(r.Header[hdrContentType])
	}
	if r.URL != nil {
		p.comp, p.hasComp = compParam(r.URL.RawQuery)
	}

	// Candidate date slots and paths; the first of each is the canonical one.
	dates := [2]string{dateValue}
	nDates := 1
	if scheme == SchemeSharedKey && xmsDate != "" && date != "" && date != xmsDate &&
		v.checkDate("Date", date, now) == nil {
		dates[1] = date
		nDates = 2
	}
	path := requestPath(r)
	paths := [3]pathCandidate{{rest: path}}
	nPaths := 1
	if tail, ok := secondaryTail(path, account); ok {
		// "/acct-secondary/x": Azurite's spelling "/acct/acct/x", and the Python SDK's
		// "/acct/x" (the secondary segment gone, see the doc comment).
		if tail == "" {
			paths[1] = pathCandidate{doubleAccount: true}
			paths[2] = pathCandidate{rest: "/"}
		} else {
			paths[1] = pathCandidate{doubleAccount: true, rest: tail}
			paths[2] = pathCandidate{rest: tail}
		}
		nPaths = 3
	}

	s := scratchPool.Get().(*scratch)
	defer putScratch(s)
	sigOK := false
	if len(sig) == sigLen {
		s.sig = append(s.sig[:0], sig...)
		n, err := strictB64.Decode(s.want[:], s.sig)
		sigOK = err == nil && n == sha256.Size
	}

	va := v.accounts[account]
	for di := 0; di < nDates; di++ {
		for pi := 0; pi < nPaths; pi++ {
			s.sts = p.append(s.sts[:0], dates[di], paths[pi])
			if va == nil || len(va.keys) == 0 {
				decoyKey.sum(&s.got, s.sts)
				continue
			}
			for _, k := range va.keys {
				k.sum(&s.got, s.sts)
				if sigOK && hmac.Equal(s.got[:], s.want[:sha256.Size]) {
					return keyAccess(va)
				}
			}
		}
	}
	sts := p.append(s.sts[:0], dates[0], paths[0])
	return authFailed(fmt.Sprintf("The MAC signature found in the HTTP request '%s' is not the same as any computed signature. Server used following string to sign: '%s'.", sig, sts))
}

// keyAccess is the answer to a request a key of va signed: nil, or 403
// KeyBasedAuthenticationNotPermitted when the account's shared key access is off. The
// signature is checked first, so that only a holder of the key learns that the account
// refuses it (anyone else gets AuthenticationFailed, as for an unknown account).
func keyAccess(va *verifierAccount) error {
	if va.account.SharedKeyOff {
		return azerr.New(azerr.KeyBasedAuthenticationNotPermitted)
	}
	return nil
}

func putScratch(s *scratch) {
	if cap(s.sts) > maxPooledSTS {
		return
	}
	scratchPool.Put(s)
}

// checkDate validates a request date header value against now.
func (v *Verifier) checkDate(name, value string, now time.Time) *azerr.Error {
	var t time.Time
	if last := v.lastDate.Load(); last != nil && last.value == value {
		t = last.t
	} else {
		var err error
		if t, err = http.ParseTime(value); err != nil {
			return authFailed(fmt.Sprintf("The %s header value '%s' is not a valid RFC 1123 date (for example '%s').", name, value, dateExample))
		}
		v.lastDate.Store(&parsedDate{value: value, t: t})
	}
	if d := now.Sub(t); d > MaxClockSkew {
		return authFailed(fmt.Sprintf("Request date header too old: '%s' (server time %s; allowed skew %v).", value, now.UTC().Format(http.TimeFormat), MaxClockSkew))
	} else if -d > MaxClockSkew {
		return authFailed(fmt.Sprintf("Request date header too far in the future: '%s' (server time %s; allowed skew %v).", value, now.UTC().Format(http.TimeFormat), MaxClockSkew))
	}
	return nil
}

func authFailed(detail string) *azerr.Error {
	return azerr.New(azerr.AuthenticationFailed).WithDetail(detail)
}

func first(vals []string) string {
	if len(vals) == 0 {
		return ""
	}
	return vals[0]
}

// stsParts holds everything of a string to sign except the date slot and the path.
type stsParts struct {
	scheme                          string
	method, contentMD5, contentType string // SharedKey only
	account                         string
	comp                            string
	hasComp                         bool
}

// pathCandidate is the part of the canonicalized resource after "/" + account: rest,
// preceded by another "/" + account when doubleAccount (a secondary path-style request
// whose "-secondary" suffix was removed).
type pathCandidate struct {
	doubleAccount bool
	rest          string
}

func (p *stsParts) append(dst []byte, dateValue string, path pathCandidate) []byte {
	if p.scheme == SchemeSharedKey {
		dst = append(dst, p.method...)
		dst = append(dst, '\n')
		dst = append(dst, p.contentMD5...)
		dst = append(dst, '\n')
		dst = append(dst, p.contentType...)
		dst = append(dst, '\n')
	}
	dst = append(dst, dateValue...)
	dst = append(dst, '\n', '/')
	dst = append(dst, p.account...)
	if path.doubleAccount {
		dst = append(dst, '/')
		dst = append(dst, p.account...)
	}
	dst = append(dst, path.rest...)
	if p.hasComp {
		dst = append(dst, "?comp="...)
		dst = append(dst, p.comp...)
	}
	return dst
}

// requestPath returns the raw path of r as the client sent it: the request target up to
// '?'. A target in absolute form (http://host/path, as sent to proxies) contributes only
// its path. Requests that were not received by a server (RequestURI empty, e.g. built
// with http.NewRequest) use r.URL.EscapedPath(), which is what Go clients put on the wire
// and sign. An empty path is "/" (the root is signed as "/acct/").
func requestPath(r *http.Request) string {
	uri := r.RequestURI
	if uri != "" && uri[0] != '/' {
		if i := strings.Index(uri, "://"); i > 0 {
			rest := uri[i+3:]
			j := strings.IndexAny(rest, "/?")
			if j < 0 || rest[j] == '?' {
				return "/"
			}
			uri = rest[j:]
		} else {
			uri = "" // "*" (OPTIONS) or junk: fall back to the parsed URL
		}
	}
	if uri == "" {
		if r.URL == nil {
			return "/"
		}
		uri = r.URL.EscapedPath()
		if uri == "" {
			return "/"
		}
		return uri
	}
	if i := strings.IndexByte(uri, '?'); i >= 0 {
		uri = uri[:i]
	}
	return uri
}

// secondaryTail reports whether path starts with "/<account>-secondary" as a whole first
// segment and returns what follows it.
func secondaryTail(path, account string) (string, bool) {
	if len(path) < 1+len(account)+len(secondarySuffix) || path[0] != '/' {
		return "", false
	}
	p := path[1:]
	if !strings.HasPrefix(p, account) || !strings.HasPrefix(p[len(account):], secondarySuffix) {
		return "", false
	}
	tail := p[len(account)+len(secondarySuffix):]
	if tail != "" && tail[0] != '/' {
		return "", false
	}
	return tail, true
}

// compParam returns the decoded value of the first "comp" query parameter, following
// url.ParseQuery (as the Go SDK does when signing): pairs are separated by '&', a pair
// containing ';' or failing to decode is skipped, the key must decode to exactly "comp".
// Other parameters ($filter, restype, timeout, SAS fields...) are never signed.
func compParam(rawQuery string) (string, bool) {
	for rawQuery != "" {
		var pair string
		pair, rawQuery, _ = strings.Cut(rawQuery, "&")
		if pair == "" || strings.IndexByte(pair, ';') >= 0 {
			continue
		}
		key, value, _ := strings.Cut(pair, "=")
		if key != "comp" {
			if !strings.ContainsAny(key, "%+") {
				continue
			}
			k, err := url.QueryUnescape(key)
			if err != nil || k != "comp" {
				continue
			}
		}
		if strings.ContainsAny(value, "%+") {
			v, err := url.QueryUnescape(value)
			if err != nil {
				continue
			}
			value = v
		}
		return value, true
	}
	return "", false
}

// CanonicalizedResource returns the canonicalized resource of r for account, as
// Authenticate computes it (without the secondary-endpoint alternative).
func CanonicalizedResource(r *http.Request, account string) string {
	p := stsParts{account: account}
	if r.URL != nil {
		p.comp, p.hasComp = compParam(r.URL.RawQuery)
	}
	return string(p.append(nil, "", pathCandidate{rest: requestPath(r)})[1:])
}

// StringToSign returns the string Authenticate signs first for r under scheme
// (SchemeSharedKey or SchemeSharedKeyLite) and account: with DateValue = x-ms-date, else
// Date. Intended for tests, debugging and clients (see SignRequest).
func StringToSign(r *http.Request, scheme, account string) string {
	p := stsParts{scheme: scheme, account: account}
	if scheme == SchemeSharedKey {
		p.method = r.Method
		p.contentMD5 = r.Header.Get(hdrContentMD5)
		p.contentType = r.Header.Get(hdrContentType)
	}
	if r.URL != nil {
		p.comp, p.hasComp = compParam(r.URL.RawQuery)
	}
	dateValue := r.Header.Get(hdrXMsDate)
	if dateValue == "" {
		dateValue = r.Header.Get(hdrDate)
	}
	return string(p.append(nil, dateValue, pathCandidate{rest: requestPath(r)}))
}

// Sign returns base64(HMAC-SHA256(key, stringToSign)), the signature of the shared-key
// schemes. key is the decoded account key.
func Sign(key []byte, stringToSign string) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(stringToSign))
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// SignRequest signs r like an SDK would: it sets x-ms-date to now (if no x-ms-date is
// set) and then Authorization to "<scheme> <account>:<signature>". r must be a client
// request whose URL is final (the signature covers its escaped path and comp parameter),
// or a server request, whose RequestURI is used.
func SignRequest(r *http.Request, scheme, account string, key []byte, now time.Time) {
	if r.Header == nil {
		r.Header = http.Header{}
	}
	if r.Header.Get(hdrXMsDate) == "" {
		r.Header.Set(hdrXMsDate, now.UTC().Format(http.TimeFormat))
	}
	sig := Sign(key, StringToSign(r, scheme, account))
	r.Header.Set(hdrAuthorization, scheme+" "+account+":"+sig)
}
