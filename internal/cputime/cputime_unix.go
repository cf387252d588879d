//go:build unix

// Package cputime reads the CPU time the process has used, for benchmarks that report
// what an operation costs the machine (background goroutines' work included), not only
// the wall time of the goroutine that measures.
package cputime

import (
	"syscall"
	"time"
)

// Process is the CPU time the process has used (user plus system), or -1 where it
// cannot be read.
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
