package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Change feeds (docs/change-feed.md): a table's committed changes in commit order, read
// page by page from a continuation.

// Where a feed read starts, besides a continuation from an earlier page.
const (
	FromBeginning = "beginning" // the oldest record the feed retains
	FromNow       = "now"       // the feed's current end
)

// Change is one record of a feed.
type Change struct {
	// Seq orders the table's feed: strictly increasing, not dense.
	Seq uint64 `json:"seq"`
	// Op is what happened: insert, update, merge, upsert, upsertMerge, delete (the
	// write as asked, as the bulk extension names them), expire (removed by
	// time-to-live), tableDeleted (the feed's last record) or feedOff (the feed was
	// turned off: changes until the next record were not recorded).
	Op string `json:"op"`
	// At is when the change committed.
	At time.Time `json:"at"`
	// PartitionKey and RowKey name the entity (empty for tableDeleted and feedOff).
	PartitionKey string `json:"PartitionKey"`
	RowKey       string `json:"RowKey"`
	// Entity is the entity's whole state after a write, as OData JSON with its
	// odata.etag, Timestamp and type annotations (what a read answers), and
	// cerulean.expiry when it expires: it can be written back once that annotation is
	// taken out (a write refuses it). Empty for the other ops.
	Entity json.RawMessage `json:"entity,omitempty"`
	// Raw is the record's JSON as the server sent it.
	Raw json.RawMessage `json:"-"`
}

// ChangesPage is one page of a feed.
type ChangesPage struct {
	Changes []Change `json:"changes"`
	// Continuation is where to read on from: never missing nor repeating a record.
	Continuation string `json:"continuation"`
	// Ended reports that the table was deleted: its feed has no more records.
	Ended bool `json:"ended"`
	// Source is where the page was read: "primary" or "replica NAME"
	// (x-cerulean-read-source).
	Source string `json:"-"`
}

// ChangesOptions selects a page.
type ChangesOptions struct {
	// From is FromBeginning (the default when empty), FromNow, or a page's
	// Continuation.
	From string
	// Limit caps the records (1 to 1000; 0 is the server's 1000).
	Limit int
	// Wait, when there is no record after From, waits up to that long (whole seconds,
	// at most 60 s) for one before answering an empty page: long polling.
	Wait time.Duration
	// StartPK and EndPK keep the records of PartitionKeys in [StartPK, EndPK), so that
	// N consumers can split a table; nil is open.
	StartPK, EndPK *string
	// Header is added to the request (e.g. x-ms-consistency-level to read from a
	// replica).
	Header http.Header
}

// CodeChangesExpired is the error code (Error.Code, status 410) of a read whose
// continuation fell out of the feed's retention: read again from the beginning or now.
const CodeChangesExpired = "ChangeFeedContinuationExpired"

// ReadChanges reads one page of the table's change feed (GET /{table}?comp=changes).
// A page without records means the feed's end (after waiting o.Wait): records filtered
// out by a PartitionKey range or a SAS key range never make a page come back empty
// before it. Its Continuation still reads on from there.
// A table without the feed answers 400 InvalidQueryParameterValue (an *Error), as the
// service answers a request it does not know.
func (c *Client) ReadChanges(ctx context.Context, table string, o ChangesOptions) (*ChangesPage, error) {
	q := url.Values{"comp": {"changes"}}
	if o.From != "" {
		q.Set("from", o.From)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Wait > 0 {
		q.Set("wait", strconv.Itoa(int((o.Wait+time.Second-1)/time.Second)))
	}
	if o.StartPK != nil {
		q.Set("startpk", *o.StartPK)
	}
	if o.EndPK != nil {
		q.Set("endpk", *o.EndPK)
	}
	resp, err := c.Do(ctx, http.MethodGet, url.PathEscape(table), q, o.Header, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if err := ResponseError(resp); err != nil {
		return nil, fmt.Errorf("read changes: %w", err)
	}
	var raw struct {
		Changes      []json.RawMessage `json:"changes"`
		Continuation string            `json:"continuation"`
		Ended        bool              `json:"ended"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		return nil, fmt.Errorf("read changes: decode answer: %w", err)
	}
	p := ChangesPage{Changes: make([]Change, len(raw.Changes)), Continuation: raw.Continuation, Ended: raw.Ended, Source: resp.Header.Get("x-cerulean-read-source")}
	for i, r := range raw.Changes {
		if err := json.Unmarshal(r, &p.Changes[i]); err != nil {
			return nil, fmt.Errorf("read changes: decode record: %w", err)
		}
		p.Changes[i].Raw = r
	}
	if p.Continuation == "" {
		return nil, errors.New("read changes: the answer has no continuation: the server does not serve change feeds")
	}
	return &p, nil
}

// FollowChanges reads the table's feed from o.From and calls fn with each record in
// order, long polling (o.Wait, 30 s when zero) for new ones, until ctx ends, fn fails or
// the feed ends (the table deleted: it returns nil). after is called with each page once
// fn took its records, so a caller can save its Continuation and resume there; it may
// be nil. Transient failures (503, a dropped connection) are
// retried with a pause; an expired continuation or any other refusal is returned.
func (c *Client) FollowChanges(ctx context.Context, table string, o ChangesOptions, fn func(Change) error, after func(*ChangesPage) error) error {
	if o.Wait <= 0 {
		o.Wait = 30 * time.Second
	}
	pause := 100 * time.Millisecond
	for {
		p, err := c.ReadChanges(ctx, table, o)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var e *Error
			if errors.As(err, &e) && e.Status != http.StatusServiceUnavailable && e.Status != http.StatusInternalServerError {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(pause):
			}
			pause = min(2*pause, 5*time.Second)
			continue
		}
		pause = 100 * time.Millisecond
		for _, ch := range p.Changes {
			if err := fn(ch); err != nil {
				return err
			}
		}
		if after != nil && (len(p.Changes) > 0 || p.Continuation != o.From) {
			if err := after(p); err != nil {
				return err
			}
		}
		if p.Ended {
			return nil
		}
		o.From = p.Continuation
	}
}
