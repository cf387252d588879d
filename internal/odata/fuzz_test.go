package odata

import (
	"errors"
	"reflect"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
)

// fuzzEntities are evaluated against every filter the fuzzer finds valid.
var fuzzEntities = func() []testEntity {
	var out []testEntity
	for _, spec := range []string{
		"entity e1 PartitionKey='p' RowKey='r' A=1 B='x' C=true D=2.5 E=5L",
		"entity e2 PartitionKey='' RowKey='' A='1' B=X'00' C=false T=datetime'2020-01-01T00:00:00Z'",
		"entity e3 PartitionKey='a' RowKey='b' G=guid'00000000-0000-0000-0000-000000000001' D=NaN",
	} {
		te, err := parseEntity(spec)
		if err != nil {
			panic(err)
		}
		out = append(out, te)
	}
	return out
}()

// FuzzParseFilter: Parse never panics; it fails only with a 400 InvalidInput; whatever it
// accepts prints canonically to text that parses to an equal tree and prints the same;
// evaluation (decoded and encoded) agrees and stays inside the planned key ranges.
func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{
		"PartitionKey eq 'p' and RowKey eq 'r'",
		"(PartitionKey eq '')or(BoolField eq false)",
		"PartitionKey eq 'p' and RowKey ge 'a' and RowKey lt 'b'",
		"not (A eq 1 and B eq 'x') or C",
		"'x' lt Name and Age ge 5L and D le 2.5e3",
		"T eq datetime'2008-07-10T00:00:00.1234567+01:00'",
		"G eq guid'A455C695-DF98-5678-AAAA-81D3367E5A34' or X eq X'0A0B' or Y eq binary'ff'",
		"A eq 5454161346626",
		"Not and and eq 1",
		"not not (PartitionKey ne 'a' or RowKey gt 'b')",
		"A eq 'O''Neil'",
		"TableName ge 'My' and TableName lt 'Mz'",
		"((((A))))",
		"A eq -0.0 or B eq 1e308",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		flt, err := Parse(src)
		if err != nil {
			var ae *azerr.Error
			if !errors.As(err, &ae) || ae.Code != azerr.InvalidInput || ae.Status != 400 {
				t.Fatalf("Parse(%q): error %v is not a 400 InvalidInput", src, err)
			}
			return
		}
		if flt == nil {
			return // blank
		}
		canon := flt.String()
		g, err := Parse(canon)
		if err != nil {
			t.Fatalf("Parse(%q) ok, but its canonical form %q fails: %v", src, canon, err)
		}
		if !reflect.DeepEqual(flt.Expr(), g.Expr()) {
			t.Fatalf("Parse(%q): canonical %q parses to a different tree", src, canon)
		}
		if g.String() != canon {
			t.Fatalf("Parse(%q): canonical %q prints as %q", src, canon, g.String())
		}
		checkRanges(t, src, flt.KeyRanges())
		for i := range fuzzEntities {
			te := &fuzzEntities[i]
			m := flt.Match(&te.e, te.ts)
			if m2 := g.Match(&te.e, te.ts); m2 != m {
				t.Fatalf("%q: Match %v, canonical Match %v on %s", src, m, m2, te.name)
			}
			me, err := flt.MatchEncoded(te.e.PartitionKey, te.e.RowKey, te.ts, te.enc)
			if err != nil || me != m {
				t.Fatalf("%q: MatchEncoded %v, %v; Match %v on %s", src, me, err, m, te.name)
			}
			if m && !inRanges(flt.KeyRanges(), keyOf(*te)) {
				t.Fatalf("%q: %s matches outside %v", src, te.name, flt.KeyRanges())
			}
		}
		flt.MatchTableName("mytable")
		flt.TableKeyRange()
		flt.IsPoint()
		_, _ = flt.MatchEncoded("p", "r", 0, []byte{3, 1, 'A', byte(entity.String)})
	})
}
