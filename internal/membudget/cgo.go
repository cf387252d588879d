//go:build cgo

package membudget

// pebbleOffHeap: with cgo Pebble allocates its block cache and memtables with C malloc,
// outside the Go heap, so the Go runtime's limit leaves them out.
const pebbleOffHeap = true
