package pebble

import (
	"bytes"
	"strconv"
)

// statm reads the resident and shared (file-backed) page counts of a /proc/PID/statm line:
// "size resident shared text lib data dt".
func statm(b []byte) (resident, shared int64, ok bool) {
	f := bytes.Fields(b)
	if len(f) < 3 {
		return 0, 0, false
	}
	r, err1 := strconv.ParseInt(string(f[1]), 10, 64)
	s, err2 := strconv.ParseInt(string(f[2]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return r, s, true
}
