package server

import (
	"net/http"
	"net/textproto"
	"strings"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/edmjson"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// An entity's stored expiry on the wire (docs/compatibility.md "An entity's exact expiry"), a Cerulean extension
// that only requests asking for it see:
//   - Reading: Query Entities, Get Entity and a $batch retrieve write the
//     "cerulean.expiry" instance annotation (edmjson.ExpiryAnnotation) on every entity
//     that expires when the request's Prefer header asks for it with OData's
//     odata.include-annotations preference, and then answer Preference-Applied.
//   - Writing: x-cerulean-expiry: <RFC 3339 instant in UTC> | never, on Insert, Update,
//     Merge and both upserts (alone or as a $batch changeset operation), gives the entity
//     that expiry instead of the computed one (storage.Mutation.Expiry): what a copy
//     needs to reproduce an entity exactly. Elastic tables only.

// expiryHeaderName is the request header of an explicit expiry; headerExpiry its map key.
const expiryHeaderName = "x-cerulean-expiry"

var headerExpiry = textproto.CanonicalMIMEHeaderKey(expiryHeaderName)

// expiryNever is the header's value for "no expiry".
const expiryNever = "never"

// parseExpiry reads an x-cerulean-expiry header's values (nil: absent) as a
// storage.Mutation.Expiry: storage.ExpiryComputed when absent, storage.ExpiryNever for
// "never", else the instant in version ticks. An instant is RFC 3339 in UTC ("Z"), with up
// to seven fraction digits (the Timestamp's resolution), in the DateTime range; one at or
// before the Unix epoch is as past as any other and is read as 1 tick (the values at and
// below 0 are the field's other meanings). Anything else, or several values, is 400
// InvalidHeaderValue naming the header.
func parseExpiry(vs []string) (int64, error) {
	switch {
	case len(vs) == 0:
		return storage.ExpiryComputed, nil
	case len(vs) > 1:
		return 0, badExpiry(strings.Join(vs, ", "), "give it once")
	}
	v := strings.TrimSpace(vs[0])
	if v == expiryNever {
		return storage.ExpiryNever, nil
	}
	if len(v) < len("2006-01-02T15:04:05Z") || v[len(v)-1] != 'Z' || v[10] != 'T' || v[16] != ':' {
		return 0, badExpiry(vs[0], "")
	}
	t, err := entity.ParseDateTime(v)
	if err != nil {
		return 0, badExpiry(vs[0], "")
	}
	if t < entity.MinDateTime || t > entity.MaxDateTime {
		return 0, badExpiry(vs[0], "the instant is outside 1601-01-01 to 9999-12-31")
	}
	return max(t, 1), nil
}

// badExpiry is parseExpiry's refusal of value, with why when there is more to say.
func badExpiry(value, why string) error {
	detail := "x-cerulean-expiry takes an instant in UTC as RFC 3339 with at most 7 fraction digits (2026-12-05T10:00:00.1234567Z), or never"
	if why != "" {
		detail += ": " + why
	}
	return azerr.InvalidHeader(expiryHeaderName, value).WithDetail(detail + ".")
}

// writeExpiry is the explicit expiry of a request (or $batch operation) of the given
// method whose x-cerulean-expiry values are vs: parseExpiry, and 400 UnsupportedHeader on
// a delete, which leaves no entity to give one.
func writeExpiry(method string, vs []string) (int64, error) {
	if vs == nil {
		return storage.ExpiryComputed, nil
	}
	if method == http.MethodDelete {
		return 0, azerr.New(azerr.UnsupportedHeader).WithDetail("x-cerulean-expiry: a delete leaves no entity to give an expiry.")
	}
	return parseExpiry(vs)
}

// expiryPreference reads Prefer values and reports whether they ask for the
// cerulean.expiry annotation, and the odata.include-annotations preference that does (to
// answer in Preference-Applied). Preferences are comma-separated (a quoted value may hold
// commas); the preference's value is a comma-separated list of patterns — "*", a
// namespace's "cerulean.*", the term "cerulean.expiry", each of them excluded by a
// leading "-" — and, as OData says, the most specific pattern that matches decides, an
// exclusion winning a tie. The name may be "odata.include-annotations" or, as OData 4.01
// allows, "include-annotations", in any case.
func expiryPreference(prefer []string) (string, bool) {
	for _, v := range prefer {
		for v != "" {
			var p string
			p, v = cutPreference(v)
			name, val, ok := strings.Cut(p, "=")
			if !ok {
				continue
			}
			name = strings.TrimSpace(name)
			if !strings.EqualFold(name, "odata.include-annotations") && !strings.EqualFold(name, "include-annotations") {
				continue
			}
			if includesExpiry(strings.Trim(strings.TrimSpace(val), `"`)) {
				return strings.TrimSpace(p), true
			}
			return "", false // the one include-annotations preference decides
		}
	}
	return "", false
}

// cutPreference splits the first preference off a Prefer value: up to the first comma
// outside double quotes.
func cutPreference(v string) (first, rest string) {
	quoted := false
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				return v[:i], v[i+1:]
			}
		}
	}
	return v, ""
}

// includesExpiry applies an include-annotations pattern list to the cerulean.expiry term
// (see expiryPreference).
func includesExpiry(list string) bool {
	in, out := 0, 0 // the most specific including and excluding patterns' specificity
	for _, pat := range strings.Split(list, ",") {
		pat = strings.TrimSpace(pat)
		exclude := strings.HasPrefix(pat, "-")
		pat = strings.TrimPrefix(pat, "-")
		spec := 0
		switch {
		case pat == "*":
			spec = 1
		case strings.EqualFold(pat, "cerulean.*"):
			spec = 2
		case strings.EqualFold(pat, edmjson.ExpiryAnnotation):
			spec = 3
		}
		if exclude {
			out = max(out, spec)
		} else {
			in = max(in, spec)
		}
	}
	return in > out
}

// wantsExpiry reports whether a read asks for entities' expiries (expiryPreference over
// its Prefer header); if so it answers Preference-Applied with the preference, which CORS
// exposes. A request without Prefer (what the SDKs send) costs one map lookup.
func wantsExpiry(h http.Header, out http.Header) bool {
	prefer := h["Prefer"]
	if prefer == nil {
		return false
	}
	p, ok := expiryPreference(prefer)
	if ok {
		out["Preference-Applied"] = []string{p}
		exposeHeaders(out, "Preference-Applied")
	}
	return ok
}
