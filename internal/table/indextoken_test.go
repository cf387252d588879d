package table

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/storage"
)

// TestIndexTokens: index tokens decode to what was encoded, for any cursor (keys of any
// bytes, a PartitionKey that itself looks like a token); standard tokens never decode as
// index tokens nor index tokens as standard ones; every truncation or change of the
// token's form is refused.
func TestIndexTokens(t *testing.T) {
	r := rand.New(rand.NewPCG(46, 1))
	str := func() string {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return string(b)
	}
	for i := range 2000 {
		id := uint32(1 + r.IntN(1<<20))
		var after *storage.IndexCursor
		if i%10 != 0 {
			after = &storage.IndexCursor{Key: []byte("\x50" + str() + "\x00\x01"), PartitionKey: str(), RowKey: str()}
			if i%7 == 0 {
				after.PartitionKey = "ix1." + after.PartitionKey
			}
		}
		tok := encodeIndexToken(id, after)
		got, err := decodeIndexToken(tok)
		if err != nil || got.index != id || !reflect.DeepEqual(got.after, after) {
			t.Fatalf("%q: decoded %+v, %v; want %d %+v", tok, got, err, id, after)
		}
		if _, _, err := decodeToken(tok); err == nil {
			t.Fatalf("index token %q decodes as a standard token", tok)
		}
		if after != nil {
			std := encodeToken(after.PartitionKey, 0)
			if _, err := decodeIndexToken(std); err == nil || strings.HasPrefix(std, ixTokenPrefix) {
				t.Fatalf("standard token %q reads as an index token", std)
			}
		}
		for n := len(ixTokenPrefix); n < len(tok)-1; n++ {
			// A shorter token that still decodes must be another cursor, never a panic.
			_, _ = decodeIndexToken(tok[:n])
		}
	}
	// The token the DroppedMeanwhile test sends.
	if tok, err := decodeIndexToken("ix1.5wcBARABYWI"); err != nil || tok.index != 999 || tok.after.PartitionKey != "a" || tok.after.RowKey != "b" {
		t.Errorf("ix1.5wcBARABYWI: %+v, %v", tok, err)
	}
	for _, bad := range []string{"", "ix1", "ix1.", "ix1.=", "ix1.AA", "ix1.AQ", "ix1.AQI", "ix1.AQEA", "ix1.AAA", "IX1.AQA", "1!0!"} {
		if got, err := decodeIndexToken(bad); err == nil {
			t.Errorf("%q decoded as %+v", bad, got)
		}
	}
}
