//go:build !linux

package postgres

import "time"

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist: the keepalive probes
// still find dead idle connections (dial.go).
func setUserTimeout(uintptr, time.Duration) error { return nil }
