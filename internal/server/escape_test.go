package server

import (
	"math/rand/v2"
	"testing"

	"github.com/ceruleandb/cerulean/internal/edmjson"
)

// TestAppendKeyEscapedMatchesEscapeKey holds the batch response's key escaping to
// escapeKey (quotes doubled, then url.PathEscape): every byte alone and inside text, and
// random strings of any bytes.
func TestAppendKeyEscapedMatchesEscapeKey(t *testing.T) {
	var keys []string
	for c := 0; c < 256; c++ {
		keys = append(keys, string([]byte{byte(c)}), "a"+string([]byte{byte(c)})+"b")
	}
	keys = append(keys, "", "it's", "a b+c%d/é", "''", "\u4e16")
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 10_000; i++ {
		b := make([]byte, r.IntN(12))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		keys = append(keys, string(b))
	}
	for _, k := range keys {
		if got, want := string(edmjson.AppendKeyEscaped(nil, k)), escapeKey(k); got != want {
			t.Fatalf("edmjson.AppendKeyEscaped(%q) = %q, escapeKey %q", k, got, want)
		}
	}
}
