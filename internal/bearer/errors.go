package bearer

import (
	"net/url"
	"strings"
)

// Kind names the check a token failed.
type Kind int

const (
	// KindMalformed: not a compact JWS, claims not a JSON object, no subject.
	KindMalformed Kind = iota + 1
	// KindAlgorithm: alg outside the allow-list (none, HS256, …) or not fitting the
	// type of the key its kid names.
	KindAlgorithm
	// KindUnknownKey: the issuer's key set, fetched again, has no key with the kid.
	KindUnknownKey
	// KindSignature: the signature does not verify (a tampered header or payload).
	KindSignature
	// KindExpired: exp missing, or past by more than the clock skew.
	KindExpired
	// KindNotYetValid: nbf or iat later than now plus the clock skew.
	KindNotYetValid
	// KindIssuer: iss is not a configured issuer.
	KindIssuer
	// KindAudience: aud holds no accepted audience.
	KindAudience
	// KindUnavailable: the issuer's discovery document or keys could not be fetched.
	// Azure has no such case; the token may well be valid, so a server may answer
	// 503 rather than 401.
	KindUnavailable
)

var kindNames = [...]string{
	KindMalformed:   "malformed token",
	KindAlgorithm:   "algorithm refused",
	KindUnknownKey:  "unknown signing key",
	KindSignature:   "bad signature",
	KindExpired:     "token expired",
	KindNotYetValid: "token not yet valid",
	KindIssuer:      "issuer refused",
	KindAudience:    "audience refused",
	KindUnavailable: "issuer unavailable",
}

func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Error is every error Verify returns. It names the failed check and, when the token
// named a configured issuer, that issuer; never the token or any of its claims.
type Error struct {
	Kind Kind
	// Issuer is the configured issuer the token named; empty when it named none.
	Issuer string
	err    error
}

func newError(k Kind, issuer string, err error) *Error {
	return &Error{Kind: k, Issuer: issuer, err: err}
}

func (e *Error) Error() string {
	s := "bearer: " + e.Kind.String()
	if e.err != nil {
		s += ": " + e.err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.err }

// Temporary reports whether the token could not be checked at all (KindUnavailable: the
// issuer's keys could not be fetched), rather than refused: a server answers 503 and
// the client retries, where a 401 would make it fetch a new token for nothing.
func (e *Error) Temporary() bool { return e.Kind == KindUnavailable }

// Azure Storage's answer to a missing or refused bearer token is 401 with error code
// InvalidAuthenticationInfo, this message, an AuthenticationErrorDetail (Detail) and a
// WWW-Authenticate bearer challenge (Challenge). Seen in a real response quoted in
// github.com/Azure/AzureStor/issues/119 (an audience mismatch: 401, InvalidAuthenticationInfo,
// this message, detail "Audience validation failed. Audience did not match.", and the
// challenge "Bearer authorization_uri=https://login.microsoftonline.com/<tenant>/oauth2/authorize
// resource_id=https://storage.azure.com").
const (
	ErrorCode = "InvalidAuthenticationInfo"
	Message   = "Server failed to authenticate the request. Please refer to the information in the www-authenticate header."
)

// Detail is the AuthenticationErrorDetail Azure Storage gives for e's kind. The audience
// text is Azure Storage's own (see ErrorCode); the others follow the wording of
// Microsoft.IdentityModel (IDX10223 "Lifetime validation failed. The token is expired.",
// IDX10222 "… The token is not yet valid.", IDX10205 "Issuer validation failed.", IDX10503
// "Signature validation failed.", IDX10511 "… Unable to match key: kid"), the library behind
// Entra-protected services, but were not seen in an Azure Storage response.
func (e *Error) Detail() string {
	switch e.Kind {
	case KindAudience:
		return "Audience validation failed. Audience did not match."
	case KindExpired:
		return "Lifetime validation failed. The token is expired."
	case KindNotYetValid:
		return "Lifetime validation failed. The token is not yet valid."
	case KindIssuer:
		return "Issuer validation failed. Issuer did not match."
	case KindSignature, KindAlgorithm:
		return "Signature validation failed. Signature is invalid."
	case KindUnknownKey:
		return "Signature validation failed. Unable to match key."
	case KindUnavailable:
		return "Signature validation failed. The signing keys could not be retrieved."
	}
	return "The token is malformed."
}

// Challenge is the WWW-Authenticate value of a 401 for a request without a valid bearer
// token, in Azure Storage's form:
//
//	Bearer authorization_uri=https://login.microsoftonline.com/<tenant>/oauth2/authorize resource_id=https://storage.azure.com
//
// Verified against: a real response quoted in github.com/Azure/AzureStor/issues/119; the
// Storage team's description of the bearer challenge in
// github.com/Azure/azure-sdk-for-js/issues/9528 ("For invalid anonymous access, Azure Storage
// will return 401 Unauthorized with additional header www-authenticate", same form, a tenant
// GUID); and github.com/Azure/azure-sdk-for-js/pull/28967, which fixed the SDK to read
// resource_id (the documentation's sample wrongly says resource_uri). The SDKs' storage
// challenge policies take the tenant from the first path segment of authorization_uri and
// request a token for resource_id + "/.default".
//
// For an Entra ID issuer (https://sts.windows.net/<tenant>/ or
// https://login.microsoftonline.com/<tenant>/v2.0) the tenant is the issuer's; any other
// issuer has no tenant in that sense, so authorization_uri is the issuer URL itself, which
// such clients do not read. An empty issuer gives the "common" tenant, Entra's
// tenant-independent endpoint.
func Challenge(issuer string) string {
	uri := issuer
	if tenant, ok := EntraTenant(issuer); ok {
		uri = "https://login.microsoftonline.com/" + tenant + "/oauth2/authorize"
	} else if issuer == "" {
		uri = "https://login.microsoftonline.com/common/oauth2/authorize"
	}
	return "Bearer authorization_uri=" + uri + " resource_id=" + StorageResource
}

// EntraTenant returns the tenant of an Entra ID issuer URL: the v1 form
// https://sts.windows.net/<tenant>/ or the v2 form
// https://login.microsoftonline.com/<tenant>/v2.0.
func EntraTenant(issuer string) (string, bool) {
	u, err := url.Parse(issuer)
	if err != nil || u.Scheme != "https" {
		return "", false
	}
	segs := strings.Split(strings.Trim(u.Path, "/"), "/")
	switch {
	case u.Host == "sts.windows.net" && len(segs) == 1 && segs[0] != "":
		return segs[0], true
	case u.Host == "login.microsoftonline.com" && len(segs) == 2 && segs[0] != "" && segs[1] == "v2.0":
		return segs[0], true
	}
	return "", false
}

// Challenge is the WWW-Authenticate value for a request refused by v: the challenge of
// the first configured issuer (see the package function Challenge).
func (v *Verifier) Challenge() string {
	return Challenge(v.order[0])
}
