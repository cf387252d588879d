package main

import "testing"

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"0", 0}, {"512", 512}, {"512B", 512}, {"4KiB", 4 << 10}, {"4k", 4 << 10}, {"4KB", 4 << 10},
		{"128MiB", 128 << 20}, {"128 MiB", 128 << 20}, {"128M", 128 << 20}, {"2GiB", 2 << 30},
		{"1TiB", 1 << 40}, {" 64mib ", 64 << 20},
	} {
		got, err := parseSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "1.5GiB", "12XB", "1iB", "10PiB", "9999999999TiB", "1 2"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 512: "512", 4 << 10: "4KiB", 32 << 20: "32MiB", 3 << 30: "3GiB", 1<<40 + 1<<20: "1048577MiB"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
		if n > 0 {
			if back, err := parseSize(want); err != nil || back != n {
				t.Errorf("parseSize(formatSize(%d)) = %d, %v", n, back, err)
			}
		}
	}
}
