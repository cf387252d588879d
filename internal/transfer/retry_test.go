package transfer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/client"
)

func TestRetryable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&client.Error{Status: 503, Code: "ServerBusy"}, true},
		{&client.Error{Status: 500, Code: "InternalError"}, true},
		{&client.Error{Status: 408, Code: "OperationTimedOut"}, true},
		{&client.Error{Status: 429}, true},
		{fmt.Errorf("bulk: %w", &client.Error{Status: 503}), true},
		{&client.BatchError{Index: 3, Err: &client.Error{Status: 500}}, true},
		{&client.BatchError{Index: 3, Err: &client.Error{Status: 409, Code: "EntityAlreadyExists"}}, false},
		{&client.Error{Status: 400, Code: "InvalidInput"}, false},
		{&client.Error{Status: 403, Code: "AuthorizationFailure"}, false},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{context.DeadlineExceeded, true},
		{context.Canceled, false},
		{errors.New("unexpected EOF"), true},
	} {
		if got := Retryable(c.err); got != c.want {
			t.Errorf("Retryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// Waits are full jitter: uniform in [0, base·2^(n-1)], capped.
func TestRetryWait(t *testing.T) {
	r := Retry{Base: 100 * time.Millisecond, Max: time.Second}
	for n := 1; n <= 30; n++ {
		cap := min(100*time.Millisecond<<(n-1), time.Second)
		if n > 20 {
			cap = time.Second
		}
		var most time.Duration
		for range 200 {
			w := r.wait(n)
			if w < 0 || w > cap {
				t.Fatalf("wait(%d) = %v, outside [0, %v]", n, w, cap)
			}
			most = max(most, w)
		}
		if most < cap/2 {
			t.Errorf("wait(%d): the longest of 200 waits is %v, cap %v: not spread over the range", n, most, cap)
		}
	}
}

// do repeats retryable failures up to Attempts calls, stops at once on others, and
// reports each retry.
func TestRetryDo(t *testing.T) {
	r := Retry{Attempts: 4, Base: time.Microsecond}
	busy := &client.Error{Status: 503}
	for _, c := range []struct {
		name    string
		errs    []error
		calls   int
		retries int
		fails   bool
	}{
		{"success", []error{nil}, 1, 0, false},
		{"busy then success", []error{busy, busy, nil}, 3, 2, false},
		{"busy always", []error{busy, busy, busy, busy, busy}, 4, 3, true},
		{"refused", []error{&client.Error{Status: 409}}, 1, 0, true},
	} {
		calls, retries := 0, 0
		err := r.do(context.Background(), func(int) error { calls++; return c.errs[calls-1] }, func(error) { retries++ })
		if calls != c.calls || retries != c.retries || (err != nil) != c.fails {
			t.Errorf("%s: %d calls, %d retries, err %v", c.name, calls, retries, err)
		}
	}
}
