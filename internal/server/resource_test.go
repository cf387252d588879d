package server

import (
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

func TestParseResource(t *testing.T) {
	cases := []struct {
		in   string
		want Resource
	}{
		{"", Resource{Kind: KindService}},
		{"/", Resource{Kind: KindService}},
		{"Tables", Resource{Kind: KindTables}},
		{"Tables()", Resource{Kind: KindTables}},
		{"tables", Resource{Kind: KindTables}},
		{"Tables('mytable')", Resource{Kind: KindTable, Table: "mytable"}},
		{"$batch", Resource{Kind: KindBatch}},
		{"mytable", Resource{Kind: KindEntities, Table: "mytable"}},
		{"mytable()", Resource{Kind: KindEntities, Table: "mytable"}},
		{"t(PartitionKey='a',RowKey='b')", Resource{Kind: KindEntity, Table: "t", PartitionKey: "a", RowKey: "b"}},
		{"t(RowKey='b',PartitionKey='a')", Resource{Kind: KindEntity, Table: "t", PartitionKey: "a", RowKey: "b"}},
		{"t(PartitionKey='a', RowKey='b')", Resource{Kind: KindEntity, Table: "t", PartitionKey: "a", RowKey: "b"}},
		{"t(PartitionKey='a''b c',RowKey='')", Resource{Kind: KindEntity, Table: "t", PartitionKey: "a'b c", RowKey: ""}},
		{"t(PartitionKey='''',RowKey='''''')", Resource{Kind: KindEntity, Table: "t", PartitionKey: "'", RowKey: "''"}},
		{"t(PartitionKey='a,RowKey=b',RowKey='x)')", Resource{Kind: KindEntity, Table: "t", PartitionKey: "a,RowKey=b", RowKey: "x)"}},
		{"t(PartitionKey='%+ключ',RowKey='😀')", Resource{Kind: KindEntity, Table: "t", PartitionKey: "%+ключ", RowKey: "😀"}},
		{"t(PartitionKey='a/b',RowKey='c')", Resource{Kind: KindEntity, Table: "t", PartitionKey: "a/b", RowKey: "c"}},
	}
	for _, c := range cases {
		got, err := ParseResource(c.in)
		if err != nil {
			t.Errorf("ParseResource(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseResource(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
	bad := []string{
		"t(PartitionKey='a')", "t(PartitionKey='a',RowKey='b'", "t(PartitionKey='a',RowKey='b',X='c')",
		"t(PartitionKey='a'RowKey='b')", "t(PartitionKey=a,RowKey=b)", "t(PartitionKey='a',PartitionKey='b')",
		"t(PartitionKey='a,RowKey='b')", "a/b", "t(x)", "Tables('a'", "Tables('a')x", "(PartitionKey='a',RowKey='b')",
	}
	for _, in := range bad {
		if got, err := ParseResource(in); err == nil {
			t.Errorf("ParseResource(%q) = %+v, want error", in, got)
		} else if _, ok := azerr.As(err); !ok {
			t.Errorf("ParseResource(%q): error %v is not a service error", in, err)
		}
	}
}

func FuzzParseResource(f *testing.F) {
	for _, s := range []string{"", "Tables", "Tables('x')", "t()", "t(PartitionKey='a''b',RowKey='')", "t(RowKey='b', PartitionKey='a')", "$batch"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseResource(s)
		if err != nil {
			if _, ok := azerr.As(err); !ok {
				t.Fatalf("non-service error %v", err)
			}
			return
		}
		if r.Kind == KindEntity {
			// Re-rendering the keys as literals must parse back to the same keys.
			again, err := ParseResource(r.Table + "(PartitionKey=" + quote(r.PartitionKey) + ",RowKey=" + quote(r.RowKey) + ")")
			if err != nil || again != r {
				t.Fatalf("round trip of %q: %+v, %v", s, again, err)
			}
		}
	})
}

func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// FuzzParseLiteral checks parseLiteral (whose quote-free keys are substrings of the
// path) against the plain character-by-character reading of an OData string literal.
func FuzzParseLiteral(f *testing.F) {
	for _, s := range []string{"'a'", "'a''b'", "''", "''''", "'a',RowKey='b'", "'a''", "'", "a", "'x)'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		val, rest, err := parseLiteral(s)
		wantVal, wantRest, ok := readLiteral(s)
		if (err == nil) != ok || val != wantVal || rest != wantRest {
			t.Fatalf("parseLiteral(%q) = %q, %q, %v; want %q, %q, ok %v", s, val, rest, err, wantVal, wantRest, ok)
		}
	})
}

// readLiteral is the reference reading of an OData string literal at the start of s.
func readLiteral(s string) (val, rest string, ok bool) {
	if s == "" || s[0] != '\'' {
		return "", "", false
	}
	var b []byte
	for i := 1; i < len(s); i++ {
		switch {
		case s[i] != '\'':
			b = append(b, s[i])
		case i+1 < len(s) && s[i+1] == '\'':
			b = append(b, '\'')
			i++
		default:
			return string(b), s[i+1:], true
		}
	}
	return "", "", false
}
