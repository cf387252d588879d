package auth

import (
	"strings"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

// Authorization schemes as returned by ParseAuthorization (normalised spelling).
const (
	SchemeSharedKey     = "SharedKey"
	SchemeSharedKeyLite = "SharedKeyLite"
	// SchemeBearer is recognised only so that the server can say clearly that OAuth is not
	// supported instead of calling the header malformed.
	SchemeBearer = "Bearer"
)

// ParseAuthorization splits an Authorization header value.
//
// "SharedKey <account>:<signature>" and "SharedKeyLite <account>:<signature>" return the
// scheme, account and base64 signature (not decoded: a signature that is not base64 is
// simply a wrong signature, reported later as 403 like the service does). "Bearer <token>"
// returns SchemeBearer, an empty account and the token as signature. Scheme names match
// case-insensitively (RFC 9110 §11.1) and any run of spaces/tabs may follow them; the
// returned scheme is always one of the Scheme constants.
//
// Anything else (unknown scheme, missing account or signature, whitespace inside the
// credentials) is a *azerr.Error InvalidAuthenticationInfo. Its detail never repeats the
// credentials, since a Bearer token is a secret.
func ParseAuthorization(header string) (scheme, account, signature string, err error) {
	h := trimBlank(header)
	sp := indexBlank(h)
	if sp < 0 {
		if h == "" {
			return "", "", "", invalidAuthInfo("The Authorization header is empty.")
		}
		return "", "", "", invalidAuthInfo("The Authorization header must be '<scheme> <credentials>'.")
	}
	name, cred := h[:sp], trimBlank(h[sp:])
	switch {
	case strings.EqualFold(name, SchemeSharedKey):
		scheme = SchemeSharedKey
	case strings.EqualFold(name, SchemeSharedKeyLite):
		scheme = SchemeSharedKeyLite
	case strings.EqualFold(name, SchemeBearer):
		if !printable(cred) {
			return "", "", "", invalidAuthInfo("The Bearer token must not contain whitespace or control characters.")
		}
		return SchemeBearer, "", cred, nil
	default:
		return "", "", "", invalidAuthInfo("Unsupported authorization scheme; use SharedKey or SharedKeyLite.")
	}
	account, signature, ok := strings.Cut(cred, ":")
	if !ok || account == "" || signature == "" {
		return "", "", "", invalidAuthInfo("The credentials of a " + scheme + " Authorization header must be '<account>:<signature>'.")
	}
	if !printable(account) || !printable(signature) {
		return "", "", "", invalidAuthInfo("The credentials of a " + scheme + " Authorization header contain whitespace or control characters.")
	}
	return scheme, account, signature, nil
}

// Scheme is the normalised scheme of an Authorization header value that
// ParseAuthorization accepts, without checking the credentials again: for a header that
// has already been accepted. It is "" for a header of no known scheme.
func Scheme(header string) string {
	h := trimBlank(header)
	if sp := indexBlank(h); sp >= 0 {
		h = h[:sp]
	}
	for _, s := range [...]string{SchemeSharedKey, SchemeSharedKeyLite, SchemeBearer} {
		if strings.EqualFold(h, s) {
			return s
		}
	}
	return ""
}

// trimBlank and indexBlank are strings.Trim and strings.IndexAny for spaces and tabs,
// without building a set of the two at every call (one per request each).
func trimBlank(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

func indexBlank(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' || s[i] == '\t' {
			return i
		}
	}
	return -1
}

// printable reports whether s has no ASCII whitespace or control characters (bytes ≥ 0x80
// are allowed; they can only fail the account or signature comparison later).
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return false
		}
	}
	return true
}

func invalidAuthInfo(detail string) *azerr.Error {
	return azerr.New(azerr.InvalidAuthenticationInfo).WithDetail(detail)
}
