package postgres

import (
	"syscall"
	"time"
)

// setUserTimeout sets TCP_USER_TIMEOUT on the socket fd (dial.go).
func setUserTimeout(fd uintptr, d time.Duration) error {
	return syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeoutOpt, int(d.Milliseconds()))
}

// tcpUserTimeoutOpt is TCP_USER_TIMEOUT (linux/tcp.h), which package syscall does not name.
const tcpUserTimeoutOpt = 0x12
