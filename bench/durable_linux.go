package bench

import (
	"os"
	"syscall"
)

// syncData syncs f's data (fdatasync: not its times, which a data sync of overwritten
// blocks then leaves alone, as a storage engine's log sync does).
func syncData(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
