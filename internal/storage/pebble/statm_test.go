package pebble

import "testing"

func TestStatm(t *testing.T) {
	for _, c := range []struct {
		in               string
		resident, shared int64
		ok               bool
	}{
		{"381210 62532 7380 4003 0 84337 0\n", 62532, 7380, true},
		{"1 2 3", 2, 3, true},
		{"1 2", 0, 0, false},
		{"1 x 3", 0, 0, false},
		{"", 0, 0, false},
	} {
		r, s, ok := statm([]byte(c.in))
		if r != c.resident || s != c.shared || ok != c.ok {
			t.Errorf("statm(%q) = %d, %d, %v; want %d, %d, %v", c.in, r, s, ok, c.resident, c.shared, c.ok)
		}
	}
}
