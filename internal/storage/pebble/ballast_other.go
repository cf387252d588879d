//go:build !linux

package pebble

import "os"

// allocate makes f size bytes long by writing zeros, so that its blocks are allocated and
// removing it frees that much space at once.
func allocate(f *os.File, size int64) error { return writeZeros(f, size) }
