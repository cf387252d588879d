package pebble

import "syscall"

// rawFdatasync is fdatasync(2) as a raw system call: the calling thread keeps its P
// (see walSyncer). An interrupted call is made again.
func rawFdatasync(fd uintptr) error {
	for {
		_, _, e := syscall.RawSyscall(syscall.SYS_FDATASYNC, fd, 0, 0)
		switch e {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		default:
			return e
		}
	}
}
