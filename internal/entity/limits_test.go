package entity

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

func TestUTF16LenFast(t *testing.T) {
	for _, s := range []string{
		"", "a", "abcdefg", "abcdefgh", "abcdefghi", "é", "abcdefgé", "abcdefghé", "😀", "abcdefgh😀xyz",
		"\xff", "abcdefgh\xffabc", "日本語のテキスト", "0123456789abcdef0123456789abcdef€",
	} {
		if got, want := utf16Len(s), len(utf16.Encode([]rune(s))); got != want {
			t.Errorf("utf16Len(%q) = %d, want %d", s, got, want)
		}
	}
}

// FuzzUTF16Len checks the ASCII fast path against the standard library's encoding.
func FuzzUTF16Len(f *testing.F) {
	for _, s := range []string{"", "abcdefgh😀", "\xffabcdefghijklmnop", "ascii only, more than eight bytes"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := utf16Len(s), len(utf16.Encode([]rune(s))); got != want {
			t.Fatalf("utf16Len(%q) = %d, want %d", s, got, want)
		}
	})
}

// refPropertyName is ValidatePropertyName's rule without the ASCII fast path.
func refPropertyName(name string) azerr.Code {
	if utf8.RuneCountInString(name) > MaxPropertyNameLen {
		return azerr.PropertyNameTooLong
	}
	if name == "" || !utf8.ValidString(name) {
		return azerr.PropertyNameInvalid
	}
	for i, r := range name {
		ok := r == '_' || unicode.IsLetter(r)
		if i > 0 {
			ok = ok || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Mc, r) || unicode.Is(unicode.Pc, r)
		}
		if !ok {
			return azerr.PropertyNameInvalid
		}
	}
	return ""
}

// TestPropertyNameASCII checks the ASCII fast path against the Unicode rule for every
// one- and two-character ASCII name and the length limit.
func TestPropertyNameASCII(t *testing.T) {
	names := []string{"", strings.Repeat("a", 255), strings.Repeat("a", 256), strings.Repeat("1", 256), "é", "aé", "a\xff"}
	for c := 0; c < utf8.RuneSelf; c++ {
		names = append(names, string(rune(c)))
		for d := 0; d < utf8.RuneSelf; d++ {
			names = append(names, string(rune(c))+string(rune(d)))
		}
	}
	for _, n := range names {
		var got azerr.Code
		if err := ValidatePropertyName(n); err != nil {
			e, _ := azerr.As(err)
			got = e.Code
		}
		if want := refPropertyName(n); got != want {
			t.Errorf("ValidatePropertyName(%q) = %q, want %q", n, got, want)
		}
	}
}

// TestSizeBound checks that sizeBound never undercounts Size, so ValidateShape's shortcut
// refuses exactly what Size refuses.
func TestSizeBound(t *testing.T) {
	for _, s := range []string{"", "ascii", "é", "日本語", "😀", strings.Repeat("x", 1<<19)} {
		e := Entity{PartitionKey: s, RowKey: "r", Props: []Property{{Name: "S", Value: StringValue(s)}, {Name: "N", Value: Int64Value(1)}}}
		if b, n := sizeBound(&e), Size(&e); b < n {
			t.Errorf("%q: sizeBound %d < Size %d", s, b, n)
		}
	}
	big := Entity{PartitionKey: "p", RowKey: "r"}
	for i := 0; i < 40; i++ {
		big.Props = append(big.Props, Property{Name: "P" + strings.Repeat("x", i), Value: StringValue(strings.Repeat("y", 16<<10))})
	}
	if err := ValidateShape(&big); err == nil {
		t.Error("a 1.3 MB entity passed ValidateShape")
	}
}
