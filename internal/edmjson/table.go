package edmjson

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// The members of a table object that carry Cerulean's table settings (docs/compatibility.md
// "Elastic tables: settings on the wire"): in a Create Table body, in the table-settings body and answer (?comp=properties),
// and in Query Tables and Get Table answers whose $select names them.
const (
	// MemberElastic is true for an elastic table.
	MemberElastic = "Elastic"
	// MemberDefaultTTL is the table's default time-to-live: -1 (on, no default) or a
	// number of seconds; absent or null is off.
	MemberDefaultTTL = "DefaultTimeToLive"
	// MemberTTLProperty names the per-entity TTL property (default
	// storage.DefaultTTLProperty).
	MemberTTLProperty = "TimeToLiveProperty"
	// MemberChangeFeed is the retention of the table's change feed in seconds, 1 to
	// 2147483647; absent or null is off (docs/change-feed.md).
	MemberChangeFeed = "ChangeFeedRetention"
	// MemberIndexes declares an elastic table's secondary indexes: an array of objects
	// {"Name", "Properties", "Unique"}; answers add each one's "State", its "Progress"
	// while building and its "Failure" once failed (docs/indexes.md).
	MemberIndexes = "Indexes"
)

// TableBody is a decoded table object: a Create Table body or a table-settings body.
type TableBody struct {
	// Name is TableName as given; HasName reports whether the body had one.
	Name    string
	HasName bool
	// Settings are the settings the body gives, and HasSettings whether it named any of
	// the settings members (even as null): a Create Table body without them leaves the
	// choice to the server's rules. Settings are decoded value by value; whether they fit
	// together (time-to-live on an elastic table only) is the table layer's check.
	Settings    storage.TableSettings
	HasSettings bool
}

// DecodeTable decodes a Create Table body: {"TableName":"mytable"} with, optionally,
// Cerulean's settings members (Elastic, DefaultTimeToLive, TimeToLiveProperty; see
// decodeSettingsMember). Other keys (odata.* and anything else) are ignored, as the
// service does. A missing or null TableName is 400 PropertiesNeedValue, a TableName that
// is not a string 400 InvalidInput, a key given twice 400 DuplicatePropertiesSpecified.
func DecodeTable(body []byte) (TableBody, error) {
	tb, err := decodeTable(body, false)
	if err != nil {
		return TableBody{}, err
	}
	if !tb.HasName {
		return TableBody{}, azerr.New(azerr.PropertiesNeedValue)
	}
	return tb, nil
}

// DecodeTableSettings decodes the body of a table-settings request (PUT
// /{table}?comp=properties): the settings members, and optionally TableName (the caller
// checks that it names the table addressed). Absent or null members take their
// defaults, so the body states the whole settings. Keys starting with "odata." and
// "@odata.type" annotations are ignored; any other key is 400 InvalidInput naming it, so
// that a misspelt setting is not silently dropped.
func DecodeTableSettings(body []byte) (TableBody, error) {
	return decodeTable(body, true)
}

func decodeTable(body []byte, strict bool) (TableBody, error) {
	var stack [8]member
	d := decoder{b: body, rawArrays: true}
	ms, err := d.object(stack[:0])
	if err != nil {
		return TableBody{}, err
	}
	var tb TableBody
	var seen [6]bool
	for i := range ms {
		m := &ms[i]
		k := -1
		switch string(m.key) {
		case "TableName":
			k = 0
		case MemberElastic:
			k = 1
		case MemberDefaultTTL:
			k = 2
		case MemberTTLProperty:
			k = 3
		case MemberChangeFeed:
			k = 4
		case MemberIndexes:
			k = 5
		}
		if k < 0 {
			if strict && !bytes.HasPrefix(m.key, []byte("odata.")) && !bytes.HasSuffix(m.key, []byte(annotSuffix)) {
				return TableBody{}, azerr.Newf(azerr.InvalidInput, "The member '%s' is not a table setting: the settings are %s, %s, %s, %s and %s.", m.key, MemberElastic, MemberDefaultTTL, MemberTTLProperty, MemberChangeFeed, MemberIndexes)
			}
			continue
		}
		if seen[k] {
			return TableBody{}, dupErr(m.key)
		}
		seen[k] = true
		if k != 5 && m.kind == kRaw {
			return TableBody{}, invalidf("%s must not be an array", m.key)
		}
		if k == 0 {
			switch m.kind {
			case kNull:
			case kString:
				tb.Name, tb.HasName = string(m.val), true
			default:
				return TableBody{}, invalidf("TableName must be a string")
			}
			continue
		}
		tb.HasSettings = true
		if err := decodeSettingsMember(&tb.Settings, m); err != nil {
			return TableBody{}, err
		}
	}
	return tb, nil
}

// decodeSettingsMember sets one settings member, null meaning its default:
//   - Elastic: true or false;
//   - DefaultTimeToLive: a JSON integer, -1 or 1 to 2147483647 (not 0: absent or null is
//     off, as in Cosmos DB, where 0 is refused too);
//   - TimeToLiveProperty: a non-empty string (its validity as a property name is checked
//     with the settings);
//   - ChangeFeedRetention: a JSON integer from 1 to 2147483647 (seconds).
//
// Anything else is 400 InvalidInput naming the member and what it takes.
func decodeSettingsMember(s *storage.TableSettings, m *member) error {
	switch string(m.key) {
	case MemberElastic:
		switch m.kind {
		case kTrue:
			s.Elastic = true
		case kFalse, kNull:
		default:
			return azerr.Newf(azerr.InvalidInput, "The value of '%s' must be true or false.", MemberElastic)
		}
	case MemberDefaultTTL:
		if m.kind == kNull {
			return nil
		}
		n, err := strconv.ParseInt(string(m.val), 10, 64)
		if m.kind != kInt || err != nil || n == 0 || n < -1 || n > math.MaxInt32 {
			return azerr.Newf(azerr.InvalidInput, "The value %s of '%s' is not valid: it must be -1 (time-to-live on, entities expire only when they say so) or a number of seconds from 1 to 2147483647; null or no '%s' turns time-to-live off.", valueText(m), MemberDefaultTTL, MemberDefaultTTL)
		}
		s.DefaultTTL = int32(n)
	case MemberTTLProperty:
		switch {
		case m.kind == kNull:
		case m.kind == kString && len(m.val) > 0:
			s.TTLProperty = string(m.val)
		default:
			return azerr.Newf(azerr.InvalidInput, "The value of '%s' must be a property name (a string); null or no '%s' means %s.", MemberTTLProperty, MemberTTLProperty, storage.DefaultTTLProperty)
		}
	case MemberChangeFeed:
		if m.kind == kNull {
			return nil
		}
		n, err := strconv.ParseInt(string(m.val), 10, 64)
		if m.kind != kInt || err != nil || n < 1 || n > math.MaxInt32 {
			return azerr.Newf(azerr.InvalidInput, "The value %s of '%s' is not valid: it must be a number of seconds from 1 to 2147483647; null or no '%s' turns the change feed off.", valueText(m), MemberChangeFeed, MemberChangeFeed)
		}
		s.ChangeFeed = int32(n)
	case MemberIndexes:
		if m.kind == kNull {
			return nil
		}
		if m.kind != kRaw {
			return azerr.Newf(azerr.InvalidInput, "The value of '%s' must be an array of index declarations.", MemberIndexes)
		}
		var ws []wireIndex
		dec := json.NewDecoder(bytes.NewReader(m.val))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ws); err != nil {
			return azerr.Newf(azerr.InvalidInput, "The value of '%s' must be an array of objects with Name, Properties (an array of property names) and Unique: %v.", MemberIndexes, err)
		}
		s.Indexes = make([]storage.IndexDef, len(ws))
		for i, w := range ws {
			s.Indexes[i] = storage.IndexDef{Name: w.Name, Properties: w.Properties, Unique: w.Unique}
		}
	}
	return nil
}

// wireIndex is an index declaration on the wire. State, Progress and Failure are the
// answers' (the engine's account of the index: storage.IndexDef); a request may carry
// them back, since a GET answer is a valid PUT body, and they are ignored there: only
// the engine sets them.
type wireIndex struct {
	Name       string   `json:"Name"`
	Properties []string `json:"Properties"`
	Unique     bool     `json:"Unique,omitempty"`
	State      string   `json:"State,omitempty"`
	// Progress is written while the index builds, 0 included (rows the build has
	// passed), and never otherwise: a pointer, so that 0 is written.
	Progress *int64 `json:"Progress,omitempty"`
	// Failure is written for a failed index only.
	Failure string `json:"Failure,omitempty"`
}

// appendIndexes appends the Indexes member's value for defs: each one's declaration and
// State, with Progress while building and Failure once failed.
func appendIndexes(dst []byte, defs []storage.IndexDef) []byte {
	ws := make([]wireIndex, len(defs))
	for i, d := range defs {
		ws[i] = wireIndex{Name: d.Name, Properties: d.Properties, Unique: d.Unique, State: string(d.State)}
		switch d.State {
		case storage.IndexBuilding:
			ws[i].Progress = &d.Progress
		case storage.IndexFailed:
			ws[i].Failure = d.Failure
		}
	}
	b, _ := json.Marshal(ws) // cannot fail: strings and bools
	return append(dst, b...)
}

// valueText is a member's value as it appeared, for messages (bounded in length).
func valueText(m *member) string {
	var s string
	switch m.kind {
	case kTrue:
		s = "true"
	case kFalse:
		s = "false"
	case kString:
		s = strconv.Quote(string(m.val))
	default:
		s = string(m.val)
	}
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}

// TableSelect is the set of settings members a Query Tables or Get Table answer writes
// after TableName: those its $select names. The zero value writes none, so a client
// that does not ask sees exactly the service's answer.
type TableSelect uint8

// The settings members, as TableSelect bits.
const (
	SelectElastic TableSelect = 1 << iota
	SelectDefaultTTL
	SelectTTLProperty
	SelectChangeFeed
	SelectIndexes
)

// NewTableSelect returns the settings members a parsed $select list names (nil: none).
// Other names, TableName included, select nothing more: TableName is always written.
func NewTableSelect(names []string) TableSelect {
	var sel TableSelect
	for _, n := range names {
		switch n {
		case MemberElastic:
			sel |= SelectElastic
		case MemberDefaultTTL:
			sel |= SelectDefaultTTL
		case MemberTTLProperty:
			sel |= SelectTTLProperty
		case MemberChangeFeed:
			sel |= SelectChangeFeed
		case MemberIndexes:
			sel |= SelectIndexes
		}
	}
	return sel
}

// appendSelectedSettings appends the selected settings members of s, each one written
// whether or not it is set, as a $select'ed property is: Elastic true or false,
// DefaultTimeToLive a number or null (off), TimeToLiveProperty the name in effect, or
// null on a standard table, which has none.
func appendSelectedSettings(dst []byte, s storage.TableSettings, sel TableSelect) []byte {
	if sel&SelectElastic != 0 {
		dst = append(dst, `,"`+MemberElastic+`":`...)
		dst = strconv.AppendBool(dst, s.Elastic)
	}
	if sel&SelectDefaultTTL != 0 {
		dst = append(dst, `,"`+MemberDefaultTTL+`":`...)
		if s.TTLOn() {
			dst = strconv.AppendInt(dst, int64(s.DefaultTTL), 10)
		} else {
			dst = append(dst, "null"...)
		}
	}
	if sel&SelectTTLProperty != 0 {
		dst = append(dst, `,"`+MemberTTLProperty+`":`...)
		if s.Elastic {
			dst = AppendString(dst, s.TTLPropertyName())
		} else {
			dst = append(dst, "null"...)
		}
	}
	if sel&SelectChangeFeed != 0 {
		dst = append(dst, `,"`+MemberChangeFeed+`":`...)
		if s.ChangeFeedOn() {
			dst = strconv.AppendInt(dst, int64(s.ChangeFeed), 10)
		} else {
			dst = append(dst, "null"...)
		}
	}
	if sel&SelectIndexes != 0 {
		dst = append(dst, `,"`+MemberIndexes+`":`...)
		if len(s.Indexes) > 0 {
			dst = appendIndexes(dst, s.Indexes)
		} else {
			dst = append(dst, "null"...)
		}
	}
	return dst
}

// AppendTableSettings appends the answer of GET /{table}?comp=properties, a plain JSON
// object: {"TableName":"t","Elastic":true,"DefaultTimeToLive":86400,
// "TimeToLiveProperty":"TTLInSeconds"}. TableName and Elastic are always written;
// DefaultTimeToLive only when time-to-live is on (absent is off, as in the request
// body), TimeToLiveProperty (the name in effect, default included) only on an elastic
// table. The object is a valid PUT body for the same settings.
func AppendTableSettings(dst []byte, t storage.TableInfo) []byte {
	dst = append(dst, `{"TableName":`...)
	dst = AppendString(dst, t.Name)
	dst = append(dst, `,"`+MemberElastic+`":`...)
	dst = strconv.AppendBool(dst, t.Settings.Elastic)
	if t.Settings.TTLOn() {
		dst = append(dst, `,"`+MemberDefaultTTL+`":`...)
		dst = strconv.AppendInt(dst, int64(t.Settings.DefaultTTL), 10)
	}
	if t.Settings.Elastic {
		dst = append(dst, `,"`+MemberTTLProperty+`":`...)
		dst = AppendString(dst, t.Settings.TTLPropertyName())
	}
	if t.Settings.ChangeFeedOn() {
		dst = append(dst, `,"`+MemberChangeFeed+`":`...)
		dst = strconv.AppendInt(dst, int64(t.Settings.ChangeFeed), 10)
	}
	if len(t.Settings.Indexes) > 0 {
		dst = append(dst, `,"`+MemberIndexes+`":`...)
		dst = appendIndexes(dst, t.Settings.Indexes)
	}
	return append(dst, '}')
}
