package main

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/ceruleandb/cerulean/internal/progress"
	"github.com/ceruleandb/cerulean/internal/transfer"
)

// lockedBuf is a bytes.Buffer the reporter's goroutine and the test may share.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The summary of a run an error stopped counts that error: it said "0 errors" above the
// error that ended an import (docs/data-tools.md shows both). An interrupt is not an error,
// and a run that ends well counts only the records it skipped.
func TestFinishSummaryCountsTheStoppingError(t *testing.T) {
	for _, c := range []struct {
		name    string
		err     error
		summary string
	}{
		{"stopped by an error", errors.New(`table orders, PartitionKey "p": EntityAlreadyExists`), "; 1 errors"},
		{"interrupted", transfer.ErrInterrupted, "; 0 errors"},
		{"done", nil, "; 0 errors"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out lockedBuf
			rep := progress.New(&out, progress.Options{Mode: progress.Lines, Verb: "imported"})
			err := finish(rep, c.err, "")
			if (err == nil) != (c.err == nil) {
				t.Errorf("finish returned %v for %v", err, c.err)
			}
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if last := lines[len(lines)-1]; !strings.HasPrefix(last, "imported 0 entities") || !strings.HasSuffix(last, c.summary) {
				t.Errorf("summary %q, want it to end in %q", last, c.summary)
			}
		})
	}
}
