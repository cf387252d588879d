package edmjson

// Word-at-a-time scanning for JSON strings: most string bytes are printable ASCII that
// needs no escaping, so testing eight of them at once halves the cost of decoding and
// encoding a typical entity.

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// load8 reads s[i:i+8] little-endian. Slicing first gives the compiler a length it knows
// to be 8, so the eight reads need no bounds checks of their own and combine into one load;
// a hint such as _ = s[i+7] leaves all eight checks in (i+7 might overflow), 16 compares
// and branches per 16 bytes scanned.
func load8[S ~string | ~[]byte](s S, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// plain8 reports whether all eight bytes of x are printable ASCII other than '"' and '\\'
// (exactly the bytes strPlain marks).
func plain8(x uint64) bool {
	// The classic "has a byte below n" test: exact as to whether any byte qualifies.
	m := x & msb                   // some byte ≥ 0x80
	m |= (x - 0x20*lsb) &^ x & msb // some byte < 0x20
	q := x ^ ('"' * lsb)           // a '"' becomes 0 ...
	m |= (q - lsb) &^ q & msb      // ... and is found as a byte below 1
	b := x ^ ('\\' * lsb)
	m |= (b - lsb) &^ b & msb
	return m == 0
}

// plain16 is plain8(x) && plain8(y), with one test for the pair.
func plain16(x, y uint64) bool {
	m := (x | y) & msb
	m |= ((x - 0x20*lsb) &^ x) | ((y - 0x20*lsb) &^ y)
	qx, qy := x^('"'*lsb), y^('"'*lsb)
	m |= ((qx - lsb) &^ qx) | ((qy - lsb) &^ qy)
	bx, by := x^('\\'*lsb), y^('\\'*lsb)
	m |= ((bx - lsb) &^ bx) | ((by - lsb) &^ by)
	return m&msb == 0
}
