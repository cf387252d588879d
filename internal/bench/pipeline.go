package bench

import (
	"net/http"
	"sync/atomic"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// pipelineCounts is what the measured client's SDK pipeline saw: its requests (calls),
// their tries (a call with retries makes several) and the 503 answers among the tries.
// Counting in the pipeline sees what an application's SDK sees, retries included, which
// the workloads' own error counts (one per failed call) cannot.
type pipelineCounts struct {
	calls, tries, busy atomic.Int64
}

// take returns the throttled answers and retries since the last take, and starts again.
func (c *pipelineCounts) take() (throttled, retries int64) {
	calls, tries := c.calls.Swap(0), c.tries.Swap(0)
	return c.busy.Swap(0), max(0, tries-calls)
}

// callCounter is a per-call policy: it runs once per request, however many tries.
type callCounter struct{ c *pipelineCounts }

func (p callCounter) Do(req *policy.Request) (*http.Response, error) {
	p.c.calls.Add(1)
	return req.Next()
}

// tryCounter is a per-retry policy: it runs once per try and counts 503 answers
// (ServerBusy: throttling, on Azure and under cerulean serve --scale-targets).
type tryCounter struct{ c *pipelineCounts }

func (p tryCounter) Do(req *policy.Request) (*http.Response, error) {
	p.c.tries.Add(1)
	resp, err := req.Next()
	if err == nil && resp.StatusCode == http.StatusServiceUnavailable {
		p.c.busy.Add(1)
	}
	return resp, err
}
