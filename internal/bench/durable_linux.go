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

// inMemory reports whether dir is on a file system that keeps files in memory only
// (tmpfs, ramfs), where a sync writes nothing to a disk.
func inMemory(dir string) bool {
	const tmpfsMagic, ramfsMagic = 0x01021994, 0x858458f6
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) != nil {
		return false
	}
	return st.Type == tmpfsMagic || st.Type == ramfsMagic
}
