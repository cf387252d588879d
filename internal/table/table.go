// Package table holds the table service's semantics, independent of HTTP and JSON: table
// naming rules, entity write modes and If-Match conditions, the mapping of engine errors
// to service error codes, and query paging with continuation.
//
// Every method returns either nil or an *azerr.Error ready to render.
package table

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/odata"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// Service runs table operations against an engine.
type Service struct {
	eng storage.Engine
	log *slog.Logger
	// elastic are the rules that make tables elastic at creation (WithElasticTables).
	elastic []ElasticRule
	// feeds are the rules that turn change feeds on at creation (WithChangeFeedTables).
	feeds []ElasticRule
	// engine is eng.Name(), the engine part of the session tokens (session.go).
	engine string
	// pageBudget is PageBudget, shorter only in tests that cut pages.
	pageBudget time.Duration
	// indexHints spare queries no index can answer a read of their table's settings.
	indexHints indexHints

	// unavailableSince is when the engine last went from answering to failing with
	// storage.ErrUnavailable (Unix nanoseconds), or 0 while it answers.
	unavailableSince atomic.Int64
}

// Health reports whether the storage engine is answering, and if not, since when.
// It changes on the first ErrUnavailable after a success and on the first success after
// failures, and each change is logged once — not per request.
func (s *Service) Health() (ok bool, since time.Time) {
	if t := s.unavailableSince.Load(); t != 0 {
		return false, time.Unix(0, t)
	}
	return true, time.Time{}
}

func (s *Service) markAvailable() {
	if t := s.unavailableSince.Load(); t != 0 && s.unavailableSince.CompareAndSwap(t, 0) {
		s.log.Info("storage reachable again", "down_for", time.Since(time.Unix(0, t)).Round(time.Millisecond))
	}
}

func (s *Service) markUnavailable(err error) {
	if s.unavailableSince.CompareAndSwap(0, time.Now().UnixNano()) {
		s.log.Warn("storage unavailable; answering 503 ServerBusy until it recovers", "err", err)
	}
}

// New returns a Service over eng.
func New(eng storage.Engine, log *slog.Logger, opts ...Option) *Service {
	if log == nil {
		log = slog.Default()
	}
	s := &Service{eng: eng, log: log, pageBudget: PageBudget}
	if eng != nil { // nil: a Service for its pure functions only (tests)
		s.engine = eng.Name()
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// ValidateTableName applies the service's naming rules: 3–63 characters, ASCII letters and
// digits, a letter first, and not the reserved name "tables".
func ValidateTableName(name string) error {
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return azerr.New(azerr.InvalidResourceName)
		}
	}
	if len(name) < 3 || len(name) > 63 {
		return azerr.Newf(azerr.OutOfRangeInput, "The specified resource name length is not within the permissible limits.")
	}
	if storage.TableKey(name) == "tables" {
		return azerr.New(azerr.InvalidResourceName)
	}
	return nil
}

// CreateTable creates a table with settings; an existing table of the same name in any
// case is a conflict. Nil settings — the request did not say — are those of the first
// elastic rule matching the name (WithElasticTables), or a standard table's; given
// settings are checked with CheckSettings and win over the rules.
func (s *Service) CreateTable(ctx context.Context, account, name string, settings *storage.TableSettings) error {
	if err := ValidateTableName(name); err != nil {
		return err
	}
	st := s.settingsFor(name)
	if settings != nil {
		var err error
		if st, err = CheckSettings(*settings); err != nil {
			return err
		}
	}
	defer s.indexHints.forget(account, name)
	return s.mapErr(s.eng.CreateTable(ctx, account, name, st), tableScope)
}

// GetTable returns the table's catalogue entry (its name in original case) with its
// settings, read as rd says.
func (s *Service) GetTable(ctx context.Context, account, name string, rd Read) (storage.TableInfo, Served, error) {
	v, err := s.view(ctx, rd, 0, tableScope)
	if err != nil {
		return storage.TableInfo{}, Served{}, err
	}
	ti, err := v.GetTable(ctx, account, name)
	if err != nil {
		// A lookup of a missing table by its own URL is ResourceNotFound, as for Delete Table.
		return storage.TableInfo{}, notFound(v, err), s.mapErr(err, tableScope)
	}
	s.markAvailable()
	return ti, served(v), nil
}

// DeleteTable deletes a table and, in the background, its entities.
func (s *Service) DeleteTable(ctx context.Context, account, name string) error {
	defer s.indexHints.forget(account, name)
	return s.mapErr(s.eng.DeleteTable(ctx, account, name), tableScope)
}

// TablePage is one page of Query Tables.
type TablePage struct {
	Tables []storage.TableInfo
	// NextTableName is the continuation token of the next page ("" when there is none).
	// It carries the page's position (see QueryEntities).
	NextTableName string
	Served        Served
}

// ListTables returns up to top tables matching filter (nil: all), from the resume point
// (a NextTableName token or ""), in case-insensitive name order, read as rd says and at
// least at the position the token carries. top is as Query.Top: 0 means MaxPageSize and
// TopNone ($top=0) answers an empty, final page after checking the token. The catalogue
// is read from the filter's lower bound and no further than its upper bound; the page
// ends early after PageBudget.
func (s *Service) ListTables(ctx context.Context, account string, filter *odata.Filter, next string, top int, rd Read) (TablePage, error) {
	from, to := filter.TableKeyRange()
	var cont storage.Position
	if next != "" {
		k, pos, err := decodeToken(next)
		if err != nil {
			return TablePage{}, azerr.Newf(azerr.InvalidInput, "The continuation token is not valid.")
		}
		from = max(from, storage.TableKey(k))
		cont = pos
	}
	v, err := s.view(ctx, rd, cont, tableScope)
	if err != nil {
		return TablePage{}, err
	}
	if top < 0 {
		return TablePage{Served: served(v)}, nil // $top=0 (TopNone): an empty, final page
	}
	tables, resume, err := s.listTables(ctx, v, account, filter, from, to, top)
	if err != nil {
		return TablePage{}, err
	}
	p := TablePage{Tables: tables, Served: served(v)}
	if resume != nil {
		p.NextTableName = encodeToken(*resume, p.Served.Position)
	}
	return p, nil
}

// listTablesLookahead is how many tables a full page reads at a time past its last one,
// looking for the next that matches, before it can say whether a continuation is due.
const listTablesLookahead = 100

// listTables reads up to top tables matching filter from table key from to to (nil: no
// bound) and the table key to resume from: that of the next table that matches, or nil
// when none does. A page never carries a continuation that leads nowhere — past the
// filter's range or to tables it rejects (docs/protocol.md §3.1: the token is sent only
// when more tables follow), which would cost every SDK one more, empty, page: a full page
// reads on until a table matches or the catalogue (or the range) ends. Table keys are
// lower case while filters compare names as they are, so a filter's range in key order is
// often unbounded above (TableName lt 'zzzb' admits 'ZZZZ'): this look-ahead, not the
// range, is what ends the paging there. Past PageBudget the page ends where the scan
// stands, with a continuation, as every page does.
func (s *Service) listTables(ctx context.Context, v storage.Reader, account string, filter *odata.Filter, from string, to *string, top int) ([]storage.TableInfo, *string, error) {
	if top == 0 || top > MaxPageSize {
		top = MaxPageSize
	}
	deadline := time.Now().Add(s.pageBudget)
	var out []storage.TableInfo
	for to == nil || from < *to {
		n := top - len(out)
		if n == 0 {
			n = listTablesLookahead
		}
		tables, resume, err := v.ListTables(ctx, account, from, n)
		if err != nil {
			return nil, nil, s.mapErr(err, tableScope)
		}
		for _, t := range tables {
			k := storage.TableKey(t.Name)
			if to != nil && k >= *to {
				return out, nil, nil
			}
			if !filter.MatchTableName(t.Name) {
				continue
			}
			if len(out) == top {
				return out, &k, nil // a table that matches follows: resume there
			}
			out = append(out, t)
		}
		if resume == "" {
			return out, nil, nil
		}
		from = storage.TableKey(resume)
		if to != nil && from >= *to {
			return out, nil, nil
		}
		if len(out) == top && filter.MatchTableName(resume) {
			return out, &from, nil // the engine named the next table, and it matches
		}
		if !time.Now().Before(deadline) {
			return out, &from, nil
		}
	}
	return out, nil, nil
}

// Condition is an If-Match precondition.
type Condition struct {
	// Present is whether the request carried If-Match at all.
	Present bool
	// Any is If-Match: *.
	Any bool
	// Version is the version the ETag names; -1 when the ETag can never match.
	Version int64
}

// ParseCondition interprets an If-Match header value. present says whether the header was
// sent. "*" matches any existing entity; an empty value never matches (412, as Azurite); a
// value that is one weak entity-tag is a precondition that holds only when it names the
// entity's version (entity.ParseETag: "W/" or "w/", ':' or "%3A"); anything else — a strong
// entity-tag, not an entity-tag at all, a list — is 400 InvalidInput with the service's
// message (docs/compatibility.md "If-Match"). Surrounding whitespace is ignored.
func ParseCondition(value string, present bool) (Condition, error) {
	if !present {
		return Condition{}, nil
	}
	switch strings.Trim(value, " \t") {
	case "*":
		return Condition{Present: true, Any: true}, nil
	case "":
		return Condition{Present: true, Version: -1}, nil
	}
	v, ok, err := entity.ParseETag(value)
	if err != nil {
		return Condition{}, azerr.Newf(azerr.InvalidInput, "The etag value '%s' specified in one of the request headers is not valid. Please make sure only one etag value is specified and is valid.", value)
	}
	if !ok {
		v = -1
	}
	return Condition{Present: true, Version: v}, nil
}

// ifMatch is the engine's form of a present condition: 0 means any version.
func (c Condition) ifMatch() int64 {
	if c.Any {
		return 0
	}
	return c.Version
}

// Mode is how a write combines with a stored entity.
type Mode uint8

const (
	// ReplaceMode replaces every property (PUT).
	ReplaceMode Mode = iota
	// MergeMode overlays the given properties (MERGE, PATCH).
	MergeMode
)

// Commit is what a committed single-entity write reports: the entity's new version (0
// after a delete) and the commit's position, which a session token carries (Token).
type Commit struct {
	Version  int64
	Position storage.Position
}

// InsertEntity inserts e; it must not exist yet.
func (s *Service) InsertEntity(ctx context.Context, account, table string, e *entity.Entity) (Commit, error) {
	return s.InsertEntityExpiring(ctx, account, table, e, storage.ExpiryComputed)
}

// InsertEntityExpiring is InsertEntity with an explicit expiry (storage.Mutation.Expiry:
// storage.ExpiryComputed for none), which an elastic table takes in place of the computed
// one and a standard table refuses (400 InvalidInput).
func (s *Service) InsertEntityExpiring(ctx context.Context, account, table string, e *entity.Entity, expiry int64) (Commit, error) {
	if err := entity.Validate(e); err != nil {
		return Commit{}, err
	}
	return s.applyOne(ctx, account, table, e.PartitionKey, storage.Mutation{Op: storage.Insert, RowKey: e.RowKey, Props: e.Props, Expiry: expiry})
}

// WriteEntity is Update, Merge, Insert-or-Replace and Insert-or-Merge: without If-Match it
// is an upsert; with If-Match the entity must exist (and match, unless "*").
func (s *Service) WriteEntity(ctx context.Context, account, table string, e *entity.Entity, mode Mode, cond Condition) (Commit, error) {
	return s.WriteEntityExpiring(ctx, account, table, e, mode, cond, storage.ExpiryComputed)
}

// WriteEntityExpiring is WriteEntity with an explicit expiry, as InsertEntityExpiring.
func (s *Service) WriteEntityExpiring(ctx context.Context, account, table string, e *entity.Entity, mode Mode, cond Condition, expiry int64) (Commit, error) {
	if err := entity.Validate(e); err != nil {
		return Commit{}, err
	}
	m := storage.Mutation{Op: OpFor(mode, cond), RowKey: e.RowKey, Props: e.Props, Expiry: expiry}
	if cond.Present {
		m.IfMatch = cond.ifMatch()
	}
	return s.applyOne(ctx, account, table, e.PartitionKey, m)
}

// DeleteEntity deletes an entity; If-Match is required. The Commit's Version is 0.
func (s *Service) DeleteEntity(ctx context.Context, account, table, pk, rk string, cond Condition) (Commit, error) {
	if !cond.Present {
		return Commit{}, azerr.Newf(azerr.MissingRequiredHeader, "An HTTP header that's mandatory for this request is not specified.").WithDetail("If-Match")
	}
	return s.applyOne(ctx, account, table, pk, storage.Mutation{Op: storage.Delete, RowKey: rk, IfMatch: cond.ifMatch()})
}

// GetEntity reads one entity as rd says. A token the engine has not reached within its
// short wait is 503 ServerBusy (storage.ErrFuturePosition, see mapErr): never an older
// state than the token covers.
func (s *Service) GetEntity(ctx context.Context, account, table, pk, rk string, rd Read) (storage.Record, Served, error) {
	return s.getEntity(ctx, account, table, pk, rk, rd, false)
}

// GetEntityEncoded is GetEntity for a caller that only writes the entity out: the record
// may carry its properties in the stored form (storage.Reader.GetEncoded), which
// edmjson.AppendRecord writes without decoding them.
func (s *Service) GetEntityEncoded(ctx context.Context, account, table, pk, rk string, rd Read) (storage.Record, Served, error) {
	return s.getEntity(ctx, account, table, pk, rk, rd, true)
}

func (s *Service) getEntity(ctx context.Context, account, table, pk, rk string, rd Read, encoded bool) (storage.Record, Served, error) {
	v, err := s.view(ctx, rd, 0, entityScope)
	if err != nil {
		return storage.Record{}, Served{}, err
	}
	get := v.Get
	if encoded {
		get = v.GetEncoded
	}
	rec, err := get(ctx, account, table, pk, rk)
	if err != nil {
		return storage.Record{}, notFound(v, err), s.mapErr(err, entityScope)
	}
	s.markAvailable()
	return rec, served(v), nil
}

func (s *Service) applyOne(ctx context.Context, account, table, pk string, m storage.Mutation) (Commit, error) {
	applied, err := s.eng.Apply(ctx, account, table, pk, []storage.Mutation{m})
	if err != nil {
		return Commit{}, s.mapErr(err, entityScope)
	}
	s.markAvailable()
	return Commit{Version: applied.Versions[0], Position: applied.Position}, nil
}

type scope uint8

const (
	tableScope  scope = iota // the request addresses a table itself
	entityScope              // the request addresses entities in a table
)

// diskFullDetail is the text added to a write refused because the engine's disk is full.
const diskFullDetail = "The server's disk is full: writes are refused until space is freed. Reads are served."

// futureTokenMessage answers a read whose session token is ahead of what the engine has
// committed (storage.ErrFuturePosition): the token comes from another store or from a
// write this server cannot see yet. Never a stale read: the client retries.
const futureTokenMessage = "The session token is ahead of this server: it covers writes the server has not seen yet, so it does not answer the read from an older state. Retry after the Retry-After interval; if this persists, the token comes from another store."

// uniqueViolation is the answer to a write refused by a unique index: 409
// UniqueIndexViolation naming the index and, when the engine knows it, the entity that
// holds the value, so the client can find it (docs/indexes.md). Keys are quoted as the
// service quotes them in its own messages.
func uniqueViolation(uv *storage.UniqueViolation) *azerr.Error {
	if uv.PartitionKey == "" && uv.RowKey == "" {
		return azerr.Newf(azerr.UniqueIndexViolation, "The entity holds a value of the unique index '%s' that another entity of the table holds.", uv.Index)
	}
	return azerr.Newf(azerr.UniqueIndexViolation, "The entity holds a value of the unique index '%s' that the entity with PartitionKey '%s' and RowKey '%s' holds.", uv.Index, uv.PartitionKey, uv.RowKey)
}

// mapErr turns an engine error into a service error. A missing table is TableNotFound
// for entity operations but ResourceNotFound when the table itself is addressed.
func (s *Service) mapErr(err error, sc scope) error {
	if err == nil || !errors.Is(err, storage.ErrUnavailable) {
		// Any answer other than "unavailable" means the engine is reachable.
		s.markAvailable()
	}
	if err == nil {
		return nil
	}
	var ae *azerr.Error
	if errors.As(err, &ae) {
		return ae
	}
	var uv *storage.UniqueViolation
	if errors.As(err, &uv) {
		return uniqueViolation(uv)
	}
	switch {
	case errors.Is(err, storage.ErrTableNotFound):
		if sc == tableScope {
			return azerr.New(azerr.ResourceNotFound)
		}
		return azerr.New(azerr.TableNotFound)
	case errors.Is(err, storage.ErrTableExists):
		return azerr.New(azerr.TableAlreadyExists)
	case errors.Is(err, storage.ErrNotFound):
		return azerr.New(azerr.ResourceNotFound)
	case errors.Is(err, storage.ErrExists):
		return azerr.New(azerr.EntityAlreadyExists)
	case errors.Is(err, storage.ErrVersionMismatch):
		return azerr.New(azerr.UpdateConditionNotSatisfied)
	case errors.Is(err, storage.ErrUnavailable):
		s.markUnavailable(err)
		return azerr.New(azerr.ServerBusy)
	case errors.Is(err, storage.ErrFuturePosition):
		// 503 with Retry-After (the server adds it to every ServerBusy), which the SDKs
		// retry: the position may be reached in a moment (a replica catching up).
		return azerr.Newf(azerr.ServerBusy, futureTokenMessage)
	case errors.Is(err, storage.ErrNoSpace):
		// The engine is reachable and serves reads; it refuses writes until space is
		// freed, and logs that state's changes itself. 503 with Retry-After, like any
		// condition the client can wait out (RFC 9110 §15.6.4); the SDKs retry it.
		return azerr.New(azerr.ServerBusy).WithDetail(diskFullDetail)
	case errors.Is(err, context.DeadlineExceeded):
		return azerr.New(azerr.OperationTimedOut)
	case errors.Is(err, context.Canceled):
		return azerr.New(azerr.OperationTimedOut)
	}
	s.log.Error("storage error", "err", err)
	return azerr.New(azerr.InternalError)
}
