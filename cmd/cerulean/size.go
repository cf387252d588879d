package main

import (
	"fmt"
	"strconv"
	"strings"
)

// parseSize reads a byte count: a whole number of bytes, or one with a binary unit (KiB,
// MiB, GiB, TiB; K, M, G, T and KB, MB, GB, TB are read as the same powers of 1024).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') {
		i--
	}
	num, unit := strings.TrimSpace(t[:i]), strings.ToUpper(strings.TrimSpace(t[i:]))
	shift := 0
	switch strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I") {
	case "":
		if unit != "" && unit != "B" {
			return 0, fmt.Errorf("size %q: unknown unit", s)
		}
	case "K":
		shift = 10
	case "M":
		shift = 20
	case "G":
		shift = 30
	case "T":
		shift = 40
	default:
		return 0, fmt.Errorf("size %q: unknown unit (use B, KiB, MiB, GiB or TiB)", s)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: not a whole number of bytes", s)
	}
	if n > (1<<63-1)>>shift {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return n << shift, nil
}

// formatSize writes a byte count with the largest binary unit that divides it.
func formatSize(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}
