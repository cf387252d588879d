package table

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// Change feeds (docs/change-feed.md): a table's committed changes in order, read page by
// page from a continuation, with long polling.

// MaxChangesPage is the most records one page of a feed holds, and MaxChangesWait the
// longest a read waits for a change (long polling): below the 100 s an HTTP client or
// proxy commonly allows a response.
const (
	MaxChangesPage = 1000
	MaxChangesWait = 60 * time.Second
)

// ErrNoChangeFeed means the table records no change feed:
// the server answers a read of its feed as it answers an operation it does not know, so
// a table without the feed shows nothing of the extension.
var ErrNoChangeFeed = errors.New("the table has no change feed")

// Cursor is a place in a table's feed: what a continuation holds. The zero Cursor is the
// beginning of the table's current feed.
type Cursor struct {
	// FeedID is the feed (storage.ChangesRequest.FeedID), 0 for the table's current one.
	FeedID uint64
	// After is the last Seq read (storage.ChangesRequest.After); storage.AfterNow with
	// FeedID 0 is "now".
	After uint64
	// Position is what the page was read at, so that the next page, through any front
	// end or replica, never reads an older state of the feed.
	Position storage.Position
}

// cursorVersion is the first byte of a continuation; a later format changes it.
const cursorVersion = 1

// String is the cursor as a continuation: opaque to clients, URL-safe.
func (c Cursor) String() string {
	var b [1 + 3*binary.MaxVarintLen64]byte
	t := append(b[:0], cursorVersion)
	t = binary.AppendUvarint(t, c.FeedID)
	t = binary.AppendUvarint(t, c.After)
	t = binary.AppendUvarint(t, uint64(c.Position))
	return base64.RawURLEncoding.EncodeToString(t)
}

// ParseCursor reads a continuation: "beginning", "now", or one Cursor.String gave. Anything
// else is 400 InvalidQueryParameterValue.
func ParseCursor(s string) (Cursor, error) {
	switch s {
	case "", "beginning":
		return Cursor{}, nil
	case "now":
		return Cursor{After: storage.AfterNow}, nil
	}
	bad := azerr.New(azerr.InvalidQueryParameterValue).WithDetail("The value of 'from' is not a continuation this service gave, nor 'beginning' or 'now'.")
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 4 || b[0] != cursorVersion {
		return Cursor{}, bad
	}
	b = b[1:]
	var v [3]uint64
	for i := range v {
		n, k := binary.Uvarint(b)
		if k <= 0 {
			return Cursor{}, bad
		}
		v[i], b = n, b[k:]
	}
	if len(b) != 0 || v[0] == 0 || v[1] == storage.AfterNow {
		return Cursor{}, bad
	}
	return Cursor{FeedID: v[0], After: v[1], Position: storage.Position(v[2])}, nil
}

// ChangesQuery is a read of a feed.
type ChangesQuery struct {
	From Cursor
	// Limit caps the records (1 to MaxChangesPage).
	Limit int
	// Wait is how long the read may wait for a change when there is none past From
	// (at most MaxChangesWait; 0 answers at once).
	Wait time.Duration
	// StartPK and EndPK keep the records of PartitionKeys in [StartPK, EndPK) (nil:
	// open), so that consumers can split a table.
	StartPK, EndPK *string
	// Keep, when set, keeps only the entity records it accepts (a shared access
	// signature's key range); the table-level records are always kept.
	Keep func(pk, rk string) bool
	// Stop, when closed, ends a wait at once (the server shutting down): the read then
	// answers as if its wait had run out.
	Stop <-chan struct{}
}

// ChangesPage is a page of a feed: its records and the cursor of the next read.
type ChangesPage struct {
	Changes []storage.Change
	Next    Cursor
	// Ended reports the table's deletion: the feed has no more records.
	Ended bool
}

// ReadChanges reads a page of the table's feed after q.From at the consistency rd asks
// for (from a replica when it allows). With q.Wait it waits, up to that long, for a
// change when there is none yet: the wait watches the primary, and the read after it
// asks for the primary's position, so a replica answers only once it has the change.
// Errors: ErrNoChangeFeed; 404 TableNotFound; 410 ChangeFeedContinuationExpired when
// records after From were removed by retention or From is not a continuation of this
// table.
func (s *Service) ReadChanges(ctx context.Context, account, table string, q ChangesQuery, rd Read) (ChangesPage, Served, error) {
	var deadline time.Time
	if q.Wait > 0 {
		deadline = time.Now().Add(q.Wait)
	}
	cur := q.From
	for {
		page, sv, err := s.readChanges(ctx, account, table, cur, q, rd)
		if err != nil || len(page.Changes) > 0 || page.Ended {
			return page, sv, err
		}
		if cur.After != storage.AfterNow && page.Next.After > cur.After {
			// The feed moved, but past records the query filters out: read on at once,
			// so that an empty page always means the feed's end.
			cur = page.Next
			continue
		}
		if deadline.IsZero() {
			return page, sv, nil
		}
		cur = page.Next
		wctx, cancel := context.WithDeadline(ctx, deadline)
		if q.Stop != nil {
			go func() {
				select {
				case <-q.Stop:
					cancel()
				case <-wctx.Done():
				}
			}()
		}
		err = s.eng.WaitChanges(wctx, account, table, cur.FeedID, cur.After)
		cancel()
		if err != nil {
			if wctx.Err() != nil {
				// Waited its time (or the server is stopping, or the client went away,
				// which is no failure of the read): the empty page and where it ended.
				return page, sv, nil
			}
			return ChangesPage{}, Served{}, s.changesErr(err)
		}
		p, err := s.eng.Position(ctx)
		if err != nil {
			return ChangesPage{}, Served{}, s.mapErr(err, entityScope)
		}
		cur.Position = max(cur.Position, p)
	}
}

// readChanges reads one page of the feed after cur, filtered by q.
func (s *Service) readChanges(ctx context.Context, account, table string, cur Cursor, q ChangesQuery, rd Read) (ChangesPage, Served, error) {
	v, err := s.view(ctx, rd, cur.Position, entityScope)
	if err != nil {
		return ChangesPage{}, Served{}, err
	}
	var r storage.ChangeReader = s.eng
	if vr, ok := v.(storage.ChangeReader); ok {
		r = vr
	}
	p, err := r.ReadChanges(ctx, account, table, storage.ChangesRequest{
		FeedID: cur.FeedID, After: cur.After, Limit: q.Limit, StartPK: q.StartPK, EndPK: q.EndPK,
	})
	if err != nil {
		return ChangesPage{}, notFound(v, err), s.changesErr(err)
	}
	if q.Keep != nil {
		kept := p.Changes[:0]
		for _, c := range p.Changes {
			if c.Op >= storage.ChangeTableDeleted || q.Keep(c.PartitionKey, c.RowKey) {
				kept = append(kept, c)
			}
		}
		p.Changes = kept
	}
	sv := served(v)
	return ChangesPage{
		Changes: p.Changes,
		Next:    Cursor{FeedID: p.FeedID, After: p.Next, Position: max(cur.Position, sv.Position)},
		Ended:   p.Ended,
	}, sv, nil
}

// changesErr maps the feed's own errors; the others as every read's.
func (s *Service) changesErr(err error) error {
	switch {
	case errors.Is(err, storage.ErrFeedOff):
		return ErrNoChangeFeed
	case errors.Is(err, storage.ErrChangesExpired):
		return azerr.New(azerr.ChangeFeedContinuationExpired)
	}
	return s.mapErr(err, entityScope)
}
