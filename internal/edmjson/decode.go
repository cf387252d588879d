package edmjson

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
)

// Keys reports which key properties a request body carried with a (string) value. A key
// given as JSON null counts as absent.
//
// DecodeEntity does not require the keys, because only Insert Entity takes them from the
// body; Update, Merge and the upserts address the entity by URL and may omit them. Insert
// (and batch inserts) call Require.
type Keys struct {
	PartitionKey bool
	RowKey       bool
}

// Complete reports whether both keys were present.
func (k Keys) Complete() bool { return k.PartitionKey && k.RowKey }

// Require returns 400 PropertiesNeedValue unless both keys were present — the service's
// answer to an insert body with a missing or null PartitionKey or RowKey (docs/protocol.md §3.6).
func (k Keys) Require() error {
	if k.Complete() {
		return nil
	}
	return azerr.New(azerr.PropertiesNeedValue)
}

// annotSuffix marks a type annotation key: "Name@odata.type".
const annotSuffix = "@odata.type"

// DecodeEntity decodes an entity request body (Insert, Update, Merge, the upserts and
// batch operations): one flat JSON object whose values are strings, numbers, booleans or
// null. It implements docs/protocol.md §4.2–4.3 and §3.6:
//
//   - Keys starting with "odata." (odata.etag, odata.metadata, odata.type, ...),
//     "Timestamp" and "Timestamp@odata.type" are ignored: JS re-sends them from queried
//     entities.
//   - "Name@odata.type" gives Name's type and may come before or after the value (Go's
//     encoding/json sorts keys, so it comes after). Values are converted per §4.2,
//     including the string forms JS and Python send for Int32/Double/Boolean and the JSON
//     integers .NET sends for Edm.Double. An annotation with a null value is ignored; an
//     annotation whose property is absent or null does nothing (beyond being checked):
//     a typed null is an absent property, as on the service (Microsoft's Java SDK sends
//     null Date, UUID, Long and byte[] properties that way and reads them back absent;
//     the JS SDK sends invalid Dates and {value: NaN, type} that way).
//   - Unannotated values are inferred: string → String, true/false → Boolean, a number
//     without '.', 'e' or 'E' → Int32 when it fits and Double otherwise, any other number
//     → Double.
//   - A property whose value is null is not stored (as if omitted).
//   - PartitionKey and RowKey must be strings (annotation, if any, Edm.String). They are
//     returned as given: the doubled quotes the Go SDK writes into them are not repaired.
//
// Custom properties keep the order of their values in the body. Property names and
// values are not checked against the service limits here; run entity.Validate on the
// result. DateTime values are range-checked here (OutOfRangeInput, as entity.ValidateValue
// does) so that every entity this returns can be encoded and decoded again unchanged.
//
// The custom-property count is checked while scanning: the member that takes it past
// entity.MaxProperties ends the decode with 400 TooManyProperties, before the rest of the
// body is read and before anything that costs more than a pass over the body. What counts
// is what would be stored: a member with a non-null value whose key is not PartitionKey,
// RowKey, Timestamp, an "odata." key or a "@odata.type" annotation. A body over the limit
// may therefore get TooManyProperties where a smaller one with the same defect further on
// would get another 400.
//
// Errors are *azerr.Error: 400 InvalidInput for malformed JSON (syntax, nesting, trailing
// data, invalid UTF-8, bad escapes, lone surrogate escapes, an empty body), unsupported
// or misplaced type annotations and values that do not convert to their type; 400
// DuplicatePropertiesSpecified when any key (annotations and ignored keys included)
// occurs twice; 400 OutOfRangeInput for a DateTime outside 1601..9999; 400
// TooManyProperties as above.
//
// Strings in the result share a single allocation, and Binary/Guid bytes another; the
// result does not alias body. Work is linear in the body size.
func DecodeEntity(body []byte) (entity.Entity, Keys, error) {
	var stack [32]member
	d := decoder{b: body, maxProps: entity.MaxProperties}
	ms, err := d.object(stack[:0])
	if err != nil {
		return entity.Entity{}, Keys{}, err
	}
	return resolve(ms)
}

// kind is the JSON type of a member's value.
type kind uint8

const (
	kNull   kind = iota
	kTrue        // true
	kFalse       // false
	kString      // val holds the unescaped content
	kInt         // a number without fraction or exponent; val holds the literal
	kFloat       // any other number; val holds the literal
	kRaw         // an array, where the decoder allows them (rawArrays); val holds its JSON
)

// role is what a member means for the entity.
type role uint8

const (
	roleIgnore role = iota
	roleProp
	rolePK
	roleRK
	roleAnnot
)

// member is one key/value pair of the body, before interpretation. key and val point into
// the body unless the JSON string had escapes, in which case they are a fresh copy.
type member struct {
	key  []byte
	val  []byte
	kind kind
	role role
	typ  entity.Type // for a value member: its annotated type (0 = infer)
	sig  uint32      // keySig(key), to skip most byte comparisons
}

// keySig summarises a key (length and three of its bytes) so that the linear duplicate
// and annotation searches compare bytes only when the summaries match.
func keySig(k []byte) uint32 {
	if len(k) == 0 {
		return 0
	}
	return uint32(len(k)&0xff) | uint32(k[0])<<8 | uint32(k[len(k)/2])<<16 | uint32(k[len(k)-1])<<24
}

func invalidf(format string, args ...any) error {
	return azerr.New(azerr.InvalidInput).WithDetail(fmt.Sprintf(format, args...))
}

// smallN is the member count up to which duplicate and annotation lookups are done by
// linear search; above it a keyIndex keeps the decoder linear on hostile 1 MiB+ bodies.
const smallN = 32

func resolve(ms []member) (entity.Entity, Keys, error) {
	var e entity.Entity
	var keys Keys

	for i := range ms {
		ms[i].sig = keySig(ms[i].key)
	}

	// Duplicates, over every key (as OData readers do).
	var index keyIndex
	if len(ms) <= smallN {
		for i := 1; i < len(ms); i++ {
			for j := 0; j < i; j++ {
				if ms[i].sig == ms[j].sig && bytes.Equal(ms[i].key, ms[j].key) {
					return e, keys, dupErr(ms[i].key)
				}
			}
		}
	} else if dup := index.build(ms); dup >= 0 {
		return e, keys, dupErr(ms[dup].key)
	}

	// Bind annotations to their values.
	for i := range ms {
		a := &ms[i]
		if a.role != roleAnnot || a.kind == kNull {
			continue
		}
		base := a.key[:len(a.key)-len(annotSuffix)]
		if a.kind != kString {
			return e, keys, invalidf("annotation %q must be a string", a.key)
		}
		t, ok := parseEDMType(a.val)
		if !ok {
			return e, keys, invalidf("property %q: unsupported type annotation %q", base, a.val)
		}
		if (string(base) == "PartitionKey" || string(base) == "RowKey") && t != entity.String {
			return e, keys, invalidf("%s must be Edm.String, not %s", base, t.EDMName())
		}
		j := -1
		if index.slots != nil {
			j = index.find(ms, base)
		} else {
			sig := keySig(base)
			for k := range ms {
				if ms[k].sig == sig && bytes.Equal(ms[k].key, base) {
					j = k
					break
				}
			}
		}
		if j >= 0 && ms[j].role != roleAnnot && ms[j].role != roleIgnore {
			ms[j].typ = t
		}
	}

	// Size the two arenas and the property slice, checking key types on the way.
	strTotal, byteTotal, nProps := 0, 0, 0
	for i := range ms {
		m := &ms[i]
		if m.kind == kNull {
			continue
		}
		switch m.role {
		case rolePK, roleRK:
			if m.kind != kString {
				return e, keys, invalidf("%s must be a string", m.key)
			}
			strTotal += len(m.val)
		case roleProp:
			nProps++
			strTotal += len(m.key)
			if m.kind == kString {
				switch m.typ {
				case 0, entity.String:
					strTotal += len(m.val)
				case entity.GUID:
					byteTotal += 16
				case entity.Binary:
					byteTotal += base64.RawStdEncoding.DecodedLen(len(m.val))
				}
			}
		}
	}

	var sa strArena
	sa.sb.Grow(strTotal)
	var ba []byte
	if byteTotal > 0 {
		ba = make([]byte, 0, byteTotal)
	}
	if nProps > 0 {
		e.Props = make([]entity.Property, 0, nProps)
	}
	for i := range ms {
		m := &ms[i]
		if m.kind == kNull {
			continue
		}
		switch m.role {
		case rolePK:
			e.PartitionKey = sa.add(m.val)
			keys.PartitionKey = true
		case roleRK:
			e.RowKey = sa.add(m.val)
			keys.RowKey = true
		case roleProp:
			v, err := convert(m, &sa, &ba)
			if err != nil {
				return entity.Entity{}, Keys{}, err
			}
			// Field by field into the fresh (zeroed) slice: a whole Property stored into the
			// heap is a bulk write barrier while the collector runs, which with a hundred
			// entities a batch it often is.
			e.Props = e.Props[:len(e.Props)+1]
			p := &e.Props[len(e.Props)-1]
			p.Name = sa.add(m.key)
			p.Value.Type, p.Value.Int, p.Value.Float = v.Type, v.Int, v.Float
			if v.Str != "" {
				p.Value.Str = v.Str
			}
			if v.Bytes != nil {
				p.Value.Bytes = v.Bytes
			}
		}
	}
	return e, keys, nil
}

// keyIndex finds members by key in constant time: an open-addressing hash table of
// member positions (linear probing, at most half full). Unlike a map[string]int it
// allocates nothing per key, which matters for a 4 MiB body of a few hundred thousand
// short keys.
type keyIndex struct {
	slots []int32 // member index + 1; 0 marks an empty slot
	mask  uint64
}

// hashSeed randomises key hashes per process, so no body can be built to collide.
var hashSeed = maphash.MakeSeed()

// build indexes every member's key and returns the index of the first member whose key
// repeats an earlier one, or -1.
func (x *keyIndex) build(ms []member) int {
	n := uint64(2)
	for n < 2*uint64(len(ms)) {
		n <<= 1
	}
	x.slots = make([]int32, n)
	x.mask = n - 1
	for i := range ms {
		k := ms[i].key
		for h := maphash.Bytes(hashSeed, k) & x.mask; ; h = (h + 1) & x.mask {
			j := x.slots[h]
			if j == 0 {
				x.slots[h] = int32(i + 1)
				break
			}
			if m := &ms[j-1]; m.sig == ms[i].sig && bytes.Equal(m.key, k) {
				return i
			}
		}
	}
	return -1
}

// find returns the index of the member whose key is k, or -1.
func (x *keyIndex) find(ms []member, k []byte) int {
	sig := keySig(k)
	for h := maphash.Bytes(hashSeed, k) & x.mask; ; h = (h + 1) & x.mask {
		j := x.slots[h]
		if j == 0 {
			return -1
		}
		if m := &ms[j-1]; m.sig == sig && bytes.Equal(m.key, k) {
			return int(j - 1)
		}
	}
}

// classify says what a key means for the entity.
func classify(k []byte) role {
	switch {
	case bytes.HasPrefix(k, []byte("odata.")):
		return roleIgnore
	case string(k) == "PartitionKey":
		return rolePK
	case string(k) == "RowKey":
		return roleRK
	case string(k) == "Timestamp" || string(k) == "Timestamp"+annotSuffix:
		return roleIgnore
	case bytes.HasSuffix(k, []byte(annotSuffix)):
		return roleAnnot
	}
	return roleProp
}

func dupErr(key []byte) error {
	return azerr.New(azerr.DuplicatePropertiesSpecified).WithDetail(fmt.Sprintf("%q occurs more than once", key))
}

// strArena hands out strings that all live in one allocation. strings.Builder never
// modifies bytes it has written, so a substring of an earlier String() stays valid.
type strArena struct{ sb strings.Builder }

func (a *strArena) add(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	off := a.sb.Len()
	a.sb.Write(b)
	return a.sb.String()[off:]
}

// edmNames lists the annotation values accepted on input, indexed by entity.Type.
var edmNames = [...]string{
	entity.String:   "Edm.String",
	entity.Boolean:  "Edm.Boolean",
	entity.Int32:    "Edm.Int32",
	entity.Int64:    "Edm.Int64",
	entity.Double:   "Edm.Double",
	entity.DateTime: "Edm.DateTime",
	entity.GUID:     "Edm.Guid",
	entity.Binary:   "Edm.Binary",
}

// parseEDMType maps an annotation value to its type; the names are case-sensitive, as in
// OData. Edm.DateTimeOffset, Edm.Decimal and anything else are not table types.
func parseEDMType(b []byte) (entity.Type, bool) {
	for t := entity.String; t <= entity.Binary; t++ {
		if string(b) == edmNames[t] {
			return t, true
		}
	}
	return 0, false
}

// convert turns one property member into a typed value (docs/protocol.md §4.2, inputs column).
func convert(m *member, sa *strArena, ba *[]byte) (entity.Value, error) {
	bad := func() (entity.Value, error) {
		what := "a " + kindName(m.kind)
		if m.kind == kString || m.kind == kInt || m.kind == kFloat {
			what = fmt.Sprintf("%q", m.val)
		}
		return entity.Value{}, invalidf("property %q: %s is not a valid %s value", m.key, what, typeName(m.typ))
	}
	switch m.typ {
	case 0: // infer
		switch m.kind {
		case kString:
			return entity.Value{Type: entity.String, Str: sa.add(m.val)}, nil
		case kTrue, kFalse:
			return entity.BoolValue(m.kind == kTrue), nil
		case kInt:
			if v, ok := parseInt(m.val, 32); ok {
				return entity.Value{Type: entity.Int32, Int: v}, nil
			}
			// An integer beyond Int32 is stored as Double, as the service does.
			fallthrough
		case kFloat:
			f, ok := parseFloat(m.val)
			if !ok {
				return bad()
			}
			return entity.DoubleValue(f), nil
		}
	case entity.String:
		if m.kind == kString {
			return entity.Value{Type: entity.String, Str: sa.add(m.val)}, nil
		}
	case entity.Boolean:
		switch m.kind {
		case kTrue, kFalse:
			return entity.BoolValue(m.kind == kTrue), nil
		case kString:
			switch {
			case bytes.EqualFold(m.val, []byte("true")):
				return entity.BoolValue(true), nil
			case bytes.EqualFold(m.val, []byte("false")):
				return entity.BoolValue(false), nil
			}
		}
	case entity.Int32, entity.Int64:
		bits := 32
		if m.typ == entity.Int64 {
			bits = 64
		}
		if m.kind == kInt || m.kind == kString {
			if v, ok := parseInt(m.val, bits); ok {
				return entity.Value{Type: m.typ, Int: v}, nil
			}
		}
	case entity.Double:
		switch m.kind {
		case kInt, kFloat:
			if f, ok := parseFloat(m.val); ok {
				return entity.DoubleValue(f), nil
			}
		case kString:
			switch string(m.val) {
			case "NaN":
				return entity.DoubleValue(math.NaN()), nil
			case "Infinity", "+Infinity":
				return entity.DoubleValue(math.Inf(1)), nil
			case "-Infinity":
				return entity.DoubleValue(math.Inf(-1)), nil
			}
			if looseNumber(m.val) {
				if f, ok := parseFloat(m.val); ok {
					return entity.DoubleValue(f), nil
				}
			}
		}
	case entity.DateTime:
		if m.kind == kString {
			ticks, ok := parseDateTimeFast(m.val)
			if !ok {
				var err error
				if ticks, err = entity.ParseDateTime(string(m.val)); errors.Is(err, entity.ErrFractionDigits) {
					return entity.Value{}, invalidf("property %q: %q is not a valid Edm.DateTime value: %v", m.key, m.val, entity.ErrFractionDigits)
				} else if err != nil || len(m.val) == 0 {
					return bad()
				}
			}
			v := entity.Value{Type: entity.DateTime, Int: ticks}
			if ticks < entity.MinDateTime || ticks > entity.MaxDateTime {
				return entity.Value{}, entity.ValidateValue(string(m.key), v)
			}
			return v, nil
		}
	case entity.GUID:
		if m.kind == kString {
			b := *ba
			n := len(b)
			b = b[:n+16]
			if parseGUID(b[n:], m.val) {
				*ba = b
				return entity.Value{Type: entity.GUID, Bytes: b[n : n+16 : n+16]}, nil
			}
		}
	case entity.Binary:
		if m.kind == kString {
			src := m.val
			for len(src) > 0 && src[len(src)-1] == '=' {
				src = src[:len(src)-1]
			}
			b := *ba
			n := len(b)
			k, err := base64.RawStdEncoding.Decode(b[n:cap(b)], src)
			if err == nil {
				*ba = b[:n+k]
				return entity.Value{Type: entity.Binary, Bytes: b[n : n+k : n+k]}, nil
			}
		}
	}
	return bad()
}

func kindName(k kind) string {
	switch k {
	case kTrue:
		return "true"
	case kFalse:
		return "false"
	case kString:
		return "string"
	case kInt, kFloat:
		return "number"
	}
	return "null"
}

func typeName(t entity.Type) string {
	if t == 0 {
		return "JSON"
	}
	return t.EDMName()
}

// parseInt parses an optionally signed decimal integer that fits in bits (32 or 64).
// It accepts exactly what strconv.ParseInt(s, 10, bits) accepts, without allocating.
func parseInt(b []byte, bits int) (int64, bool) {
	neg := false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg = b[0] == '-'
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, false
	}
	limit := uint64(1)<<(bits-1) - 1
	if neg {
		limit++
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if u > (limit-uint64(c-'0'))/10 {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	if neg {
		return -int64(u), true
	}
	return int64(u), true
}

// parseFloat parses a number literal already known to be well formed, rejecting values
// that overflow the double range (the service answers 400 for 1.797693134862316e308).
// Underflow rounds to zero or a subnormal, as any JSON reader does.
func parseFloat(b []byte) (float64, bool) {
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil { // syntax, or ErrRange with ±Inf; underflow is not an error
		return 0, false
	}
	return f, true
}

// looseNumber reports whether a string-carried Double looks like a decimal number:
// optional sign, digits with an optional '.', at least one digit, optional exponent.
// It keeps strconv's Go-only forms (hex floats, underscores, "inf") out.
func looseNumber(b []byte) bool {
	i := 0
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		i++
	}
	digits := 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
		digits++
	}
	if i < len(b) && b[i] == '.' {
		i++
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			digits++
		}
	}
	if digits == 0 {
		return false
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	return i == len(b)
}

// parseGUID parses the hyphenated 36-character form, optionally in braces, any hex case,
// into dst (16 bytes). It accepts what entity.ParseGUID accepts, except that it insists on
// hex digits at every non-hyphen position.
func parseGUID(dst, s []byte) bool {
	if len(s) == 38 && s[0] == '{' && s[37] == '}' {
		s = s[1:37]
	}
	if len(s) != 36 {
		return false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if s[i] != '-' {
				return false
			}
			i++
			continue
		}
		hi, lo := unhex(s[i]), unhex(s[i+1])
		if hi > 15 || lo > 15 {
			return false
		}
		dst[j] = hi<<4 | lo
		j++
		i += 2
	}
	return true
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10
	}
	return 255
}

// parseDateTimeFast parses the form every SDK sends, YYYY-MM-DDTHH:MM:SS[.f{1,7}]Z, with
// the same result as entity.ParseDateTime and no allocation. Anything else (offsets, no
// zone, 'z', more digits, out-of-range fields) returns false and goes to
// entity.ParseDateTime, which decides.
func parseDateTimeFast(b []byte) (int64, bool) {
	n := len(b)
	if n < 20 || b[n-1] != 'Z' || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' {
		return 0, false
	}
	var frac int64
	switch {
	case n == 20:
	case b[19] == '.' && n >= 22 && n <= 28:
		for _, c := range b[20 : n-1] {
			if c < '0' || c > '9' {
				return 0, false
			}
			frac = frac*10 + int64(c-'0')
		}
		for k := n - 21; k < 7; k++ {
			frac *= 10
		}
	default:
		return 0, false
	}
	y, ok1 := digits(b[0:4])
	mo, ok2 := digits(b[5:7])
	d, ok3 := digits(b[8:10])
	h, ok4 := digits(b[11:13])
	mi, ok5 := digits(b[14:16])
	s, ok6 := digits(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || s > 59 {
		return 0, false
	}
	dim := [13]int64{0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}[mo]
	if mo == 2 && y%4 == 0 && (y%100 != 0 || y%400 == 0) {
		dim = 29
	}
	if d > dim {
		return 0, false
	}
	secs := daysFromCivil(y, mo, d)*86400 + h*3600 + mi*60 + s
	return secs*10_000_000 + frac, true
}

func digits(b []byte) (int64, bool) {
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

// daysFromCivil returns the days since 1970-01-01 of a proleptic Gregorian date
// (H. Hinnant's algorithm; exact for every year time.Parse accepts).
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// ---- the scanner ----

// decoder is a single-pass scanner for one flat JSON object (RFC 8259 syntax).
type decoder struct {
	b []byte
	i int
	// rawArrays lets a member's value be an array, kept as its JSON (kRaw): the
	// table-settings bodies' Indexes. Entities stay flat.
	rawArrays bool
	// base is the offset of b in the whole body, for errors (a bulk body scanned in
	// pieces; 0 otherwise).
	base int
	// maxProps, when positive, is the most members with role roleProp and a non-null
	// value the object may have; the next one fails the scan with TooManyProperties.
	maxProps int
	props    int
}

// errSyntax is the InvalidInput error for malformed JSON, with the offset as detail.
func (d *decoder) errSyntax(what string) error {
	return invalidf("malformed JSON at offset %d: %s", d.base+d.i, what)
}

func (d *decoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) peek() byte {
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// object scans the whole body and appends its members to ms.
func (d *decoder) object(ms []member) ([]member, error) {
	// A UTF-8 byte order mark is tolerated: some HTTP stacks prepend one.
	if bytes.HasPrefix(d.b, []byte("\xEF\xBB\xBF")) {
		d.i = 3
	}
	d.ws()
	if d.i >= len(d.b) {
		return nil, invalidf("empty request body")
	}
	if d.b[d.i] != '{' {
		return nil, d.errSyntax("expected a JSON object")
	}
	d.i++
	d.ws()
	if d.peek() == '}' {
		d.i++
	} else {
		for {
			key, err := d.key()
			if err != nil {
				return nil, err
			}
			m := member{key: key}
			switch c := d.peek(); {
			case c == '"':
				m.kind = kString
				if m.val, err = d.str(); err != nil {
					return nil, err
				}
			case c == '-' || (c >= '0' && c <= '9'):
				var isInt bool
				if m.val, isInt, err = d.number(); err != nil {
					return nil, err
				}
				m.kind = kFloat
				if isInt {
					m.kind = kInt
				}
			case c == 't' && bytes.HasPrefix(d.b[d.i:], []byte("true")):
				m.kind = kTrue
				d.i += 4
			case c == 'f' && bytes.HasPrefix(d.b[d.i:], []byte("false")):
				m.kind = kFalse
				d.i += 5
			case c == 'n' && bytes.HasPrefix(d.b[d.i:], []byte("null")):
				m.kind = kNull
				d.i += 4
			case c == '[' && d.rawArrays:
				m.kind = kRaw
				if m.val, err = d.raw(); err != nil {
					return nil, err
				}
			case c == '{' || c == '[':
				return nil, invalidf("property %q: nested objects and arrays are not allowed", key)
			default:
				return nil, d.errSyntax("expected a value")
			}
			m.role = classify(key)
			if d.maxProps > 0 && m.role == roleProp && m.kind != kNull {
				if d.props++; d.props > d.maxProps {
					return nil, azerr.New(azerr.TooManyProperties).WithDetail(
						fmt.Sprintf("more than %d properties besides PartitionKey, RowKey and Timestamp", d.maxProps))
				}
			}
			if len(ms) == cap(ms) {
				// Double, where append would grow a large slice by a quarter: a body of
				// many short members would otherwise allocate about five times the
				// members' final size along the way.
				ms = slices.Grow(ms, max(len(ms), 8))
			}
			ms = append(ms, m)
			d.ws()
			c := d.peek()
			d.i++
			if c == ',' {
				d.ws()
				continue
			}
			if c == '}' {
				break
			}
			d.i--
			return nil, d.errSyntax("expected ',' or '}'")
		}
	}
	d.ws()
	if d.i != len(d.b) {
		return nil, d.errSyntax("data after the JSON object")
	}
	return ms, nil
}

// strPlain marks the bytes a JSON string may contain verbatim (ASCII only; bytes ≥ 0x80
// are validated as UTF-8 separately).
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str scans a JSON string at d.i and returns its content: a sub-slice of the body when
// there are no escapes, a fresh buffer otherwise. Invalid UTF-8, raw control characters,
// bad escapes and unpaired surrogate escapes are InvalidInput: Go strings are UTF-8 and
// the service's limits count UTF-16, so there is no faithful way to store them.
// raw reads one JSON array or object at d.i and returns its bytes, which must be valid
// JSON (checked with encoding/json once the brackets balance).
func (d *decoder) raw() ([]byte, error) {
	start, depth := d.i, 0
	for d.i < len(d.b) {
		switch c := d.b[d.i]; c {
		case '"':
			d.i++
			for d.i < len(d.b) && d.b[d.i] != '"' {
				if d.b[d.i] == '\\' {
					d.i++
				}
				d.i++
			}
		case '[', '{':
			depth++
		case ']', '}':
			if depth--; depth == 0 {
				d.i++
				if v := d.b[start:d.i]; json.Valid(v) {
					return v, nil
				}
				return nil, d.errSyntax("invalid JSON array")
			}
		}
		d.i++
	}
	return nil, d.errSyntax("unterminated array")
}

func (d *decoder) str() ([]byte, error) {
	b := d.b
	start := d.i + 1
	i := start
	if q := bytes.IndexByte(b[start:], '"'); q >= 0 && plainRun(b[start:start+q]) {
		// The usual string: no escape, nothing but printable ASCII before its quote.
		d.i = start + q + 1
		return b[start : start+q], nil
	}
	for i < len(b) {
		for i+16 <= len(b) && plain16(load8(b, i), load8(b, i+8)) {
			i += 16
		}
		if i+8 <= len(b) && plain8(load8(b, i)) {
			i += 8
			continue
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		if strPlain[c] {
			i++
			continue
		}
		switch {
		case c == '"':
			d.i = i + 1
			return b[start:i], nil
		case c == '\\':
			return d.strEscaped(start, i)
		case c < 0x20:
			d.i = i
			return nil, d.errSyntax("control character in string")
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				d.i = i
				return nil, d.errSyntax("invalid UTF-8")
			}
			i += size
		}
	}
	d.i = i
	return nil, d.errSyntax("unterminated string")
}

// plainRun reports whether every byte of s is plain (strPlain), given that s holds no
// '"'. str finds a string's end with IndexByte and then checks the bytes before it with
// this: memchr speed for the quote and, in a long string, for a backslash, and three
// operations per eight bytes for the rest, where plain16 spends eleven on all four
// conditions and the byte loop one branch a byte (a tenth of a batch's decoding went to
// the short names and values).
func plainRun(s []byte) bool {
	if len(s) < 32 {
		for _, c := range s {
			if !strPlain[c] {
				return false
			}
		}
		return true
	}
	return bytes.IndexByte(s, '\\') < 0 && printableASCII(s)
}

// printableASCII reports whether every byte of s is in 0x20..0x7f.
func printableASCII(s []byte) bool {
	var m uint64
	j := 0
	for ; j+32 <= len(s); j += 32 {
		x0, x1, x2, x3 := load8(s, j), load8(s, j+8), load8(s, j+16), load8(s, j+24)
		// A byte below 0x20 borrows into its top bit, one at or above 0x80 has it set; a
		// borrow from a lower byte may mark a byte that is fine, but only after a byte
		// that is not, so the test is exact as to whether any byte fails.
		m |= (x0 - 0x20*lsb) | x0 | (x1 - 0x20*lsb) | x1 | (x2 - 0x20*lsb) | x2 | (x3 - 0x20*lsb) | x3
	}
	for ; j+8 <= len(s); j += 8 {
		x := load8(s, j)
		m |= (x - 0x20*lsb) | x
	}
	if m&msb != 0 {
		return false
	}
	for ; j < len(s); j++ {
		if s[j] < 0x20 || s[j] >= 0x80 {
			return false
		}
	}
	return true
}

// strEscaped continues str from the first backslash at i.
func (d *decoder) strEscaped(start, i int) ([]byte, error) {
	b := d.b
	out := make([]byte, 0, i-start+32)
	out = append(out, b[start:i]...)
	for i < len(b) {
		c := b[i]
		switch {
		case strPlain[c]:
			out = append(out, c)
			i++
		case c == '"':
			d.i = i + 1
			return out, nil
		case c == '\\':
			if i+1 >= len(b) {
				d.i = i
				return nil, d.errSyntax("unterminated string")
			}
			switch e := b[i+1]; e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := hex4(b[i+2:])
				if !ok {
					d.i = i
					return nil, d.errSyntax("bad \\u escape")
				}
				i += 6
				switch {
				case r >= 0xD800 && r < 0xDC00:
					lo, ok := rune(0), false
					if i+1 < len(b) && b[i] == '\\' && b[i+1] == 'u' {
						lo, ok = hex4(b[i+2:])
					}
					if !ok || lo < 0xDC00 || lo > 0xDFFF {
						d.i = i
						return nil, d.errSyntax("unpaired surrogate escape")
					}
					i += 6
					r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				case r >= 0xDC00 && r <= 0xDFFF:
					d.i = i
					return nil, d.errSyntax("unpaired surrogate escape")
				}
				out = utf8.AppendRune(out, r)
				continue
			default:
				d.i = i
				return nil, d.errSyntax("bad escape")
			}
			i += 2
		case c < 0x20:
			d.i = i
			return nil, d.errSyntax("control character in string")
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				d.i = i
				return nil, d.errSyntax("invalid UTF-8")
			}
			out = append(out, b[i:i+size]...)
			i += size
		}
	}
	d.i = i
	return nil, d.errSyntax("unterminated string")
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		h := unhex(c)
		if h > 15 {
			return 0, false
		}
		r = r<<4 | rune(h)
	}
	return r, true
}

// number scans a JSON number (RFC 8259 grammar: no leading zeros, no '+', no bare '.').
func (d *decoder) number() (lit []byte, isInt bool, err error) {
	b := d.b
	start := d.i
	i := start
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		d.i = i
		return nil, false, d.errSyntax("bad number")
	}
	isInt = true
	if i < len(b) && b[i] == '.' {
		i++
		isInt = false
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			d.i = i
			return nil, false, d.errSyntax("bad number")
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		isInt = false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			d.i = i
			return nil, false, d.errSyntax("bad number")
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	d.i = i
	return b[start:i], isInt, nil
}
