package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// pipelineCounts is what an SDK pipeline saw, try by try: a per-retry policy counts every
// attempt, the 503s, the transport errors (resets) and the ServerBusy messages.
type pipelineCounts struct {
	tries, busy, transport atomic.Int64
	mu                     sync.Mutex
	messages               map[string]int
	retryAfter             int
}

func (c *pipelineCounts) Do(req *policy.Request) (*http.Response, error) {
	c.tries.Add(1)
	resp, err := req.Next()
	if err != nil {
		c.transport.Add(1)
		return resp, err
	}
	if resp.StatusCode == http.StatusServiceUnavailable {
		c.busy.Add(1)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		var doc struct {
			Error struct {
				Message struct{ Value string } `json:"message"`
			} `json:"odata.error"`
		}
		_ = json.Unmarshal(body, &doc)
		msg, _, _ := strings.Cut(doc.Error.Message.Value, "\n") // then RequestId and Time
		c.mu.Lock()
		if c.messages == nil {
			c.messages = map[string]int{}
		}
		c.messages[resp.Header.Get("x-ms-error-code")+": "+msg]++
		if resp.Header.Get("Retry-After") != "" {
			c.retryAfter++
		}
		c.mu.Unlock()
	}
	return resp, nil
}

// retryingTable is a client of an existing table with the SDK's default retry policy (three
// retries, exponential back-off from 800 ms with jitter) and c counting what it sees.
func retryingTable(t *testing.T, srv *server, table string, c *pipelineCounts) *aztables.Client {
	t.Helper()
	return retryingTableWith(t, srv, table, c, policy.RetryOptions{})
}

// retryingTableWith is retryingTable with retry options (zero fields: the SDK's defaults).
func retryingTableWith(t *testing.T, srv *server, table string, c *pipelineCounts, retry policy.RetryOptions) *aztables.Client {
	t.Helper()
	a := srv.Default()
	cred, err := aztables.NewSharedKeyCredential(a.Name, a.Key)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := aztables.NewServiceClientWithSharedKey(srv.Endpoint(a.Name), cred, &aztables.ClientOptions{
		ClientOptions: azcore.ClientOptions{PerRetryPolicies: []policy.Policy{c}, Retry: retry},
	})
	if err != nil {
		t.Fatal(err)
	}
	return svc.NewClient(table)
}

// driveResult is one paced run: the inserts that succeeded within the measured window,
// and the requests that failed after the SDK's retries.
type driveResult struct {
	perSec       float64
	succeeded    int64
	failed       int64
	failedBusy   int64
	offered      int64
	firstFailure error
}

// drive offers rate inserts per second for dur, spread round-robin over partitions, each
// in its own goroutine (open loop: a throttled request does not slow the offered load).
// perSec counts the successes that completed between skip and dur: the first second
// drains the buckets' burst. Requests still retrying a second after dur are cancelled
// (they could not count any more) and are neither successes nor failures.
func drive(t *testing.T, c *aztables.Client, rate float64, dur, skip time.Duration, partitions []string) driveResult {
	t.Helper()
	var res driveResult
	var inWindow atomic.Int64
	var wg sync.WaitGroup
	var failMu sync.Mutex
	pad := strings.Repeat("x", 600) // about 1 KiB on the wire: cost 1 each
	start := time.Now()
	rctx, cancel := context.WithDeadline(ctx(t), start.Add(dur+time.Second))
	defer cancel()
	var cancelled atomic.Int64
	interval := time.Duration(float64(time.Second) / rate)
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * interval)
		if at.Sub(start) >= dur {
			break
		}
		time.Sleep(time.Until(at))
		res.offered++
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			e := aztables.EDMEntity{Entity: aztables.Entity{PartitionKey: partitions[i%len(partitions)], RowKey: fmt.Sprintf("%08d", i)},
				Properties: map[string]any{"Pad": pad}}
			b, _ := e.MarshalJSON()
			_, err := c.AddEntity(rctx, b, nil)
			if err != nil && rctx.Err() != nil {
				cancelled.Add(1)
				return
			}
			if err != nil {
				failMu.Lock()
				res.failed++
				var re *azcore.ResponseError
				if errors.As(err, &re) && re.StatusCode == http.StatusServiceUnavailable {
					res.failedBusy++
				} else if res.firstFailure == nil {
					res.firstFailure = err
				}
				failMu.Unlock()
				return
			}
			if d := time.Since(start); d >= skip && d < dur {
				inWindow.Add(1)
			}
		}(i)
	}
	wg.Wait()
	res.succeeded = res.offered - res.failed - cancelled.Load()
	res.perSec = float64(inWindow.Load()) / (dur - skip).Seconds()
	return res
}

// TestScaleTargetsThroughSDK drives one server with --scale-targets through the Go SDK
// and its default retry policy. The targets are a twentieth of Azure's (100 entities/s a
// partition, 300 an account) so that the test machine drives them past their limits in
// a few seconds; the arithmetic is the same at 2,000 and 20,000. Each phase offers its
// load for 6 s and measures what got through from 1.5 s on, once the buckets' one-second
// burst is spent.
//   - a hot partition driven at twice its target gets its target through (±15%), the
//     503s answered with the partition's message, no Retry-After, and retried;
//   - the same load spread over 10 partitions all gets through, without a 503;
//   - 10 partitions each under their target but together at twice the account's get the
//     account's target through, the 503s carrying the account's message.
func TestScaleTargetsThroughSDK(t *testing.T) {
	if onPostgres() {
		t.Skip("the targets are enforced above the engine; the pebble pass covers them")
	}
	srv := startServer(t, withArgs("--scale-targets", "--partition-target", "100", "--account-target", "300"))
	svc := newServiceClient(t, srv)
	const dur, skip = 6 * time.Second, 1500 * time.Millisecond
	within := func(name string, got, want float64) {
		t.Helper()
		if got < want*0.85 || got > want*1.15 {
			t.Errorf("%s: %.0f entities/s got through, want %.0f ±15%%", name, got, want)
		}
	}

	t.Run("hot partition", func(t *testing.T) {
		_, name := newTable(t, svc)
		var c pipelineCounts
		r := drive(t, retryingTable(t, srv, name, &c), 200, dur, skip, []string{"hot"})
		t.Logf("hot: offered %d, %.0f/s through, %d failed after retries (%d busy), %d tries, %d 503s, messages %v",
			r.offered, r.perSec, r.failed, r.failedBusy, c.tries.Load(), c.busy.Load(), c.messages)
		within("hot partition at 200/s", r.perSec, 100)
		if r.firstFailure != nil {
			t.Fatalf("a failure other than 503: %v", r.firstFailure)
		}
		// 503s were answered and retried: more tries than requests, and requests that got a
		// 503 and then succeeded (not every 503 was a final failure).
		if c.busy.Load() == 0 || c.tries.Load() <= r.offered || c.busy.Load() <= r.failedBusy {
			t.Fatalf("no 503s retried: %d tries for %d requests, %d 503s, %d final", c.tries.Load(), r.offered, c.busy.Load(), r.failedBusy)
		}
		want := "ServerBusy: The server is currently unable to receive requests. Please retry your request."
		if len(c.messages) != 1 || c.messages[want] == 0 {
			t.Fatalf("503 messages %v, want only %q", c.messages, want)
		}
		if c.retryAfter != 0 {
			t.Fatalf("%d throttling answers carried Retry-After; the service sends none", c.retryAfter)
		}
	})

	t.Run("spread over 10 partitions", func(t *testing.T) {
		_, name := newTable(t, svc)
		var c pipelineCounts
		parts := make([]string, 10)
		for i := range parts {
			parts[i] = fmt.Sprint("p", i)
		}
		r := drive(t, retryingTable(t, srv, name, &c), 200, dur, skip, parts)
		t.Logf("spread: offered %d, %.0f/s through, %d failed, %d 503s", r.offered, r.perSec, r.failed, c.busy.Load())
		if r.failed != 0 || c.busy.Load() != 0 {
			t.Fatalf("spread load under every target: %d failed, %d 503s (%v)", r.failed, c.busy.Load(), r.firstFailure)
		}
		within("spread at 200/s", r.perSec, 200)
	})

	t.Run("account target caps the sum", func(t *testing.T) {
		time.Sleep(time.Second) // let the account's bucket refill after the spread phase
		_, name := newTable(t, svc)
		var c pipelineCounts
		parts := make([]string, 10)
		for i := range parts {
			parts[i] = fmt.Sprint("a", i)
		}
		r := drive(t, retryingTable(t, srv, name, &c), 600, dur, skip, parts)
		t.Logf("account: offered %d, %.0f/s through, %d failed after retries, %d 503s, messages %v", r.offered, r.perSec, r.failed, c.busy.Load(), c.messages)
		within("10 partitions at 60/s each, account target 300/s", r.perSec, 300)
		want := "ServerBusy: Operations per second is over the account limit."
		if c.messages[want] == 0 || len(c.messages) != 1 {
			t.Fatalf("503 messages %v, want only %q", c.messages, want)
		}
	})
}
