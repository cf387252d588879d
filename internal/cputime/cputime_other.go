//go:build !unix

// Package cputime reads the CPU time the process has used, for benchmarks that report
// what an operation costs the machine (background goroutines' work included), not only
// the wall time of the goroutine that measures.
package cputime

import "time"

// Process is the CPU time the process has used (user plus system), or -1 where it
// cannot be read.
func Process() time.Duration { return -1 }
