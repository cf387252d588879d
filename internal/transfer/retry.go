package transfer

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"time"

	"github.com/ceruleandb/cerulean/client"
)

// Retry is the backoff policy for calls that may succeed when repeated: exponential,
// with full jitter (a uniform wait between 0 and the cap of the attempt), as Azure's
// guidance asks of every client so that many clients retrying do not arrive in step.
type Retry struct {
	// Attempts is the most calls made (the first included); 0 means 8.
	Attempts int
	// Base is the cap of the first wait; 0 means 200 ms. Each attempt doubles it.
	Base time.Duration
	// Max caps every wait; 0 means 30 s.
	Max time.Duration
}

func (r Retry) attempts() int {
	if r.Attempts <= 0 {
		return 8
	}
	return r.Attempts
}

// wait is the pause before attempt n (1-based, n ≥ 1 is the first retry).
func (r Retry) wait(n int) time.Duration {
	base, max := r.Base, r.Max
	if base <= 0 {
		base = 200 * time.Millisecond
	}
	if max <= 0 {
		max = 30 * time.Second
	}
	c := base << min(n-1, 20)
	if c > max || c <= 0 {
		c = max
	}
	return time.Duration(rand.Int64N(int64(c) + 1))
}

// Retryable reports whether err is worth repeating the call for: a 500, 503 or 408 from
// the service (InternalError, ServerBusy, OperationTimedOut), a timeout, or a failed
// connection. A *client.BatchError with one of those statuses counts too.
func Retryable(err error) bool {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce.Status == 500 || ce.Status == 503 || ce.Status == 408 || ce.Status == 429
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) || err != nil && !isServiceAnswer(err)
}

// isServiceAnswer reports an error that is the service's answer (not worth repeating
// unless its status says so).
func isServiceAnswer(err error) bool {
	var ce *client.Error
	return errors.As(err, &ce)
}

// do calls f until it succeeds, fails for good, or ctx ends; retried reports each
// retry (the error and the attempt about to be made).
func (r Retry) do(ctx context.Context, f func(attempt int) error, retried func(error)) error {
	var err error
	for n := 0; n < r.attempts(); n++ {
		if n > 0 {
			if retried != nil {
				retried(err)
			}
			t := time.NewTimer(r.wait(n))
			select {
			case <-ctx.Done():
				t.Stop()
				return err
			case <-t.C:
			}
		}
		if err = f(n); err == nil || !Retryable(err) {
			return err
		}
	}
	return err
}
