package edmjson

import (
	"encoding/base64"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// EntityOptions says how AppendEntity and AppendCollectionStart render entities.
type EntityOptions struct {
	// Level is the negotiated metadata level.
	Level Level
	// ServiceRoot is the account's base URL without a trailing slash, e.g.
	// "http://127.0.0.1:10002/devstoreaccount1" or "https://acct.table.core.windows.net"
	// (one trailing slash is tolerated). Used by odata.metadata and odata.id.
	ServiceRoot string
	// Account is the account name, for odata.type ("<account>.<table>") at full metadata.
	Account string
	// Table is the table name as the client addressed it.
	Table string
	// Element marks a single-entity response (Get Entity, Insert with return-content):
	// the object then starts with "odata.metadata":"<root>/$metadata#<table>/@Element".
	// Entities inside a collection carry no odata.metadata.
	Element bool
	// Select is the $select list, prepared once per request by NewSelection; nil means
	// every property. Otherwise only the named properties are written; PartitionKey,
	// RowKey and Timestamp only when named; a named property the entity lacks is written
	// as null (as the service does); odata.etag is written regardless (minimal and full).
	Select *Selection
	// Expiry writes the "cerulean.expiry" instance annotation (ExpiryAnnotation) on each
	// record with a stored expiry (storage.Record.Expiry), at every metadata level and
	// whatever Select says: what a request asks for with Prefer: odata.include-annotations
	// (docs/compatibility.md "An entity's exact expiry"). A record without an expiry gets none.
	Expiry bool
}

// ExpiryAnnotation is the instance annotation that carries an entity's expiry: the
// instant it is gone, in the Timestamp's form. Its name has a dot, which no property name
// may have, so it never clashes with a property; a request body that echoes it is
// refused like any invalid property name (as on Azure).
const ExpiryAnnotation = "cerulean.expiry"

// Selection is a $select list prepared for AppendEntity. It is built once per request
// and shared by every entity of the response, so that writing an entity costs time
// linear in its properties plus the selected names, whatever the list holds. It is
// read-only once built: one Selection may serve concurrent encoders.
type Selection struct {
	pk, rk, ts bool
	// names are the selected custom properties, each once, in the order first given; an
	// entity lacking one gets it as null, in this order, after its own properties.
	names []string
	index map[string]int // names[i] → i
}

// NewSelection prepares a parsed, trimmed $select list (odata.ParseSelect's result). An
// empty list selects every property and gives nil. Repeated names count once; names
// starting with "odata." or containing '@' select nothing (they would collide with the
// metadata keys).
func NewSelection(names []string) *Selection {
	if len(names) == 0 {
		return nil
	}
	sel := &Selection{index: make(map[string]int, len(names))}
	for _, name := range names {
		switch {
		case name == "PartitionKey":
			sel.pk = true
		case name == "RowKey":
			sel.rk = true
		case name == "Timestamp":
			sel.ts = true
		case selectableCustom(name):
			if _, dup := sel.index[name]; !dup {
				sel.index[name] = len(sel.names)
				sel.names = append(sel.names, name)
			}
		}
	}
	return sel
}

// TableOptions says how AppendTable and AppendTablesStart render tables.
type TableOptions struct {
	Level       Level
	ServiceRoot string // as in EntityOptions
	Account     string // for odata.type "<account>.Tables" at full metadata
	// Element marks a single-table response (Create Table): the object then starts with
	// "odata.metadata":"<root>/$metadata#Tables/@Element".
	Element bool
	// Select names the settings members written after TableName (NewTableSelect).
	Select TableSelect
}

// AppendEntity appends the JSON object for e, whose version gives its Timestamp and ETag,
// following docs/protocol.md §4.1–4.2 and checklist items 6–9:
//
//   - key order: odata.metadata (Element only), odata.type, odata.id (full), odata.etag
//     (minimal, full), odata.editLink (full), PartitionKey, RowKey, Timestamp (with
//     Timestamp@odata.type at full), then custom properties in stored order;
//   - String, Boolean, Int32 are never annotated (.NET throws on those annotations, Go
//     drops the value); Int64 is a string, DateTime/Guid/Binary strings, all annotated;
//     Double is a JSON number that always has '.' or an exponent (so no client reads it
//     back as Int32), except NaN/Infinity/-Infinity, which are strings annotated
//     Edm.Double;
//   - at NoMetadata the same values without any annotation or odata.* key.
//
// Values that no valid entity holds (a Guid that is not 16 bytes, an unknown type) are
// written as null, so the output is always valid JSON.
func AppendEntity(dst []byte, e *entity.Entity, version int64, opts EntityOptions) []byte {
	dst = appendEntityStart(dst, e.PartitionKey, e.RowKey, version, 0, opts)
	w := newPropWriter(opts)
	for i := range e.Props {
		p := &e.Props[i]
		dst = w.add(dst, p.Name, &p.Value)
	}
	return w.end(dst)
}

// AppendRecord appends rec exactly as AppendEntity appends rec.Entity at rec.Version,
// whether its properties are decoded (Entity.Props) or still in the stored form
// (storage.Record.Encoded): those are written straight from the stored bytes, with no
// value decoded or allocated. With opts.Expiry it also writes rec.Expiry, when the record
// has one, as the ExpiryAnnotation.
func AppendRecord(dst []byte, rec *storage.Record, opts EntityOptions) []byte {
	dst = appendEntityStart(dst, rec.Entity.PartitionKey, rec.Entity.RowKey, rec.Version, rec.Expiry, opts)
	w := newPropWriter(opts)
	if rec.Encoded == nil {
		for i := range rec.Entity.Props {
			p := &rec.Entity.Props[i]
			dst = w.add(dst, p.Name, &p.Value)
		}
		return w.end(dst)
	}
	r := entity.NewPropReader(rec.Encoded)
	for r.Next() {
		if r.Plain() {
			// Stored as needing no escape (entity's plainString): copied as it is.
			dst = w.addPlain(dst, r.Name(), r.Value().Str)
			continue
		}
		dst = w.add(dst, r.Name(), r.Value())
	}
	return w.end(dst)
}

// appendEntityStart opens an entity's object and writes its metadata, its expiry (when
// opts.Expiry and expiry is not 0) and its system properties (AppendEntity's order), the
// Timestamp formatted once for the ETag and itself.
func appendEntityStart(dst []byte, pk, rk string, version, expiry int64, opts EntityOptions) []byte {
	dst = append(dst, '{')
	root := trimSlash(opts.ServiceRoot)
	sel := opts.Select
	all := sel == nil
	var tsBuf [28]byte
	var ts []byte // version's Timestamp text, when in the range appendTicks formats
	if version >= entity.MinDateTime && version <= entity.MaxDateTime {
		ts = appendTicks(tsBuf[:0], version)
	}
	if opts.Level != NoMetadata {
		if opts.Element {
			dst = append(dst, `"odata.metadata":"`...)
			dst = appendStringContent(dst, root)
			dst = append(dst, `/$metadata#`...)
			dst = appendStringContent(dst, opts.Table)
			dst = append(dst, `/@Element"`...)
		}
		if opts.Level == FullMetadata {
			dst = comma(dst)
			dst = append(dst, `"odata.type":"`...)
			dst = appendStringContent(dst, opts.Account)
			dst = append(dst, '.')
			dst = appendStringContent(dst, opts.Table)
			dst = append(dst, `","odata.id":"`...)
			dst = appendStringContent(dst, root)
			dst = append(dst, '/')
			dst = appendEntityPath(dst, opts.Table, pk, rk)
			dst = append(dst, '"')
		}
		dst = comma(dst)
		dst = append(dst, `"odata.etag":"`...)
		if ts != nil {
			dst = appendETagTicks(dst, ts)
		} else {
			dst = appendETagContent(dst, version)
		}
		dst = append(dst, '"')
		if opts.Level == FullMetadata {
			dst = append(dst, `,"odata.editLink":"`...)
			dst = appendEntityPath(dst, opts.Table, pk, rk)
			dst = append(dst, '"')
		}
	}
	if opts.Expiry && expiry != 0 {
		dst = comma(dst)
		dst = append(dst, `"`+ExpiryAnnotation+`":"`...)
		dst = appendTicks(dst, expiry)
		dst = append(dst, '"')
	}
	if all || sel.pk {
		dst = comma(dst)
		dst = append(dst, `"PartitionKey":`...)
		dst = AppendString(dst, pk)
	}
	if all || sel.rk {
		dst = comma(dst)
		dst = append(dst, `"RowKey":`...)
		dst = AppendString(dst, rk)
	}
	if all || sel.ts {
		dst = comma(dst)
		if opts.Level == FullMetadata {
			dst = append(dst, `"Timestamp@odata.type":"Edm.DateTime",`...)
		}
		dst = append(dst, `"Timestamp":"`...)
		if ts != nil {
			dst = append(dst, ts...)
		} else {
			dst = appendTicks(dst, version)
		}
		dst = append(dst, '"')
	}
	return dst
}

// propWriter writes an entity's custom properties in stored order, keeping to the
// $select list if there is one, then closes the object (end).
type propWriter struct {
	sel      *Selection
	annotate bool
	// small and big mark which selected names the entity had, one bit each: small, on
	// the stack, serves any list odata.ParseSelect allows.
	small [4]uint64
	big   []uint64
}

func newPropWriter(opts EntityOptions) propWriter {
	w := propWriter{sel: opts.Select, annotate: opts.Level != NoMetadata}
	if w.sel != nil {
		if n := (len(w.sel.names) + 63) / 64; n > len(w.small) {
			w.big = make([]uint64, n)
		}
	}
	return w
}

// bits is the word of the written marks that holds bit j.
func (w *propWriter) bits(j int) *uint64 {
	if w.big != nil {
		return &w.big[j/64]
	}
	return &w.small[j/64]
}

// keep reports whether property name is written (no $select, or selected), marking a
// selected one as written.
func (w *propWriter) keep(name string) bool {
	if w.sel == nil {
		return true
	}
	j, ok := w.sel.index[name]
	if ok {
		*w.bits(j) |= 1 << (j % 64)
	}
	return ok
}

func (w *propWriter) add(dst []byte, name string, v *entity.Value) []byte {
	if !w.keep(name) {
		return dst
	}
	dst = comma(dst)
	return appendProperty(dst, name, v, w.annotate)
}

// addPlain is add for a String value that needs no JSON escaping (Strings are never
// annotated).
func (w *propWriter) addPlain(dst []byte, name, str string) []byte {
	if !w.keep(name) {
		return dst
	}
	dst = comma(dst)
	dst = AppendString(dst, name)
	dst = append(dst, ':', '"')
	dst = append(dst, str...)
	return append(dst, '"')
}

// end writes every selected name the entity lacked as null, in the list's order, and
// closes the object.
func (w *propWriter) end(dst []byte) []byte {
	if w.sel != nil {
		for j, name := range w.sel.names {
			if *w.bits(j)&(1<<(j%64)) != 0 {
				continue
			}
			dst = comma(dst)
			dst = AppendString(dst, name)
			dst = append(dst, ":null"...)
		}
	}
	return append(dst, '}')
}

// AppendCollectionStart opens a Query Entities body: {"odata.metadata":
// "<root>/$metadata#<table>","value":[ (no odata.metadata at NoMetadata). Append the
// entities with AppendEntity (opts.Element false), separated by ',', then
// AppendCollectionEnd. Nothing else follows "value": continuation travels in headers, so
// the body can be streamed.
func AppendCollectionStart(dst []byte, opts EntityOptions) []byte {
	if opts.Level == NoMetadata {
		return append(dst, `{"value":[`...)
	}
	dst = append(dst, `{"odata.metadata":"`...)
	dst = appendStringContent(dst, trimSlash(opts.ServiceRoot))
	dst = append(dst, `/$metadata#`...)
	dst = appendStringContent(dst, opts.Table)
	return append(dst, `","value":[`...)
}

// AppendTablesStart opens a Query Tables body: {"odata.metadata":"<root>/$metadata#Tables",
// "value":[ (no odata.metadata at NoMetadata). Append tables with AppendTable
// (opts.Element false), separated by ',', then AppendCollectionEnd.
func AppendTablesStart(dst []byte, opts TableOptions) []byte {
	if opts.Level == NoMetadata {
		return append(dst, `{"value":[`...)
	}
	dst = append(dst, `{"odata.metadata":"`...)
	dst = appendStringContent(dst, trimSlash(opts.ServiceRoot))
	return append(dst, `/$metadata#Tables","value":[`...)
}

// AppendTables appends a whole Query Tables body for tables: AppendTablesStart, each
// table with AppendTableInfo (opts.Element is ignored), AppendCollectionEnd.
func AppendTables(dst []byte, tables []storage.TableInfo, opts TableOptions) []byte {
	opts.Element = false
	dst = AppendTablesStart(dst, opts)
	for i := range tables {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendTableInfo(dst, tables[i], opts)
	}
	return AppendCollectionEnd(dst)
}

// AppendCollectionEnd closes a body opened by AppendCollectionStart or AppendTablesStart.
func AppendCollectionEnd(dst []byte) []byte {
	return append(dst, "]}"...)
}

// AppendTable appends one table object (docs/protocol.md §3.1–3.2): {"TableName":"t"}, preceded
// at full metadata by odata.type "<account>.Tables", odata.id "<root>/Tables('t')" and
// odata.editLink "Tables('t')", and, for a single-table response (opts.Element), by
// odata.metadata "<root>/$metadata#Tables/@Element" at minimal and full metadata.
// Settings members selected by opts.Select are written as a standard table's.
func AppendTable(dst []byte, name string, opts TableOptions) []byte {
	return AppendTableInfo(dst, storage.TableInfo{Name: name}, opts)
}

// AppendTableInfo is AppendTable for a catalogue entry: after TableName come the settings
// members opts.Select names (none unless $select asked for them), each written whether
// or not it is set: Elastic true or false, DefaultTimeToLive the number or null (off),
// TimeToLiveProperty the name in effect or null (a standard table).
func AppendTableInfo(dst []byte, t storage.TableInfo, opts TableOptions) []byte {
	name := t.Name
	dst = append(dst, '{')
	if opts.Level != NoMetadata {
		root := trimSlash(opts.ServiceRoot)
		if opts.Element {
			dst = append(dst, `"odata.metadata":"`...)
			dst = appendStringContent(dst, root)
			dst = append(dst, `/$metadata#Tables/@Element"`...)
		}
		if opts.Level == FullMetadata {
			dst = comma(dst)
			dst = append(dst, `"odata.type":"`...)
			dst = appendStringContent(dst, opts.Account)
			dst = append(dst, `.Tables","odata.id":"`...)
			dst = appendStringContent(dst, root)
			dst = append(dst, `/Tables('`...)
			dst = AppendKeyEscaped(dst, name)
			dst = append(dst, `')","odata.editLink":"Tables('`...)
			dst = AppendKeyEscaped(dst, name)
			dst = append(dst, `')"`...)
		}
	}
	dst = comma(dst)
	dst = append(dst, `"TableName":`...)
	dst = AppendString(dst, name)
	if opts.Select != 0 {
		dst = appendSelectedSettings(dst, t.Settings, opts.Select)
	}
	return append(dst, '}')
}

// AppendError appends the OData JSON error body (docs/protocol.md §7.1), compact and on one
// line, with odata.error as the only top-level key (.NET requires it first):
// {"odata.error":{"code":"<code>","message":{"lang":"en-US","value":"<message>"}}}.
func AppendError(dst []byte, code, message string) []byte {
	dst = append(dst, `{"odata.error":{"code":`...)
	dst = AppendString(dst, code)
	dst = append(dst, `,"message":{"lang":"en-US","value":`...)
	dst = AppendString(dst, message)
	return append(dst, "}}}"...)
}

// comma separates members: every member but the first of an object is preceded by ','.
// No value ends in '{', so the last byte tells whether the object is still empty.
func comma(dst []byte) []byte {
	if dst[len(dst)-1] != '{' {
		dst = append(dst, ',')
	}
	return dst
}

func trimSlash(s string) string {
	if len(s) > 0 && s[len(s)-1] == '/' {
		return s[:len(s)-1]
	}
	return s
}

// selectableCustom reports a $select name that may be written as a null custom property:
// not a system property (written in its own place), not an odata.* key or annotation
// (which would collide with the metadata keys).
func selectableCustom(name string) bool {
	if name == "" || entity.IsReservedName(name) {
		return false
	}
	if len(name) >= 6 && name[:6] == "odata." {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '@' {
			return false
		}
	}
	return true
}

// appendEntityPath appends <table>(PartitionKey='<pk>',RowKey='<rk>') with the keys
// escaped as the Go SDK does (quotes doubled, then url.PathEscape), as JSON string content.
func appendEntityPath(dst []byte, table, pk, rk string) []byte {
	dst = AppendKeyEscaped(dst, table)
	dst = append(dst, `(PartitionKey='`...)
	dst = AppendKeyEscaped(dst, pk)
	dst = append(dst, `',RowKey='`...)
	dst = AppendKeyEscaped(dst, rk)
	return append(dst, `')`...)
}

// pathKeep marks the bytes url.PathEscape leaves alone: unreserved characters and the
// sub-delimiters allowed in a path segment ($ & + : = @). Its output never needs JSON
// escaping.
var pathKeep = func() (t [256]bool) {
	for c := 0; c < 256; c++ {
		t[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	for _, c := range "-_.~$&+:=@" {
		t[c] = true
	}
	return t
}()

// AppendKeyEscaped appends k as it stands in an entity's URL — every single quote doubled,
// then escaped exactly as url.PathEscape escapes a path segment — without building
// intermediate strings (odata.id and editLink here, Location in responses).
func AppendKeyEscaped(dst []byte, k string) []byte {
	const hexu = "0123456789ABCDEF"
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case pathKeep[c]:
			dst = append(dst, c)
		case c == '\'':
			dst = append(dst, "%27%27"...)
		default:
			dst = append(dst, '%', hexu[c>>4], hexu[c&15])
		}
	}
	return dst
}

// appendProperty appends "name":value, preceded by "name@odata.type":"Edm.X" when the
// value needs an annotation and annotate is set.
func appendProperty(dst []byte, name string, v *entity.Value, annotate bool) []byte {
	var annot string
	switch v.Type {
	case entity.Int64:
		annot = "Edm.Int64"
	case entity.DateTime:
		annot = "Edm.DateTime"
	case entity.GUID:
		if len(v.Bytes) == 16 {
			annot = "Edm.Guid"
		}
	case entity.Binary:
		annot = "Edm.Binary"
	case entity.Double:
		if math.IsNaN(v.Float) || math.IsInf(v.Float, 0) {
			annot = "Edm.Double"
		}
	}
	if annotate && annot != "" {
		dst = append(dst, '"')
		dst = appendStringContent(dst, name)
		dst = append(dst, `@odata.type":"`...)
		dst = append(dst, annot...)
		dst = append(dst, `",`...)
	}
	dst = AppendString(dst, name)
	dst = append(dst, ':')
	switch v.Type {
	case entity.String:
		return AppendString(dst, v.Str)
	case entity.Boolean:
		if v.Int != 0 {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case entity.Int32:
		return strconv.AppendInt(dst, v.Int, 10)
	case entity.Int64:
		dst = append(dst, '"')
		dst = strconv.AppendInt(dst, v.Int, 10)
		return append(dst, '"')
	case entity.Double:
		return appendDouble(dst, v.Float)
	case entity.DateTime:
		dst = append(dst, '"')
		dst = appendTicks(dst, v.Int)
		return append(dst, '"')
	case entity.GUID:
		if len(v.Bytes) != 16 {
			return append(dst, "null"...)
		}
		const hexl = "0123456789abcdef"
		dst = append(dst, '"')
		for i, c := range v.Bytes {
			if i == 4 || i == 6 || i == 8 || i == 10 {
				dst = append(dst, '-')
			}
			dst = append(dst, hexl[c>>4], hexl[c&15])
		}
		return append(dst, '"')
	case entity.Binary:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, v.Bytes)
		return append(dst, '"')
	}
	return append(dst, "null"...)
}

// appendDouble writes a Double so that every JSON reader sees a non-integer number:
// shortest round-trip digits, plain notation for 1e-6 ≤ |f| < 1e21 with ".0" added to
// integral values (5.0, -0.0, 1e20 as 100000000000000000000.0), exponent notation
// otherwise (1e+21, 5e-324). NaN and ±Inf become the strings "NaN", "Infinity",
// "-Infinity" (the caller annotates them).
func appendDouble(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(dst, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(dst, `"-Infinity"`...)
	}
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		dst = strconv.AppendFloat(dst, f, 'e', -1, 64)
		// e-07 → e-7, as encoding/json and JavaScript write it.
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
		return dst
	}
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, 'f', -1, 64)
	for _, c := range dst[start:] {
		if c == '.' {
			return dst
		}
	}
	return append(dst, ".0"...)
}

// appendString appends s as a JSON string.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendStringContent(dst, s)
	return append(dst, '"')
}

// strSafe marks the ASCII bytes written verbatim inside a JSON string.
var strSafe = strPlain

// appendStringContent appends s JSON-escaped, without quotes: '"' and '\\' escaped,
// \n \r \t short forms, other control characters as \u00XX, U+2028/U+2029 escaped (they
// end lines in JavaScript), invalid UTF-8 replaced by \ufffd (never produced by a valid
// entity, but the output must stay valid JSON). '<', '>' and '&' are not escaped: this is
// not HTML.
func appendStringContent(dst []byte, s string) []byte {
	const hexl = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		// Runs of plain bytes, the bulk of most strings, sixteen at a time.
		for i+16 <= len(s) && plain16(load8(s, i), load8(s, i+8)) {
			i += 16
		}
		if i+8 <= len(s) && plain8(load8(s, i)) {
			i += 8
			continue
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if strSafe[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexl[c>>4], hexl[c&15])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexl[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...)
}

// appendTicks is entity.AppendTicks (UTC, seven fraction digits, "Z"), which formats
// every valid value without time.Time.
func appendTicks(dst []byte, ticks int64) []byte {
	return entity.AppendTicks(dst, ticks)
}

// appendETagContent appends entity.AppendETag(version) as JSON string content:
// W/\"datetime'2024-05-01T10%3A00%3A01.0000001Z'\".
func appendETagContent(dst []byte, version int64) []byte {
	if version < entity.MinDateTime || version > entity.MaxDateTime {
		var buf [64]byte
		for _, c := range entity.AppendETag(buf[:0], version) {
			if c == '"' || c == '\\' {
				dst = append(dst, '\\')
			}
			dst = append(dst, c)
		}
		return dst
	}
	var buf [28]byte
	return appendETagTicks(dst, appendTicks(buf[:0], version))
}

// appendETagTicks is appendETagContent for a version already formatted by appendTicks.
func appendETagTicks(dst, ts []byte) []byte {
	dst = append(dst, `W/\"datetime'`...)
	dst = append(dst, ts[:13]...)
	dst = append(dst, "%3A"...)
	dst = append(dst, ts[14:16]...)
	dst = append(dst, "%3A"...)
	dst = append(dst, ts[17:]...)
	return append(dst, `'\"`...)
}
