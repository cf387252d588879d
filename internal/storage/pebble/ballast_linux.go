package pebble

import (
	"errors"
	"os"
	"syscall"
)

// allocate makes f size bytes long with every block allocated, so that removing it frees
// that much space at once. It falls back to writing zeros where fallocate is not supported.
func allocate(f *os.File, size int64) error {
	err := syscall.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		return writeZeros(f, size)
	}
	return err
}
