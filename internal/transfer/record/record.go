// Package record is what the data tools move: one entity with its table and Timestamp,
// the JSON forms it takes (a request body; a JSON Lines record where every property
// carries its EDM type), and the reader and writer contracts the file formats meet.
package record

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/edmjson"
	"github.com/ceruleandb/cerulean/internal/entity"
)

// Record is one entity as the data tools carry it.
type Record struct {
	// Table is the entity's table; empty when the stream holds one table, named
	// elsewhere.
	Table  string
	Entity entity.Entity
	// Timestamp is the service's last-modified time in 100 ns ticks, when known
	// (HasTimestamp). It is informational: a write never sets it, the target service
	// assigns its own.
	Timestamp    int64
	HasTimestamp bool
	// Expiry is when the entity expires at its source, in 100 ns ticks since the Unix
	// epoch: the expiry the source stored with it (an absolute instant, so that a slow
	// transfer or a file imported later does not lengthen its life); 0 when it has none.
	// Whether 0 means "never" or "not known" is the stream's to say: an elastic table's
	// settings record before its entities says their expiries are carried.
	Expiry int64
	// Settings, when set, makes the record a table's settings instead of an entity: the
	// elastic-table settings of Table (or of the stream's one table), which come before
	// the table's entities. Entity is then empty.
	Settings *client.TableSettings
}

// Reader yields records until io.EOF.
type Reader interface {
	Read() (Record, error)
}

// Writer takes records; Close completes the output (a CSV header, a flush) and must be
// called once, after the last Write.
type Writer interface {
	Write(r *Record) error
	Close() error
}

// LineError is a record a file reader could not read: its line (1-based) and why. The
// reader has skipped the line, so reading may go on (--skip-bad).
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// Detail is the human part of an error from the edmjson decoder (its Detail), or the
// error's text.
func Detail(err error) string {
	var ae *azerr.Error
	if errors.As(err, &ae) && ae.Detail != "" {
		return ae.Detail
	}
	return err.Error()
}

// TableKey is the key of a record's table in a JSON Lines record. It starts with
// "odata." so that the service ignores it, and every record stays a valid entity body.
const TableKey = "odata.table"

// ExpiryKey is the key of an entity's expiry (Record.Expiry) in a JSON Lines record, an
// Edm.DateTime text; SettingsKey the key of a settings record's settings (the members of
// the table-settings endpoint, docs/compatibility.md "Elastic tables: settings on the wire"). Both start with "odata." so that
// a line stays a valid entity body.
const (
	ExpiryKey   = "odata.expiry"
	SettingsKey = "odata.settings"
)

// JSONOptions say what AppendJSON writes.
type JSONOptions struct {
	// AnnotateAll writes an "@odata.type" annotation for every property (the JSON Lines
	// form); otherwise only for Int64, Double, DateTime, Guid and Binary, the form every
	// service and SDK takes in a request body (.NET refuses annotations on String,
	// Boolean and Int32 in some versions).
	AnnotateAll bool
	// Table writes the record's table (TableKey) first, when it has one.
	Table bool
	// Timestamp writes the record's Timestamp, when it has one.
	Timestamp bool
	// Expiry writes the record's expiry (ExpiryKey), when it has one.
	Expiry bool
}

// AppendJSON appends r's entity as an OData JSON object: PartitionKey, RowKey, then
// (as asked) Timestamp, then the properties in their order, each value in the form
// edmjson.DecodeEntity reads back into exactly the same value: Int64 as a decimal string,
// Double as a number with '.' or an exponent (or "NaN", "Infinity", "-Infinity";
// -0 stays "-0.0"), DateTime with seven fraction digits, Guid in its canonical form,
// Binary in base64.
func AppendJSON(dst []byte, r *Record, o JSONOptions) []byte {
	dst = append(dst, '{')
	if o.Table && r.Table != "" {
		dst = append(dst, `"`+TableKey+`":`...)
		dst = edmjson.AppendString(dst, r.Table)
		dst = append(dst, ',')
	}
	dst = append(dst, `"PartitionKey":`...)
	dst = edmjson.AppendString(dst, r.Entity.PartitionKey)
	dst = append(dst, `,"RowKey":`...)
	dst = edmjson.AppendString(dst, r.Entity.RowKey)
	if o.Timestamp && r.HasTimestamp {
		dst = append(dst, `,"Timestamp@odata.type":"Edm.DateTime","Timestamp":"`...)
		dst = entity.AppendTicks(dst, r.Timestamp)
		dst = append(dst, '"')
	}
	if o.Expiry && r.Expiry != 0 {
		dst = append(dst, `,"`+ExpiryKey+`":"`...)
		dst = entity.AppendTicks(dst, r.Expiry)
		dst = append(dst, '"')
	}
	for i := range r.Entity.Props {
		p := &r.Entity.Props[i]
		t := p.Value.Type
		if o.AnnotateAll || (t != entity.String && t != entity.Boolean && t != entity.Int32) {
			dst = append(dst, ',')
			dst = edmjson.AppendString(dst, p.Name+"@odata.type")
			dst = append(dst, `:"`...)
			dst = append(dst, t.EDMName()...)
			dst = append(dst, '"')
		}
		dst = append(dst, ',')
		dst = edmjson.AppendString(dst, p.Name)
		dst = append(dst, ':')
		dst = appendValue(dst, p.Value)
	}
	return append(dst, '}')
}

func appendValue(dst []byte, v entity.Value) []byte {
	switch v.Type {
	case entity.String:
		return edmjson.AppendString(dst, v.Str)
	case entity.Boolean:
		return strconv.AppendBool(dst, v.Bool())
	case entity.Int32:
		return strconv.AppendInt(dst, v.Int, 10)
	case entity.Int64:
		dst = append(dst, '"')
		dst = strconv.AppendInt(dst, v.Int, 10)
		return append(dst, '"')
	case entity.Double:
		if s, ok := SpecialDouble(v.Float); ok {
			return append(append(append(dst, '"'), s...), '"')
		}
		return AppendDouble(dst, v.Float)
	case entity.DateTime:
		dst = append(dst, '"')
		dst = entity.AppendTicks(dst, v.Int)
		return append(dst, '"')
	case entity.GUID:
		return append(append(append(dst, '"'), entity.FormatGUID(v.Bytes)...), '"')
	case entity.Binary:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, v.Bytes)
		return append(dst, '"')
	}
	return append(dst, "null"...)
}

// SpecialDouble names the Doubles JSON numbers cannot hold: NaN, Infinity, -Infinity.
func SpecialDouble(f float64) (string, bool) {
	switch {
	case math.IsNaN(f):
		return "NaN", true
	case math.IsInf(f, 1):
		return "Infinity", true
	case math.IsInf(f, -1):
		return "-Infinity", true
	}
	return "", false
}

// AppendDouble appends a finite Double in the shortest form that reads back to the same
// bits, with '.' or an exponent so that no reader takes it for an integer ("1.0",
// "-0.0", "1e+21").
func AppendDouble(dst []byte, f float64) []byte {
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, 'g', -1, 64)
	if !bytes.ContainsAny(dst[start:], ".eE") {
		dst = append(dst, ".0"...)
	}
	return dst
}

// FromJSON reads one OData JSON entity object — a query answer's entity at full or
// minimal metadata, or a JSON Lines record — with edmjson.DecodeEntity (so its types are
// exact and its limits checked), and picks out the two members the decoder leaves
// aside: the Timestamp and the table (TableKey).
func FromJSON(b []byte) (Record, error) {
	e, keys, err := edmjson.DecodeEntity(b)
	if err != nil {
		return Record{}, err
	}
	switch {
	case !keys.PartitionKey:
		return Record{}, errors.New("no PartitionKey")
	case !keys.RowKey:
		return Record{}, errors.New("no RowKey")
	}
	r := Record{Entity: e}
	if s, ok, err := member(b, `"Timestamp":`); err != nil {
		return Record{}, err
	} else if ok {
		ticks, err := entity.ParseDateTime(s)
		if err != nil {
			return Record{}, fmt.Errorf("the Timestamp: %w", err)
		}
		r.Timestamp, r.HasTimestamp = ticks, true
	}
	if s, ok, err := member(b, `"`+TableKey+`":`); err != nil {
		return Record{}, err
	} else if ok {
		r.Table = s
	}
	if s, ok, err := member(b, `"`+ExpiryKey+`":`); err != nil {
		return Record{}, err
	} else if ok {
		ticks, err := entity.ParseDateTime(s)
		if err != nil {
			return Record{}, fmt.Errorf("the %s: %w", ExpiryKey, err)
		}
		r.Expiry = ticks
	}
	return r, nil
}

// FromAnswer is FromJSON for an entity of a query answer (client.QueryEntities) that may
// carry the service's expiry annotation (client.ExpiryAnnotation, asked for with
// client.Query.Expiry): its instant goes to Expiry, and out of the properties, where the
// decoder, which knows only "odata." keys as metadata, put it as a String (no property
// name may have a dot, so it is the annotation).
func FromAnswer(b []byte) (Record, error) {
	r, err := FromJSON(b)
	if err != nil {
		return Record{}, err
	}
	for i := range r.Entity.Props {
		p := &r.Entity.Props[i]
		if p.Name != client.ExpiryAnnotation {
			continue
		}
		if p.Value.Type != entity.String {
			return Record{}, fmt.Errorf("the %s annotation is not a string", client.ExpiryAnnotation)
		}
		ticks, err := entity.ParseDateTime(p.Value.Str)
		if err != nil || ticks <= 0 {
			return Record{}, fmt.Errorf("the %s annotation %q is not an instant", client.ExpiryAnnotation, p.Value.Str)
		}
		r.Expiry = ticks
		r.Entity.Props = append(r.Entity.Props[:i:i], r.Entity.Props[i+1:]...)
		break
	}
	return r, nil
}

// IsSettings reports whether a JSON Lines record holds a table's settings rather than
// an entity. In valid JSON the bytes `"odata.settings":` can only be a key (inside a
// string every '"' is escaped), and no entity has such a property.
func IsSettings(b []byte) bool { return bytes.Contains(b, []byte(`"`+SettingsKey+`":`)) }

// AppendSettings appends a settings record as one JSON object: the table (when table is
// set and the record has one), then the settings with the members of the table-settings
// endpoint — {"odata.table":"events","odata.settings":{"Elastic":true,"DefaultTimeToLive":86400,"TimeToLiveProperty":"TTLInSeconds"}}.
func AppendSettings(dst []byte, r *Record, table bool) []byte {
	dst = append(dst, '{')
	if table && r.Table != "" {
		dst = append(dst, `"`+TableKey+`":`...)
		dst = edmjson.AppendString(dst, r.Table)
		dst = append(dst, ',')
	}
	s := *r.Settings
	if !s.Elastic {
		s = client.TableSettings{} // a standard table has nothing else
	}
	b, _ := json.Marshal(s) // cannot fail: plain fields
	dst = append(dst, `"`+SettingsKey+`":`...)
	dst = append(dst, b...)
	return append(dst, '}')
}

// SettingsFromJSON reads a settings record (AppendSettings' form). Its settings must
// have the endpoint's members only, with their types: a member it does not know is
// refused rather than ignored, since dropping it could change how the table behaves.
func SettingsFromJSON(b []byte) (Record, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		return Record{}, fmt.Errorf("a settings line: %w", err)
	}
	var r Record
	for k, v := range doc {
		switch k {
		case TableKey:
			if err := json.Unmarshal(v, &r.Table); err != nil {
				return Record{}, fmt.Errorf("%s is not a string", TableKey)
			}
		case SettingsKey:
			d := json.NewDecoder(bytes.NewReader(v))
			d.DisallowUnknownFields()
			var s client.TableSettings
			if err := d.Decode(&s); err != nil {
				return Record{}, fmt.Errorf("%s: %w", SettingsKey, err)
			}
			if s.DefaultTimeToLive < -1 || !s.Elastic && (s.DefaultTimeToLive != 0 || s.TimeToLiveProperty != "") {
				return Record{}, fmt.Errorf("%s: time-to-live %d (property %q) on a table that is elastic=%t", SettingsKey, s.DefaultTimeToLive, s.TimeToLiveProperty, s.Elastic)
			}
			r.Settings = &s
		default:
			return Record{}, fmt.Errorf("a settings line has the member %q (only %s and %s)", k, TableKey, SettingsKey)
		}
	}
	if r.Settings == nil {
		return Record{}, fmt.Errorf("a settings line without %s", SettingsKey)
	}
	return r, nil
}

// member finds a top-level string member by its quoted key followed by ':'. The object
// has already been validated by the decoder, and in valid JSON the bytes `"Key":` can
// only be a key: inside a string every '"' is escaped.
func member(b []byte, key string) (string, bool, error) {
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return "", false, nil
	}
	rest := bytes.TrimLeft(b[i+len(key):], " \t\r\n")
	if len(rest) == 0 || rest[0] != '"' {
		return "", false, fmt.Errorf("%s is not a string", key[:len(key)-1])
	}
	end := 1
	for end < len(rest) && rest[end] != '"' {
		if rest[end] == '\\' {
			end++
		}
		end++
	}
	if end >= len(rest) {
		return "", false, fmt.Errorf("%s: unterminated string", key[:len(key)-1])
	}
	raw := rest[:end+1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1:end]), true, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, err
	}
	return s, true, nil
}
