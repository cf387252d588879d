package svcprops

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

// Limits on service properties (Azure documentation for Set Table Service Properties).
const (
	MaxCorsRules          = 5
	MaxRetentionDays      = 365
	maxCorsOrigins        = 64
	maxCorsLiteralHeaders = 64
	maxCorsPrefixHeaders  = 2
	maxCorsItemLength     = 256
)

// AllowedCorsMethods are the verbs a CORS rule may allow.
var AllowedCorsMethods = []string{"DELETE", "GET", "HEAD", "MERGE", "POST", "OPTIONS", "PUT", "PATCH"}

// RetentionPolicy is how long analytics data is kept. Days is meaningful (1–365) only when
// Enabled; it is 0 otherwise.
type RetentionPolicy struct {
	Enabled bool `json:"enabled"`
	Days    int  `json:"days,omitempty"`
}

// Logging is the Storage Analytics logging configuration.
type Logging struct {
	Version         string          `json:"version"`
	Delete          bool            `json:"delete"`
	Read            bool            `json:"read"`
	Write           bool            `json:"write"`
	RetentionPolicy RetentionPolicy `json:"retentionPolicy"`
}

// Metrics is the hour or minute metrics configuration. IncludeAPIs is meaningful only when
// Enabled; it is false otherwise.
type Metrics struct {
	Version         string          `json:"version"`
	Enabled         bool            `json:"enabled"`
	IncludeAPIs     bool            `json:"includeAPIs,omitempty"`
	RetentionPolicy RetentionPolicy `json:"retentionPolicy"`
}

// CorsRule is one CORS rule. Lists are the comma-separated XML values split and trimmed;
// methods are upper-case. Origins may contain "*"; headers may be "prefix*" patterns.
type CorsRule struct {
	AllowedOrigins  []string `json:"allowedOrigins"`
	AllowedMethods  []string `json:"allowedMethods"`
	AllowedHeaders  []string `json:"allowedHeaders,omitempty"`
	ExposedHeaders  []string `json:"exposedHeaders,omitempty"`
	MaxAgeInSeconds int      `json:"maxAgeInSeconds"`
}

// Properties are an account's Table service properties.
type Properties struct {
	Logging       Logging    `json:"logging"`
	HourMetrics   Metrics    `json:"hourMetrics"`
	MinuteMetrics Metrics    `json:"minuteMetrics"`
	Cors          []CorsRule `json:"cors,omitempty"`
}

// PropertiesUpdate is a parsed Set Table Service Properties body. A nil section (and
// CorsSet false) was absent from the body and leaves the stored section unchanged. A present
// section replaces the stored one whole; elements missing inside it take their defaults
// (Version "1.0", false, retention disabled, MaxAgeInSeconds 0).
type PropertiesUpdate struct {
	Logging       *Logging
	HourMetrics   *Metrics
	MinuteMetrics *Metrics
	// CorsSet reports that <Cors> was present; Cors then replaces the rules (empty clears).
	CorsSet bool
	Cors    []CorsRule
}

// DefaultProperties are the properties of an account that never set any: version 1.0,
// logging and metrics disabled, retention disabled, no CORS rules.
func DefaultProperties() Properties {
	return Properties{
		Logging:       Logging{Version: "1.0"},
		HourMetrics:   Metrics{Version: "1.0"},
		MinuteMetrics: Metrics{Version: "1.0"},
	}
}

// Apply returns p with the sections present in u replaced.
func (p Properties) Apply(u PropertiesUpdate) Properties {
	if u.Logging != nil {
		p.Logging = *u.Logging
	}
	if u.HourMetrics != nil {
		p.HourMetrics = *u.HourMetrics
	}
	if u.MinuteMetrics != nil {
		p.MinuteMetrics = *u.MinuteMetrics
	}
	if u.CorsSet {
		p.Cors = append([]CorsRule(nil), u.Cors...)
		if len(p.Cors) == 0 {
			p.Cors = nil
		}
	}
	return p
}

type xmlRetention struct {
	Enabled *string `xml:"Enabled"`
	Days    *string `xml:"Days"`
}

type xmlLogging struct {
	Version         *string       `xml:"Version"`
	Delete          *string       `xml:"Delete"`
	Read            *string       `xml:"Read"`
	Write           *string       `xml:"Write"`
	RetentionPolicy *xmlRetention `xml:"RetentionPolicy"`
}

type xmlMetrics struct {
	Version         *string       `xml:"Version"`
	Enabled         *string       `xml:"Enabled"`
	IncludeAPIs     *string       `xml:"IncludeAPIs"`
	RetentionPolicy *xmlRetention `xml:"RetentionPolicy"`
}

type xmlCorsRule struct {
	AllowedOrigins  *string `xml:"AllowedOrigins"`
	AllowedMethods  *string `xml:"AllowedMethods"`
	AllowedHeaders  *string `xml:"AllowedHeaders"`
	ExposedHeaders  *string `xml:"ExposedHeaders"`
	MaxAgeInSeconds *string `xml:"MaxAgeInSeconds"`
}

type xmlCors struct {
	Rules []xmlCorsRule `xml:"CorsRule"`
}

type xmlProperties struct {
	Logging       *xmlLogging `xml:"Logging"`
	HourMetrics   *xmlMetrics `xml:"HourMetrics"`
	MinuteMetrics *xmlMetrics `xml:"MinuteMetrics"`
	Cors          *xmlCors    `xml:"Cors"`
}

// ParseProperties parses a Set Table Service Properties body. The root element is
// StorageServiceProperties (what every SDK sends); TableServiceProperties, the name of the
// Go SDK's generated model, is tolerated too. Child elements may come in any order (the Go
// SDK sends them alphabetically). Errors are 400 InvalidXmlDocument with a reason, as the
// service answers them: for malformed XML, an empty body, a wrong root, more than five CORS
// rules or a CORS rule without AllowedOrigins/AllowedMethods, and for a bad value alike
// (version, bool, retention days outside 1–365 when enabled, IncludeAPIs true while
// disabled, an unknown method, a negative MaxAgeInSeconds, empty or over-long origin/header
// lists).
func ParseProperties(body []byte) (PropertiesUpdate, error) {
	var u PropertiesUpdate
	if isBlank(body) {
		return u, errDoc("The request body is empty.")
	}
	var doc xmlProperties
	if err := decodeDoc(body, &doc, "StorageServiceProperties", "TableServiceProperties"); err != nil {
		return u, err
	}
	var err error
	if doc.Logging != nil {
		if u.Logging, err = parseLogging(doc.Logging); err != nil {
			return PropertiesUpdate{}, err
		}
	}
	if doc.HourMetrics != nil {
		if u.HourMetrics, err = parseMetrics("HourMetrics", doc.HourMetrics); err != nil {
			return PropertiesUpdate{}, err
		}
	}
	if doc.MinuteMetrics != nil {
		if u.MinuteMetrics, err = parseMetrics("MinuteMetrics", doc.MinuteMetrics); err != nil {
			return PropertiesUpdate{}, err
		}
	}
	if doc.Cors != nil {
		u.CorsSet = true
		if len(doc.Cors.Rules) > MaxCorsRules {
			return PropertiesUpdate{}, errDoc("At most 5 CorsRule elements are allowed.")
		}
		for _, xr := range doc.Cors.Rules {
			r, err := parseCorsRule(xr)
			if err != nil {
				return PropertiesUpdate{}, err
			}
			u.Cors = append(u.Cors, r)
		}
	}
	return u, nil
}

func parseVersion(node string, s *string, allowed ...string) (string, error) {
	if s == nil {
		return "1.0", nil
	}
	v := strings.TrimSpace(*s)
	for _, a := range allowed {
		if v == a {
			return v, nil
		}
	}
	return "", errNode(node, v)
}

func optBool(node string, s *string) (bool, error) {
	if s == nil {
		return false, nil
	}
	return parseBool(node, s)
}

func parseRetention(x *xmlRetention) (RetentionPolicy, error) {
	var rp RetentionPolicy
	if x == nil {
		return rp, nil
	}
	var err error
	if rp.Enabled, err = optBool("Enabled", x.Enabled); err != nil {
		return rp, err
	}
	if !rp.Enabled {
		// Days is ignored (and not kept) for a disabled policy, but must still be a number.
		if x.Days != nil && strings.TrimSpace(*x.Days) != "" {
			if _, err := parseInt("Days", x.Days, -1<<31, 1<<31-1); err != nil {
				return rp, err
			}
		}
		return rp, nil
	}
	if x.Days == nil {
		return rp, errDoc("Element Days is required when RetentionPolicy is enabled.")
	}
	if rp.Days, err = parseInt("Days", x.Days, 1, MaxRetentionDays); err != nil {
		return rp, err
	}
	return rp, nil
}

func parseLogging(x *xmlLogging) (*Logging, error) {
	var l Logging
	var err error
	if l.Version, err = parseVersion("Version", x.Version, "1.0", "2.0"); err != nil {
		return nil, err
	}
	if l.Delete, err = optBool("Delete", x.Delete); err != nil {
		return nil, err
	}
	if l.Read, err = optBool("Read", x.Read); err != nil {
		return nil, err
	}
	if l.Write, err = optBool("Write", x.Write); err != nil {
		return nil, err
	}
	if l.RetentionPolicy, err = parseRetention(x.RetentionPolicy); err != nil {
		return nil, err
	}
	return &l, nil
}

func parseMetrics(section string, x *xmlMetrics) (*Metrics, error) {
	var m Metrics
	var err error
	if m.Version, err = parseVersion("Version", x.Version, "1.0"); err != nil {
		return nil, err
	}
	if m.Enabled, err = optBool("Enabled", x.Enabled); err != nil {
		return nil, err
	}
	inc, err := optBool("IncludeAPIs", x.IncludeAPIs)
	if err != nil {
		return nil, err
	}
	if inc && !m.Enabled {
		// IncludeAPIs applies only to enabled metrics; false is tolerated (SDKs echo it).
		return nil, errDoc("Element IncludeAPIs may be true only when " + section + " is enabled.")
	}
	m.IncludeAPIs = inc
	if m.RetentionPolicy, err = parseRetention(x.RetentionPolicy); err != nil {
		return nil, err
	}
	return &m, nil
}

// splitList splits a comma-separated list, trimming items and dropping empty ones.
func splitList(s string) []string {
	var out []string
	for _, it := range strings.Split(s, ",") {
		if it = strings.TrimSpace(it); it != "" {
			out = append(out, it)
		}
	}
	return out
}

func parseCorsRule(x xmlCorsRule) (CorsRule, error) {
	var r CorsRule
	if x.AllowedOrigins == nil || x.AllowedMethods == nil {
		return r, errDoc("Elements AllowedOrigins and AllowedMethods are required in a CorsRule.")
	}
	r.AllowedOrigins = splitList(*x.AllowedOrigins)
	if len(r.AllowedOrigins) == 0 || len(r.AllowedOrigins) > maxCorsOrigins {
		return r, errNode("AllowedOrigins", *x.AllowedOrigins)
	}
	for _, o := range r.AllowedOrigins {
		if len(o) > maxCorsItemLength {
			return r, errNode("AllowedOrigins", o)
		}
	}
	for _, m := range splitList(*x.AllowedMethods) {
		up := strings.ToUpper(m)
		known := false
		for _, a := range AllowedCorsMethods {
			known = known || a == up
		}
		if !known {
			return r, errNode("AllowedMethods", m)
		}
		dup := false
		for _, prev := range r.AllowedMethods {
			dup = dup || prev == up
		}
		if !dup {
			r.AllowedMethods = append(r.AllowedMethods, up)
		}
	}
	if len(r.AllowedMethods) == 0 {
		return r, errNode("AllowedMethods", *x.AllowedMethods)
	}
	var err error
	if r.AllowedHeaders, err = parseHeaderList("AllowedHeaders", x.AllowedHeaders); err != nil {
		return r, err
	}
	if r.ExposedHeaders, err = parseHeaderList("ExposedHeaders", x.ExposedHeaders); err != nil {
		return r, err
	}
	if x.MaxAgeInSeconds != nil {
		if r.MaxAgeInSeconds, err = parseInt("MaxAgeInSeconds", x.MaxAgeInSeconds, 0, 1<<31-1); err != nil {
			return r, err
		}
	}
	return r, nil
}

func parseHeaderList(node string, s *string) ([]string, error) {
	if s == nil {
		return nil, nil
	}
	list := splitList(*s)
	literal, prefix := 0, 0
	for _, h := range list {
		if len(h) > maxCorsItemLength {
			return nil, errNode(node, h)
		}
		if strings.HasSuffix(h, "*") {
			prefix++
		} else {
			literal++
		}
	}
	if literal > maxCorsLiteralHeaders || prefix > maxCorsPrefixHeaders {
		return nil, errNode(node, *s)
	}
	return list, nil
}

// AppendProperties appends the Get Table Service Properties response body for p. Element
// order follows the service; <Cors> is always present (possibly empty); IncludeAPIs appears
// only for enabled metrics and Days only for enabled retention policies.
func AppendProperties(dst []byte, p Properties) []byte {
	dst = append(dst, xmlHeader...)
	dst = append(dst, "<StorageServiceProperties><Logging>"...)
	dst = appendElem(dst, "Version", p.Logging.Version)
	dst = appendElem(dst, "Delete", strconv.FormatBool(p.Logging.Delete))
	dst = appendElem(dst, "Read", strconv.FormatBool(p.Logging.Read))
	dst = appendElem(dst, "Write", strconv.FormatBool(p.Logging.Write))
	dst = appendRetention(dst, p.Logging.RetentionPolicy)
	dst = append(dst, "</Logging>"...)
	dst = appendMetrics(dst, "HourMetrics", p.HourMetrics)
	dst = appendMetrics(dst, "MinuteMetrics", p.MinuteMetrics)
	if len(p.Cors) == 0 {
		dst = append(dst, "<Cors />"...)
	} else {
		dst = append(dst, "<Cors>"...)
		for _, r := range p.Cors {
			dst = append(dst, "<CorsRule>"...)
			dst = appendElem(dst, "AllowedOrigins", strings.Join(r.AllowedOrigins, ","))
			dst = appendElem(dst, "AllowedMethods", strings.Join(r.AllowedMethods, ","))
			dst = appendElem(dst, "MaxAgeInSeconds", strconv.Itoa(r.MaxAgeInSeconds))
			dst = appendElem(dst, "ExposedHeaders", strings.Join(r.ExposedHeaders, ","))
			dst = appendElem(dst, "AllowedHeaders", strings.Join(r.AllowedHeaders, ","))
			dst = append(dst, "</CorsRule>"...)
		}
		dst = append(dst, "</Cors>"...)
	}
	return append(dst, "</StorageServiceProperties>"...)
}

func appendMetrics(dst []byte, name string, m Metrics) []byte {
	dst = append(dst, '<')
	dst = append(dst, name...)
	dst = append(dst, '>')
	dst = appendElem(dst, "Version", m.Version)
	dst = appendElem(dst, "Enabled", strconv.FormatBool(m.Enabled))
	if m.Enabled {
		dst = appendElem(dst, "IncludeAPIs", strconv.FormatBool(m.IncludeAPIs))
	}
	dst = appendRetention(dst, m.RetentionPolicy)
	dst = append(dst, "</"...)
	dst = append(dst, name...)
	return append(dst, '>')
}

func appendRetention(dst []byte, rp RetentionPolicy) []byte {
	dst = append(dst, "<RetentionPolicy>"...)
	dst = appendElem(dst, "Enabled", strconv.FormatBool(rp.Enabled))
	if rp.Enabled {
		dst = appendElem(dst, "Days", strconv.Itoa(rp.Days))
	}
	return append(dst, "</RetentionPolicy>"...)
}

type propsEnvelope struct {
	V int        `json:"v"`
	P Properties `json:"p"`
}

// MarshalProperties encodes p for persistence (versioned JSON).
func MarshalProperties(p Properties) []byte {
	b, err := json.Marshal(propsEnvelope{V: 1, P: p})
	if err != nil {
		panic("svcprops: marshal properties: " + err.Error()) // cannot happen: plain values
	}
	return b
}

// UnmarshalProperties decodes what MarshalProperties produced; empty input (never set)
// yields DefaultProperties. A corrupt record is an InternalError.
func UnmarshalProperties(b []byte) (Properties, error) {
	if len(b) == 0 {
		return DefaultProperties(), nil
	}
	var env propsEnvelope
	if err := json.Unmarshal(b, &env); err != nil || env.V != 1 {
		return Properties{}, azerr.New(azerr.InternalError).WithDetail("corrupt service properties record")
	}
	if len(env.P.Cors) == 0 {
		env.P.Cors = nil
	}
	return env.P, nil
}
