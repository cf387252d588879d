package edmjson

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
)

func TestPlain8MatchesTable(t *testing.T) {
	for c := 0; c < 256; c++ {
		for pos := 0; pos < 8; pos++ {
			w := []byte("abcdefgh")
			w[pos] = byte(c)
			if got := plain8(load8(w, 0)); got != strPlain[c] {
				t.Fatalf("byte %#x at %d: plain8 %v, table %v", c, pos, got, strPlain[c])
			}
		}
	}
	r := rand.New(rand.NewPCG(13, 14))
	for i := 0; i < 1_000_000; i++ {
		var w [8]byte
		want := true
		for j := range w {
			w[j] = byte(r.Uint32())
			if r.IntN(2) == 0 {
				w[j] = byte(0x20 + r.IntN(0x60))
			}
			want = want && strPlain[w[j]]
		}
		if got := plain8(load8(w[:], 0)); got != want {
			t.Fatalf("%q: plain8 %v, want %v", w, got, want)
		}
		if got := plain8(load8(string(w[:]), 0)); got != want {
			t.Fatalf("%q (string): plain8 %v, want %v", w, got, want)
		}
	}
}

// TestPlain16MatchesTable checks the sixteen-byte test against the table: every byte
// value at every position, and random mixes mostly of plain bytes.
func TestPlain16MatchesTable(t *testing.T) {
	for c := 0; c < 256; c++ {
		for pos := 0; pos < 16; pos++ {
			w := []byte("abcdefghijklmnop")
			w[pos] = byte(c)
			if got := plain16(load8(w, 0), load8(w, 8)); got != strPlain[c] {
				t.Fatalf("byte %#x at %d: plain16 %v, table %v", c, pos, got, strPlain[c])
			}
		}
	}
	r := rand.New(rand.NewPCG(17, 18))
	for i := 0; i < 1_000_000; i++ {
		var w [16]byte
		want := true
		for j := range w {
			w[j] = byte(0x20 + r.IntN(0x60))
			if r.IntN(16) == 0 {
				w[j] = byte(r.Uint32())
			}
			want = want && strPlain[w[j]]
		}
		if got := plain16(load8(w[:], 0), load8(w[:], 8)); got != want {
			t.Fatalf("%q: plain16 %v, want %v", w, got, want)
		}
	}
}

func TestAppendTicksAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	span := entity.MaxDateTime - entity.MinDateTime
	edges := []int64{entity.MinDateTime, entity.MaxDateTime, entity.MinDateTime - 1, entity.MaxDateTime + 1,
		0, -1, 1, 9_999_999, 10_000_000, -10_000_000, -10_000_001, mustTicks(t, "2000-02-29T23:59:59.9999999Z"),
		mustTicks(t, "1900-03-01T00:00:00Z"), mustTicks(t, "2100-02-28T12:00:00Z")}
	for i := 0; i < 500_000; i++ {
		ticks := entity.MinDateTime - span/100 + r.Int64N(span+span/50)
		if i < len(edges) {
			ticks = edges[i]
		}
		if got, want := string(appendTicks(nil, ticks)), entity.FormatTicks(ticks); got != want {
			t.Fatalf("ticks %d: %s, want %s", ticks, got, want)
		}
		want := strings.ReplaceAll(entity.ETag(ticks), `"`, `\"`)
		if got := string(appendETagContent(nil, ticks)); got != want {
			t.Fatalf("etag %d: %s, want %s", ticks, got, want)
		}
	}
}
