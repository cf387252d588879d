//go:build !cgo

package membudget

// pebbleOffHeap: without cgo Pebble's block cache and memtables are Go slices, which the
// Go runtime's limit covers.
const pebbleOffHeap = false
