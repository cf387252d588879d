package svcprops

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

// CORS response header names.
const (
	HeaderAllowOrigin      = "Access-Control-Allow-Origin"
	HeaderAllowMethods     = "Access-Control-Allow-Methods"
	HeaderAllowHeaders     = "Access-Control-Allow-Headers"
	HeaderMaxAge           = "Access-Control-Max-Age"
	HeaderAllowCredentials = "Access-Control-Allow-Credentials"
	HeaderExposeHeaders    = "Access-Control-Expose-Headers"
	HeaderVary             = "Vary"
)

// PreflightResult is a successful preflight's response headers.
type PreflightResult struct {
	AllowOrigin      string // the request's Origin
	AllowMethods     string // the requested method
	AllowHeaders     string // the requested headers, comma-joined; empty when none requested
	MaxAge           int    // the rule's MaxAgeInSeconds
	AllowCredentials bool   // always true
}

// Header returns the result as response headers (Allow-Headers only when non-empty).
func (r PreflightResult) Header() http.Header {
	h := http.Header{}
	r.SetHeaders(h)
	return h
}

// SetHeaders sets the result's headers on h.
func (r PreflightResult) SetHeaders(h http.Header) {
	h.Set(HeaderAllowOrigin, r.AllowOrigin)
	h.Set(HeaderAllowMethods, r.AllowMethods)
	if r.AllowHeaders != "" {
		h.Set(HeaderAllowHeaders, r.AllowHeaders)
	}
	h.Set(HeaderMaxAge, strconv.Itoa(r.MaxAge))
	if r.AllowCredentials {
		h.Set(HeaderAllowCredentials, "true")
	}
}

// SplitHeaderList splits Access-Control-Request-Headers values (each possibly a comma
// list) into trimmed, non-empty header names.
func SplitHeaderList(values ...string) []string {
	var out []string
	for _, v := range values {
		out = append(out, splitList(v)...)
	}
	return out
}

// Preflight evaluates an OPTIONS preflight against rules (the account's stored CORS rules).
// origin and method are the Origin and Access-Control-Request-Method header values;
// requestHeaders are the Access-Control-Request-Headers values (comma lists are split).
// Missing origin or method → 400 InvalidHeaderValue "A required CORS header is not
// present."; no rule matching origin, method and every requested header (or no rules) →
// 403 CorsPreflightFailure. The first matching rule wins.
func Preflight(rules []CorsRule, origin, method string, requestHeaders []string) (PreflightResult, error) {
	origin = strings.TrimSpace(origin)
	method = strings.TrimSpace(method)
	if origin == "" || method == "" {
		return PreflightResult{}, azerr.Newf(azerr.InvalidHeaderValue, "A required CORS header is not present.")
	}
	hdrs := SplitHeaderList(requestHeaders...)
	for _, r := range rules {
		if !r.matchOrigin(origin) || !r.matchMethod(method) || !r.matchHeaders(hdrs) {
			continue
		}
		return PreflightResult{
			AllowOrigin:      origin,
			AllowMethods:     method,
			AllowHeaders:     strings.Join(hdrs, ","),
			MaxAge:           r.MaxAgeInSeconds,
			AllowCredentials: true,
		}, nil
	}
	return PreflightResult{}, azerr.New(azerr.CorsPreflightFailure)
}

// ActualRequestHeaders returns the CORS headers for a non-preflight request carrying origin
// and sent with method (the HTTP method on the wire, r.Method, which is what the browser
// checked: POST for a tunnelled MERGE), or nil when there is nothing to add (no Origin or no
// rules). For the first rule matching origin and method: Access-Control-Allow-Origin ("*"
// when the rule's AllowedOrigins is exactly "*", else the origin),
// Access-Control-Expose-Headers (when the rule lists any), and for non-wildcard rules
// Vary: Origin and Access-Control-Allow-Credentials: true. When rules exist but none
// matches: Vary: Origin only.
func ActualRequestHeaders(rules []CorsRule, origin, method string) http.Header {
	origin = strings.TrimSpace(origin)
	if origin == "" || len(rules) == 0 {
		return nil
	}
	h := http.Header{}
	for _, r := range rules {
		if !r.matchOrigin(origin) || !r.matchMethod(method) {
			continue
		}
		wildcard := len(r.AllowedOrigins) == 1 && r.AllowedOrigins[0] == "*"
		if wildcard {
			h.Set(HeaderAllowOrigin, "*")
		} else {
			h.Set(HeaderAllowOrigin, origin)
		}
		if len(r.ExposedHeaders) > 0 {
			h.Set(HeaderExposeHeaders, strings.Join(r.ExposedHeaders, ","))
		}
		if !wildcard {
			h.Set(HeaderVary, "Origin")
			h.Set(HeaderAllowCredentials, "true")
		}
		return h
	}
	h.Set(HeaderVary, "Origin")
	return h
}

func (r CorsRule) matchOrigin(origin string) bool {
	for _, o := range r.AllowedOrigins {
		if o == "*" || strings.EqualFold(o, origin) {
			return true
		}
	}
	return false
}

func (r CorsRule) matchMethod(method string) bool {
	method = strings.TrimSpace(method)
	for _, m := range r.AllowedMethods {
		if strings.EqualFold(m, method) {
			return true
		}
	}
	return false
}

// matchHeaders reports whether every requested header is allowed: equal to an allowed
// header (case-insensitive) or starting with an allowed "prefix*" ("*" allows all).
func (r CorsRule) matchHeaders(requested []string) bool {
	for _, h := range requested {
		ok := false
		for _, a := range r.AllowedHeaders {
			if p, isPrefix := strings.CutSuffix(a, "*"); isPrefix {
				if len(h) >= len(p) && strings.EqualFold(h[:len(p)], p) {
					ok = true
					break
				}
			} else if strings.EqualFold(a, h) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}
