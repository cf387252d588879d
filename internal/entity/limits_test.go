package entity

import (
	"testing"
	"unicode/utf16"
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
