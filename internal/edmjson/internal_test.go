package edmjson

import (
	"encoding/json"
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

// TestPrintableASCII checks the word-at-a-time test against the byte table for every byte
// value at every position of strings that exercise each of its loops.
func TestPrintableASCII(t *testing.T) {
	want := func(s []byte) bool {
		for _, c := range s {
			if c < 0x20 || c >= 0x80 {
				return false
			}
		}
		return true
	}
	for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 40, 64, 71, 100} {
		s := []byte(strings.Repeat("a", n))
		if !printableASCII(s) {
			t.Fatalf("%d plain bytes refused", n)
		}
		for i := 0; i < n; i++ {
			for c := 0; c < 256; c++ {
				s[i] = byte(c)
				if got := printableASCII(s); got != want(s) {
					t.Fatalf("n %d, byte %#x at %d: got %v", n, c, i, got)
				}
				s[i] = 'a'
			}
		}
	}
}

// TestLongStrings decodes long strings holding each kind of byte str must stop at (an
// escape, a control character, UTF-8, a quote) at every position, as the bulk path
// (plainRunEnd) and the byte-by-byte path must agree.
func TestLongStrings(t *testing.T) {
	for _, n := range []int{47, 48, 49, 64, 65, 100, 130} {
		for i := 0; i < n; i++ {
			for _, ins := range []string{`\n`, `\"`, "\x01", "é", "\x7f", "\xff", "\""} {
				v := strings.Repeat("x", i) + ins + strings.Repeat("y", n-i)
				body := `{"PartitionKey":"p","RowKey":"r","S":"` + v + `","N":1}`
				e, _, err := DecodeEntity([]byte(body))
				var ref struct{ S string }
				refErr := json.Unmarshal([]byte(body), &ref)
				if ins == "\xff" || ins == "\x01" || ins == "\"" {
					if err == nil {
						t.Fatalf("n %d, %q at %d: accepted", n, ins, i)
					}
					continue
				}
				if err != nil || refErr != nil {
					t.Fatalf("n %d, %q at %d: %v (encoding/json: %v)", n, ins, i, err, refErr)
				}
				if got := e.Props[0].Value.Str; got != ref.S || len(e.Props) != 2 {
					t.Fatalf("n %d, %q at %d: got %q, want %q", n, ins, i, got, ref.S)
				}
			}
		}
	}
}
