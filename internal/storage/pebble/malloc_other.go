//go:build !linux || !cgo

package pebble

// fixMalloc does nothing: without cgo Pebble's manual memory is Go memory, and the glibc
// behaviour malloc_cgo.go corrects is Linux's.
func fixMalloc(capacity int64) {}
