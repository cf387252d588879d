package server

import "time"

// Limits bound the time and memory clients can make the server spend on them.
type Limits struct {
	// MaxBodyMemory is the most request-body bytes held in memory by all requests
	// together; past it requests are answered 503 ServerBusy (with Retry-After). Bodies
	// declared larger than 64 KiB, or of unknown length, may use half of it.
	MaxBodyMemory int64
	// BodyTimeout is the longest a client may take to send one request body.
	BodyTimeout time.Duration
	// StallTimeout is the longest a client may pause while sending a request body or
	// receiving a response before its connection is closed.
	StallTimeout time.Duration
	// WriteTimeout is the longest the sending of one response may take.
	WriteTimeout time.Duration
	// IdleTimeout is how long an idle keep-alive connection stays open; responses
	// advertise it in Keep-Alive: timeout=N.
	IdleTimeout time.Duration
	// ShutdownGrace is how long Serve lets running requests finish after its context ends.
	ShutdownGrace time.Duration
	// SlowRequest is the latency from which a request is logged at info level; negative
	// disables those lines.
	SlowRequest time.Duration
}

// DefaultLimits are the limits of a zero Limits. A 4 MiB batch sent at 14 KB/s (a poor
// mobile link) still arrives within BodyTimeout; a client that sends or reads nothing for
// half a minute is gone.
var DefaultLimits = Limits{
	MaxBodyMemory: 64 << 20,
	BodyTimeout:   5 * time.Minute,
	StallTimeout:  30 * time.Second,
	WriteTimeout:  5 * time.Minute,
	IdleTimeout:   120 * time.Second,
	ShutdownGrace: 10 * time.Second,
	SlowRequest:   time.Second,
}

// withDefaults fills the zero fields from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxBodyMemory <= 0 {
		l.MaxBodyMemory = d.MaxBodyMemory
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = d.BodyTimeout
	}
	if l.StallTimeout <= 0 {
		l.StallTimeout = d.StallTimeout
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = d.WriteTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.ShutdownGrace <= 0 {
		l.ShutdownGrace = d.ShutdownGrace
	}
	if l.SlowRequest == 0 {
		l.SlowRequest = d.SlowRequest
	}
	return l
}
