package transfer

import "testing"

func TestRangeHelpers(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		ok   bool
	}{{"a", "b", true}, {"p0", "p1", true}, {"a~", "b", true}, {"~~", "", false}, {"", "", false}, {"z}", "z~", true}} {
		if got, ok := successor(c.in); got != c.want || ok != c.ok {
			t.Errorf("successor(%q) = %q, %v", c.in, got, ok)
		}
	}
	for _, c := range []struct {
		in    string
		depth int
		want  string
	}{{"p0001", 3, "p00"}, {"ab", 5, "ab"}, {"aü", 5, "a"}, {"üa", 5, ""}, {"a\x01b", 5, "a"}, {"a\x7fb", 5, "a"}} {
		if got := asciiPrefix(c.in, c.depth); got != c.want {
			t.Errorf("asciiPrefix(%q, %d) = %q", c.in, c.depth, got)
		}
	}
	for _, c := range []struct{ filter, lo, hi, want string }{
		{"", "", "", ""},
		{"X eq 1", "", "", "(X eq 1)"},
		{"", "a'b", "c", "PartitionKey ge 'a''b' and PartitionKey lt 'c'"},
		{"X eq 1 or Y eq 2", "", "m", "(X eq 1 or Y eq 2) and PartitionKey lt 'm'"},
	} {
		if got := rangeFilter(c.filter, c.lo, c.hi); got != c.want {
			t.Errorf("rangeFilter(%q, %q, %q) = %q", c.filter, c.lo, c.hi, got)
		}
	}
}
