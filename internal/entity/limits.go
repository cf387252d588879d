package entity

import (
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

// Service limits (docs/protocol.md §9). Sizes of strings are counted as the service counts them:
// in UTF-16 code units, two bytes each.
const (
	// MaxKeyUnits is the PartitionKey/RowKey limit: 1 KiB of UTF-16, 512 code units.
	MaxKeyUnits = 512
	// MaxStringUnits is the String property limit: 64 KiB of UTF-16, 32,768 code units.
	MaxStringUnits = 32 * 1024
	// MaxBinaryBytes is the Binary property limit.
	MaxBinaryBytes = 64 * 1024
	// MaxProperties is the number of custom properties (255 minus the three system ones).
	MaxProperties = 252
	// MaxPropertyNameLen is the longest property name, in characters.
	MaxPropertyNameLen = 255
	// MaxEntityBytes is the entity size limit under the service's size formula.
	MaxEntityBytes = 1 << 20
)

// utf16Len counts UTF-16 code units without allocating. ASCII, which most strings are
// entirely, is one unit a byte and is counted sixteen bytes at a time; the rest rune by
// rune (an invalid byte counts one, as range decodes it to U+FFFD).
func utf16Len(s string) int {
	i := 0
	for ; i+16 <= len(s); i += 16 {
		if (load64(s, i)|load64(s, i+8))&0x8080808080808080 != 0 {
			break
		}
	}
	n := i
	for _, r := range s[i:] {
		if utf16.RuneLen(r) == 2 {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// ValidateKey checks a PartitionKey or RowKey value: at most 1 KiB of UTF-16, none of
// / \ # ? and no control characters U+0000–U+001F or U+007F–U+009F. name is "PartitionKey"
// or "RowKey", for the message.
func ValidateKey(name, v string) error {
	if !utf8.ValidString(v) {
		return azerr.OutOfRange(name, v)
	}
	for _, r := range v {
		switch {
		case r == '/' || r == '\\' || r == '#' || r == '?':
			return azerr.OutOfRange(name, v)
		case r <= 0x1F || (r >= 0x7F && r <= 0x9F):
			return azerr.OutOfRange(name, v)
		}
	}
	if utf16Len(v) > MaxKeyUnits {
		return KeyTooLarge(name)
	}
	return nil
}

// KeyTooLarge is the error for a PartitionKey or RowKey over 1 KiB: the service's code
// for it (400 PropertyValueTooLarge, observed for a 2048-character key; docs/protocol.md §9),
// which every SDK handles, with a message that names the key and its limit instead of the
// 64 KB property-value text.
func KeyTooLarge(name string) *azerr.Error {
	return azerr.Newf(azerr.PropertyValueTooLarge,
		"The %s exceeds the maximum allowed size (1 KiB). It is UTF-16 encoded: at most %d characters (UTF-16 code units).",
		name, MaxKeyUnits)
}

// IsReservedName reports the system property names a client cannot set.
func IsReservedName(name string) bool {
	return name == "PartitionKey" || name == "RowKey" || name == "Timestamp"
}

// ValidatePropertyName checks a custom property name: C# identifier rules (a letter or
// underscore, then letters, digits or underscores) and at most 255 characters.
func ValidatePropertyName(name string) error {
	if ok, ascii := asciiIdentifier(name); ascii {
		// The usual name, decided without decoding runes or the Unicode tables.
		switch {
		case len(name) > MaxPropertyNameLen:
			return azerr.New(azerr.PropertyNameTooLong)
		case !ok:
			return azerr.New(azerr.PropertyNameInvalid)
		}
		return nil
	}
	if utf8.RuneCountInString(name) > MaxPropertyNameLen {
		return azerr.New(azerr.PropertyNameTooLong)
	}
	if name == "" || !utf8.ValidString(name) {
		return azerr.New(azerr.PropertyNameInvalid)
	}
	for i, r := range name {
		ok := r == '_' || unicode.IsLetter(r)
		if i > 0 {
			ok = ok || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Mc, r) || unicode.Is(unicode.Pc, r)
		}
		if !ok {
			return azerr.New(azerr.PropertyNameInvalid)
		}
	}
	return nil
}

// asciiIdentifier reports whether name is all ASCII and, if so, whether it is an
// identifier under ValidatePropertyName's rules, which for ASCII are [A-Za-z_][A-Za-z0-9_]*
// ('_' is the only ASCII connector punctuation, and no ASCII character is a mark).
func asciiIdentifier(name string) (ok, ascii bool) {
	ok = name != ""
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= utf8.RuneSelf:
			return false, false
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_':
		case '0' <= c && c <= '9' && i > 0:
		default:
			ok = false
		}
	}
	return ok, true
}

// ValidateValue checks one value against its type's limits.
func ValidateValue(name string, v Value) error {
	switch v.Type {
	case String:
		if !utf8.ValidString(v.Str) {
			return azerr.New(azerr.InvalidInput)
		}
		if len(v.Str) > MaxStringUnits && utf16Len(v.Str) > MaxStringUnits {
			return azerr.New(azerr.PropertyValueTooLarge)
		}
	case Binary:
		if len(v.Bytes) > MaxBinaryBytes {
			return azerr.New(azerr.PropertyValueTooLarge)
		}
	case DateTime:
		if v.Int < MinDateTime || v.Int > MaxDateTime {
			return azerr.OutOfRange(name, TicksToTime(v.Int).Format("01/02/2006 15:04:05"))
		}
	case GUID:
		if len(v.Bytes) != 16 {
			return azerr.New(azerr.InvalidValueType)
		}
	case Int32:
		if v.Int < -1<<31 || v.Int > 1<<31-1 {
			return azerr.New(azerr.InvalidValueType)
		}
	case Boolean, Int64, Double:
	default:
		return azerr.New(azerr.InvalidValueType)
	}
	return nil
}

// Size is the entity's size under the service's formula:
// 4 + 2·(len(PK)+len(RK)) + Σ(8 + 2·len(name) + size(value)).
func Size(e *Entity) int {
	n := 4 + 2*(utf16Len(e.PartitionKey)+utf16Len(e.RowKey))
	for _, p := range e.Props {
		n += 8 + 2*utf16Len(p.Name) + valueSize(p.Value)
	}
	return n
}

func valueSize(v Value) int {
	switch v.Type {
	case String:
		return 2*utf16Len(v.Str) + 4
	case Binary:
		return len(v.Bytes) + 4
	case Boolean:
		return 1
	case Int32:
		return 4
	case GUID:
		return 16
	default: // Int64, Double, DateTime
		return 8
	}
}

// Validate checks a whole entity: keys, property count, property names and values, and
// size. It is what every write path runs, including the result of a merge. The count is
// checked before the per-property checks, so an entity with too many properties costs no
// more than reading its keys. Work is linear in the entity's size.
func Validate(e *Entity) error {
	if err := ValidateKey("PartitionKey", e.PartitionKey); err != nil {
		return err
	}
	if err := ValidateKey("RowKey", e.RowKey); err != nil {
		return err
	}
	if len(e.Props) > MaxProperties {
		return azerr.New(azerr.TooManyProperties)
	}
	if err := ValidateProps(e.Props); err != nil {
		return err
	}
	return ValidateShape(e)
}

// smallProps is the property count up to which ValidateProps finds repeated names by
// comparing with every earlier name; above it, a set keeps the check linear.
const smallProps = 16

// ValidateProps checks each property's name and value, and that no name repeats, in
// property order: the first property that fails decides the error. Work is linear in the
// number and size of the properties.
func ValidateProps(props []Property) error {
	var seen map[string]struct{}
	if len(props) > smallProps {
		seen = make(map[string]struct{}, len(props))
	}
	for i, p := range props {
		if err := ValidatePropertyName(p.Name); err != nil {
			return err
		}
		if IsReservedName(p.Name) {
			return azerr.New(azerr.PropertyNameInvalid)
		}
		if err := ValidateValue(p.Name, p.Value); err != nil {
			return err
		}
		if seen != nil {
			if _, dup := seen[p.Name]; dup {
				return azerr.New(azerr.DuplicatePropertiesSpecified)
			}
			seen[p.Name] = struct{}{}
			continue
		}
		for j := 0; j < i; j++ {
			if props[j].Name == p.Name {
				return azerr.New(azerr.DuplicatePropertiesSpecified)
			}
		}
	}
	return nil
}

// ValidateShape checks the limits that depend on the whole entity: the number of
// properties and the total size. A merge must pass it after combining properties.
func ValidateShape(e *Entity) error {
	if len(e.Props) > MaxProperties {
		return azerr.New(azerr.TooManyProperties)
	}
	if sizeBound(e) > MaxEntityBytes && Size(e) > MaxEntityBytes {
		return azerr.New(azerr.EntityTooLarge)
	}
	return nil
}

// sizeBound is an upper bound of Size(e) that reads no string's bytes (a string has at
// most one UTF-16 unit a byte): for all but the largest entities it proves the size
// within the limit without counting, which for a 1 KiB entity was a third of validating it.
func sizeBound(e *Entity) int {
	n := 4 + 2*(len(e.PartitionKey)+len(e.RowKey))
	for i := range e.Props {
		p := &e.Props[i]
		n += 8 + 2*len(p.Name)
		if p.Value.Type == String {
			n += 2*len(p.Value.Str) + 4
		} else {
			n += valueSize(p.Value)
		}
	}
	return n
}
