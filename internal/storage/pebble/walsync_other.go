//go:build !linux

package pebble

// rawFdatasync is nil where the engine has no raw sync: WAL files sync as Pebble syncs
// them.
var rawFdatasync func(fd uintptr) error
