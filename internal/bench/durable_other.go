//go:build !linux

package bench

import "os"

// syncData syncs f (fsync where fdatasync is not at hand).
func syncData(f *os.File) error { return f.Sync() }

// inMemory reports whether dir keeps files in memory only; not known here.
func inMemory(string) bool { return false }
