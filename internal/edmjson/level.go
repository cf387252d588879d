package edmjson

import (
	"strconv"
	"strings"
)

// Level is an OData JSON metadata level (docs/protocol.md §2.3, §4.1). The zero value is
// MinimalMetadata, the level every SDK asks for and the one a bare "application/json"
// means, so a forgotten field still produces what clients expect.
type Level uint8

const (
	// MinimalMetadata: odata.metadata on the top-level object, odata.etag per entity, and
	// type annotations only for values whose type JSON cannot express.
	MinimalMetadata Level = iota
	// NoMetadata: no odata.* keys and no annotations at all.
	NoMetadata
	// FullMetadata: minimal plus odata.type, odata.id, odata.editLink per entity or table
	// and the Timestamp annotation.
	FullMetadata
)

// String returns the odata= parameter value for l ("minimalmetadata", ...).
func (l Level) String() string {
	switch l {
	case NoMetadata:
		return "nometadata"
	case FullMetadata:
		return "fullmetadata"
	default:
		return "minimalmetadata"
	}
}

// ContentType is the Content-Type of a JSON response at level l, exactly as the service
// sends it: application/json;odata=<level>;streaming=true;charset=utf-8.
func ContentType(l Level) string {
	switch l {
	case NoMetadata:
		return "application/json;odata=nometadata;streaming=true;charset=utf-8"
	case FullMetadata:
		return "application/json;odata=fullmetadata;streaming=true;charset=utf-8"
	default:
		return "application/json;odata=minimalmetadata;streaming=true;charset=utf-8"
	}
}

// ParseLevel reads one media type: "application/json" (minimal metadata) optionally
// followed by parameters. The type and the odata parameter are case-insensitive, spaces
// around ';' and '=' are ignored (some clients send "application/json; odata=..."), and
// other parameters (streaming, charset, IEEE754Compatible, q...) are ignored. ok is false
// for any other type (application/atom+xml, application/xml, wildcards) and for an odata
// value other than nometadata, minimalmetadata or fullmetadata (odata=verbose is not
// supported by the service).
func ParseLevel(mediaType string) (Level, bool) {
	typ, params := cutParams(mediaType)
	if !strings.EqualFold(typ, "application/json") {
		return 0, false
	}
	return odataParam(params)
}

// NegotiateLevel picks the response level the way the service does (docs/protocol.md §2.3):
// the $format query parameter wins when it is non-empty (Storage Explorer sends empty
// parameters, which mean absent); otherwise the Accept header. A missing or empty Accept
// header, "*/*" or "application/*" mean MinimalMetadata.
//
// $format may be a media type or the OData shorthand "json" (= minimal metadata).
// Accept may list several media ranges with q-values: the supported range with the
// highest q wins, the first one on ties, and q=0 excludes a range. ok is false when
// nothing acceptable is offered (for example only application/atom+xml or
// application/xml); the caller answers 415 AtomFormatNotSupported in that case.
func NegotiateLevel(format, accept string) (Level, bool) {
	if format == "" {
		switch accept { // what the SDKs send: answered without parsing the list
		case "application/json;odata=minimalmetadata":
			return MinimalMetadata, true
		case "application/json;odata=nometadata":
			return NoMetadata, true
		case "application/json;odata=fullmetadata":
			return FullMetadata, true
		}
	}
	if f := trimSpace(format); f != "" {
		if strings.EqualFold(f, "json") {
			return MinimalMetadata, true
		}
		return ParseLevel(f)
	}
	accept = trimSpace(accept)
	if accept == "" {
		return MinimalMetadata, true
	}
	best, bestQ, found := MinimalMetadata, -1.0, false
	for accept != "" {
		var rng string
		if i := strings.IndexByte(accept, ','); i >= 0 {
			rng, accept = accept[:i], accept[i+1:]
		} else {
			rng, accept = accept, ""
		}
		typ, params := cutParams(rng)
		if typ == "" {
			continue
		}
		q := qValue(params)
		if q <= 0 {
			continue
		}
		var lvl Level
		switch {
		case strings.EqualFold(typ, "application/json"):
			l, ok := odataParam(params)
			if !ok {
				continue
			}
			lvl = l
		case typ == "*/*" || strings.EqualFold(typ, "application/*"):
			lvl = MinimalMetadata
		default:
			continue
		}
		if q > bestQ {
			best, bestQ, found = lvl, q, true
		}
	}
	return best, found
}

// cutParams splits "type/sub ; a=b ; c=d" into the trimmed type and the raw parameters
// (everything after the first ';').
func cutParams(s string) (typ, params string) {
	if i := strings.IndexByte(s, ';'); i >= 0 {
		return trimSpace(s[:i]), s[i+1:]
	}
	return trimSpace(s), ""
}

// nextParam returns the next "name=value" pair of a ';'-separated parameter list, both
// trimmed, with surrounding double quotes removed from the value.
func nextParam(params string) (name, value, rest string) {
	p := params
	if i := strings.IndexByte(params, ';'); i >= 0 {
		p, rest = params[:i], params[i+1:]
	}
	if i := strings.IndexByte(p, '='); i >= 0 {
		name, value = trimSpace(p[:i]), trimSpace(p[i+1:])
	} else {
		name = trimSpace(p)
	}
	if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
		value = value[1 : len(value)-1]
	}
	return name, value, rest
}

// odataParam reads the odata= parameter; absent means minimal metadata.
func odataParam(params string) (Level, bool) {
	for params != "" {
		var name, value string
		name, value, params = nextParam(params)
		if !strings.EqualFold(name, "odata") {
			continue
		}
		switch {
		case strings.EqualFold(value, "minimalmetadata"):
			return MinimalMetadata, true
		case strings.EqualFold(value, "nometadata"):
			return NoMetadata, true
		case strings.EqualFold(value, "fullmetadata"):
			return FullMetadata, true
		default:
			return 0, false
		}
	}
	return MinimalMetadata, true
}

// qValue reads the q= parameter of a media range; absent or malformed means 1.
func qValue(params string) float64 {
	for params != "" {
		var name, value string
		name, value, params = nextParam(params)
		if name == "q" || name == "Q" {
			q, err := strconv.ParseFloat(value, 64)
			if err != nil || q != q || q > 1 {
				return 1
			}
			return q
		}
	}
	return 1
}

func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
