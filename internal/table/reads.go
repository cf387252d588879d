package table

import (
	"context"
	"errors"
	"net/http"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// Read says how one request's reads are served (docs/compatibility.md "Read consistency and replicas"): the consistency
// level it asks for (x-ms-consistency-level, or the server's default) and the position of
// the session token it sent (0 for none).
//
// The rules, which the engine's storage.ReadOptions receive:
//   - Session without a token is Strong (there is nothing to be consistent with);
//   - Strong and Session honour the token: the read sees every write it covers;
//   - BoundedStaleness, ConsistentPrefix and Eventual ignore the token: they ask for a
//     freshness of their own, and a token would only send them to the primary;
//   - a continuation token's position is honoured at every level, so that paging never
//     goes back in time whatever the level.
type Read struct {
	Consistency storage.Consistency
	Token       storage.Position
}

// Served is where a request's reads were served and the position they are covered by
// (storage.View's Source and Position): the response's x-ms-session-token,
// x-cerulean-read-source and x-cerulean-read-position.
type Served struct {
	Source   string
	Position storage.Position
}

// options is what the engine is asked for by a read described by rd that continues a page
// read at position cont (0 for a first page or a single read).
func (rd Read) options(cont storage.Position) storage.ReadOptions {
	o := storage.ReadOptions{Consistency: rd.Consistency, At: cont}
	switch rd.Consistency {
	case storage.Session:
		if rd.Token == 0 {
			o.Consistency = storage.Strong
		}
		o.At = max(o.At, rd.Token)
	case storage.Strong:
		o.At = max(o.At, rd.Token)
	}
	return o
}

// view opens the one View of a request's reads. Errors are mapped (a token the engine has
// not reached is 503 ServerBusy, see mapErr); sc is the scope of the request's other errors.
func (s *Service) view(ctx context.Context, rd Read, cont storage.Position, sc scope) (storage.View, error) {
	v, err := s.eng.ReadView(ctx, rd.options(cont))
	if err != nil {
		return nil, s.mapErr(err, sc)
	}
	return v, nil
}

// served is what a view reports once its reads are done.
func served(v storage.View) Served {
	return Served{Source: v.Source(), Position: v.Position()}
}

// notFound is what a view reports when a read of it failed with err: where it was served
// and its position if err is the answer "no such entity" or "no such table" (the engine's,
// or already mapped to a 404), so that a 404 says where it was read and a stale one can be
// traced; else nothing.
func notFound(v storage.View, err error) Served {
	if e, ok := azerr.As(err); ok && e.Status == http.StatusNotFound ||
		errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrTableNotFound) {
		return served(v)
	}
	return Served{}
}

// Position is a position covering every write that returned before the call: the session
// token of a table-level change (Create Table, Delete Table, Set Table ACL, Set Service
// Properties, Set Table Settings), which reports none of its own. Call it after the write.
func (s *Service) Position(ctx context.Context) (storage.Position, error) {
	p, err := s.eng.Position(ctx)
	return p, s.mapErr(err, tableScope)
}
