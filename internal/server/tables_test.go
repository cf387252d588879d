package server

import (
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/table"
)

// TestParseTop pins the $top grammar: MS-ODATA's "$top=" 1*DIGIT, where 0 is valid (an
// empty, final page) and values above the service's 1,000 per response are a page of 1,000.
func TestParseTop(t *testing.T) {
	ok := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"0", table.TopNone},
		{"00", table.TopNone},
		{"1", 1},
		{"007", 7},
		{"999", 999},
		{"1000", 1000},
		{"1001", table.MaxPageSize},
		{"2147483648", table.MaxPageSize},
		{"99999999999999999999999999999999", table.MaxPageSize},
	}
	for _, c := range ok {
		got, err := parseTop(c.in)
		if err != nil || got != c.want {
			t.Errorf("parseTop(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"-1", "-0", "+5", " 5", "5 ", "1.5", "1e3", "0x10", "abc", "５"} {
		_, err := parseTop(in)
		e, known := azerr.As(err)
		if err == nil || !known || e.Code != azerr.InvalidQueryParameterValue {
			t.Errorf("parseTop(%q): err %v, want InvalidQueryParameterValue", in, err)
		}
	}
}
