package table

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/index"
	"github.com/ceruleandb/cerulean/internal/odata"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// Index plans (docs/indexes-design.md §4). A query whose filter the key plan does not
// capture exactly may run on a ready secondary index of its table instead, when the
// index's spans are bounded and the bounded probes say it reads fewer entities:
//
//   - an equality plan (a one-property index whose spans are points, at most
//     MaxEqualityPoints) reads each point's entries, which are in (PartitionKey, RowKey)
//     order, and merges them: its pages are in Azure's order and its continuation is the
//     standard one (the next entity's keys), interchangeable with a key plan's;
//   - a range plan (anything else bounded) reads the spans in index order, and its
//     continuation is an index token (ixToken), valid only on that index.
//
// The filter's key ranges (clipped by a continuation, and by the Bound of a shared access
// signature) reach the engine as IndexScanRequest.KeyFilter and are checked again here
// on every row returned; the $filter evaluator runs on every row: the final judge.

// MaxEqualityPoints is the most points an equality plan merges; a filter with more
// values runs as a range plan on the index, or on the keys.
const MaxEqualityPoints = 64

// The planner's probes (CountIndex, CountRows) are bounded: the first counts up to
// probeLimit, and while every candidate index and the key plan all reach the limit it is
// raised eightfold, up to probeMax. A probe thus costs about what the plan it picks reads
// (a few times over at most, and key-only), however large the table: a plan is chosen at
// a cost proportional to its own. An index whose spans hold probeMax entries or more is
// not used: an index plan reads each entity by a seek, the key plan reads in order.
const (
	probeLimit = 1000
	probeMax   = 64 << 10
)

// probeRanges is the most key ranges the key plan's probe counts; beyond them the key plan
// is taken to read at least the probe's limit (its ranges are as many seeks at least).
const probeRanges = 64

// plan is how a page is read: on the keys (def nil) or on an index.
type plan struct {
	// ranges are the key ranges the page may read (the filter's, clipped by the
	// continuation and the Bound).
	ranges []odata.KeyRange
	// def is the index read, nil for a key plan; spans its index-key spans.
	def   *storage.IndexDef
	spans []index.Span
	// points: an equality plan (every span a point of a one-property index).
	points bool
}

// name is the plan's x-cerulean-plan value: "keys", "keys: 3 ranges" (one range,
// which may be the whole table, is plain "keys"), "keys: point" (the Get fast path),
// "index ByEmail: 1 point", "index ByEmail: 5 points", "index ByDate: range",
// "index ByDate: 2 ranges".
func (pl *plan) name() string {
	if pl.def == nil {
		if len(pl.ranges) == 1 {
			return "keys"
		}
		return fmt.Sprintf("keys: %d ranges", len(pl.ranges))
	}
	switch {
	case pl.points && len(pl.spans) == 1:
		return "index " + pl.def.Name + ": 1 point"
	case pl.points:
		return fmt.Sprintf("index %s: %d points", pl.def.Name, len(pl.spans))
	case len(pl.spans) == 1:
		return "index " + pl.def.Name + ": range"
	}
	return fmt.Sprintf("index %s: %d ranges", pl.def.Name, len(pl.spans))
}

// planPoint is the x-cerulean-plan of a page served by the Get fast path.
const planPoint = "keys: point"

// planNone is the x-cerulean-plan of a $top=0 page, which reads no entity.
const planNone = "none"

// cursor is where a page resumes: nothing (a first page), the standard continuation (key:
// the next entity's keys), or an index token (ix).
type cursor struct {
	key *storage.Key
	ix  *ixToken
}

// isPoint reports whether span s holds the entries of exactly one whole key of n values
// (n the index's properties): the entries of one value of each, or of the Int64s and
// Doubles that round to them, which the evaluator tells apart. Such entries are in
// (PartitionKey, RowKey) order.
func isPoint(s index.Span, n int) bool {
	k := s.Lo
	for range n {
		l, ok := index.ValueLen(k)
		if !ok {
			return false
		}
		k = k[l:]
	}
	return len(k) == 0 && s.Hi != nil && bytes.Equal(s.Hi, index.PrefixEnd(s.Lo))
}

// allPoints reports whether spans make an equality plan on def: at most
// MaxEqualityPoints points of its whole key.
func allPoints(def *storage.IndexDef, spans []index.Span) bool {
	n := len(def.Properties)
	return len(spans) <= MaxEqualityPoints && !slices.ContainsFunc(spans, func(s index.Span) bool { return !isPoint(s, n) })
}

// indexSpans returns the spans of index def that hold every entity f accepts, and whether
// def can answer f at all. An index holds only the entities that have all its properties,
// so f must allow none without them: its spans must be bounded for every property of a
// compound index, not just the first.
//
// Each property's spans (Filter.IndexSpans) hold every accepted entity's value of it, so
// their product holds its key: while the spans so far are points of the first j values
// (and the product stays within MaxEqualityPoints spans), the (j+1)th property's spans
// narrow each point to the keys that continue it with those spans.
func indexSpans(f *odata.Filter, def *storage.IndexDef) ([]index.Span, bool) {
	per := make([][]index.Span, len(def.Properties))
	for j, p := range def.Properties {
		spans, ok := f.IndexSpans(p)
		if !ok {
			return nil, false
		}
		per[j] = spans
	}
	spans := per[0]
	for j := 1; j < len(per); j++ {
		if len(spans)*len(per[j]) > MaxEqualityPoints || slices.ContainsFunc(spans, func(s index.Span) bool { return !isPoint(s, j) }) {
			break
		}
		next := make([]index.Span, 0, len(spans)*len(per[j]))
		for _, pt := range spans {
			for _, s := range per[j] {
				sp := index.Span{Lo: append(slices.Clone(pt.Lo), s.Lo...), Hi: pt.Hi}
				if s.Hi != nil {
					sp.Hi = append(slices.Clone(pt.Lo), s.Hi...)
				}
				next = append(next, sp)
			}
		}
		spans = next
	}
	return spans, true
}

// choosePlan picks how the page of f over ranges is read, from the table's ready indexes
// (its settings as rd reads them: Pebble's catalogue is in memory, PostgreSQL's a
// statement). A query the key plan captures exactly, or that can match nothing, never
// asks, nor one no index of the table could answer a moment ago (indexHints), so tables
// without indexes are read as before. An index token must be honoured as it stands or refused: its
// index must still be declared and ready, and f must still plan on it (400 InvalidInput
// otherwise — the query starts again; skipping or repeating entities is never an option).
// A standard continuation resumes on the keys or on an equality plan, whose orders agree.
func (s *Service) choosePlan(ctx context.Context, rd storage.Reader, account, table string, f *odata.Filter, ranges []odata.KeyRange, cur cursor) (plan, error) {
	pl := plan{ranges: ranges}
	if cur.ix == nil && (f.Exact() || len(ranges) == 0) {
		return pl, nil
	}
	if cur.ix == nil {
		if defs, ok := s.indexHints.get(account, table); ok && !slices.ContainsFunc(defs, func(d storage.IndexDef) bool {
			_, ok := indexSpans(f, &d)
			return ok && d.State == storage.IndexReady
		}) {
			return pl, nil // no index of the table (as of a moment ago) can answer f
		}
	}
	info, err := rd.GetTable(ctx, account, table)
	if err != nil {
		return plan{}, s.mapErr(err, entityScope)
	}
	s.indexHints.put(account, table, info.Settings.Indexes)
	if cur.ix != nil {
		for _, d := range info.Settings.Indexes {
			if d.ID != cur.ix.index || d.State != storage.IndexReady {
				continue
			}
			if spans, ok := indexSpans(f, &d); ok {
				pl.def, pl.spans = &d, spans
				return pl, nil
			}
		}
		return plan{}, azerr.Newf(azerr.InvalidInput, "The continuation token is not valid for this query: the index it continues on has been dropped, or the filter no longer uses it. Start the query again.")
	}
	if len(info.Settings.Indexes) == 0 {
		return pl, nil
	}
	for limit := probeLimit; ; limit *= 8 {
		best, bestCost := -1, math.MaxInt
		var bestSpans []index.Span
		var bestPoints bool
		for i, d := range info.Settings.Indexes {
			if d.State != storage.IndexReady {
				continue
			}
			spans, ok := indexSpans(f, &d)
			if !ok {
				continue
			}
			points := allPoints(&d, spans)
			if cur.key != nil && !points {
				continue // a range plan's order is not the keys': it cannot take up a key continuation
			}
			var cost int
			if d.Unique && points {
				cost = len(spans) // a value of a unique index is one entity at most
			} else {
				n, err := rd.CountIndex(ctx, account, table, d.ID, spans, limit)
				switch {
				case errors.Is(err, storage.ErrIndexNotFound):
					continue // dropped since the settings were read
				case err != nil:
					return plan{}, s.mapErr(err, entityScope)
				case n >= limit:
					continue
				}
				cost = n
			}
			if cost < bestCost {
				best, bestCost, bestSpans, bestPoints = i, cost, spans, points
			}
		}
		// The index plan reads an entry and a row for each of its entities, the key plan
		// reads rows in order: the index wins when the key plan would read more than
		// twice as many. With no index under the limit, the key plan wins if it reads at
		// most twice the limit; else both are larger, and the probes go on.
		cost := bestCost
		if best < 0 {
			cost = limit
		}
		rows, err := s.countRows(ctx, rd, account, table, ranges, 2*cost+1)
		if err != nil {
			return plan{}, err
		}
		if rows <= 2*cost {
			return pl, nil
		}
		if best < 0 {
			if limit >= probeMax {
				return pl, nil
			}
			continue
		}
		d := info.Settings.Indexes[best]
		pl.def, pl.spans, pl.points = &d, bestSpans, bestPoints
		return pl, nil
	}
}

// countRows counts the rows in ranges, stopping at limit (CountRows probes); more than
// probeRanges ranges count as limit.
func (s *Service) countRows(ctx context.Context, rd storage.Reader, account, table string, ranges []odata.KeyRange, limit int) (int, error) {
	if len(ranges) > probeRanges {
		return limit, nil
	}
	n := 0
	for _, r := range ranges {
		c, err := rd.CountRows(ctx, account, table, r.Start, r.End, limit-n)
		if err != nil {
			return 0, s.mapErr(err, entityScope)
		}
		if n += c; n >= limit {
			break
		}
	}
	return n, nil
}

// indexHintTTL is how long the planner trusts what it last read of a table's indexes to
// say that none can answer a filter (indexHints).
const indexHintTTL = time.Second

// maxIndexHints bounds indexHints; when full, it starts over.
const maxIndexHints = 10_000

// indexHints remembers, per table, the indexes the planner last read, so that a query no
// index can answer does not read the table's settings first (on PostgreSQL a statement
// of its own). It only ever decides for the key plan, which is always correct: an index
// declared or made ready meanwhile is used at most indexHintTTL later (at once when this
// Service changed the table); whenever an index may answer, the settings are read from the
// query's view and the plan is chosen from them.
type indexHints struct {
	mu sync.RWMutex
	m  map[[2]string]indexHint
}

type indexHint struct {
	defs []storage.IndexDef
	at   time.Time
}

func hintKey(account, table string) [2]string { return [2]string{account, storage.TableKey(table)} }

// get returns the table's indexes as read less than indexHintTTL ago.
func (h *indexHints) get(account, table string) ([]storage.IndexDef, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	e, ok := h.m[hintKey(account, table)]
	if !ok || time.Since(e.at) >= indexHintTTL {
		return nil, false
	}
	return e.defs, true
}

// put records the table's indexes as just read.
func (h *indexHints) put(account, table string, defs []storage.IndexDef) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= maxIndexHints {
		h.m = make(map[[2]string]indexHint)
	}
	h.m[hintKey(account, table)] = indexHint{defs: defs, at: time.Now()}
}

// forget drops what is known of the table's indexes: this Service changed them.
func (h *indexHints) forget(account, table string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, hintKey(account, table))
}

// keyFilter returns the test of a row's keys against sorted, disjoint ranges (the
// IndexScanRequest.KeyFilter of a plan), nil when they hold every key.
func keyFilter(ranges []odata.KeyRange) func(pk, rk string) bool {
	if len(ranges) == 1 && ranges[0].Start == (storage.Key{}) && ranges[0].End == nil {
		return nil
	}
	return func(pk, rk string) bool {
		k := storage.Key{PartitionKey: pk, RowKey: rk}
		i := sort.Search(len(ranges), func(i int) bool { return ranges[i].End == nil || k.Less(*ranges[i].End) })
		return i < len(ranges) && !k.Less(ranges[i].Start)
	}
}

// ixPage is what a page read on an index keeps to cut it later (Page.CutAt).
type ixPage struct {
	def    storage.IndexDef
	points bool
	// start is where a range plan's page began (nil: at the start of its spans).
	start *storage.IndexCursor
}

// ixCursor is the index entry of rec, a row read from index def: its values' keys, then
// its keys. Every row an index read returns has all of def's properties (it has an entry).
func ixCursor(def *storage.IndexDef, rec *storage.Record) storage.IndexCursor {
	var key []byte
	for _, name := range def.Properties {
		for _, p := range rec.Entity.Props {
			if p.Name == name {
				key = index.AppendValue(key, p.Value)
				break
			}
		}
	}
	return storage.IndexCursor{Key: key, PartitionKey: rec.Entity.PartitionKey, RowKey: rec.Entity.RowKey}
}

// rangePage reads one page of a range plan: the spans in index order from after (nil:
// their start), through KeyFilter and the filter, up to top entities, PageBytes (past by at
// most one entity) or the page budget; its continuation is an index token after the last
// entry passed.
func (s *Service) rangePage(ctx context.Context, rd storage.Reader, account, table string, f *odata.Filter, pl *plan, after *storage.IndexCursor, top int) (Page, error) {
	kf := keyFilter(pl.ranges)
	deadline := time.Now().Add(s.pageBudget)
	p := Page{ix: &ixPage{def: *pl.def, start: after}}
	size := 0
	var next *storage.IndexCursor
	for {
		if err := ctx.Err(); err != nil {
			return Page{}, s.mapErr(err, entityScope)
		}
		res, err := rd.ScanIndex(ctx, account, table, storage.IndexScanRequest{
			Index: pl.def.ID, Spans: pl.spans, After: after, Limit: top - len(p.Records), KeyFilter: kf})
		if err != nil {
			return Page{}, s.indexErr(err)
		}
		p.Scanned += res.Examined
		cut := -1
		for i := range res.Records {
			rec := &res.Records[i]
			if (kf == nil || kf(rec.Entity.PartitionKey, rec.Entity.RowKey)) && f.MatchRecord(rec) {
				p.Records = append(p.Records, *rec)
				size += storage.RecordSize(rec)
			}
			if size >= PageBytes && i+1 < len(res.Records) {
				cut = i
				break
			}
		}
		if cut >= 0 {
			c := ixCursor(pl.def, &res.Records[cut])
			next = &c
			break
		}
		if res.Next == nil {
			break
		}
		after = res.Next
		if len(p.Records) >= top || size >= PageBytes || !time.Now().Before(deadline) {
			p.Cut = len(p.Records) < top && size < PageBytes
			next = after
			break
		}
	}
	if next != nil {
		p.NextPartitionKey = encodeIndexToken(pl.def.ID, next)
		p.NextRowKey = encodeToken("", 0)
	}
	s.markAvailable()
	return p, nil
}

// ixStream is one point's entries in an equality plan: rows read ahead (buf) and where
// the next read resumes.
type ixStream struct {
	span  index.Span
	after *storage.IndexCursor
	buf   []storage.Record
	done  bool
	limit int // the next read's size; it doubles with each read
}

// equalityPage reads one page of an equality plan: the points' streams merged in
// (PartitionKey, RowKey) order, from the standard continuation from (nil: the start) — the
// entity at from itself by a Get, the streams from after it. It ends as a key plan's page
// does, and its continuation is the next entity's keys, read ahead so that the last page
// carries none.
func (s *Service) equalityPage(ctx context.Context, rd storage.Reader, account, table string, f *odata.Filter, pl *plan, from *storage.Key, top int) (Page, error) {
	kf := keyFilter(pl.ranges)
	deadline := time.Now().Add(s.pageBudget)
	p := Page{ix: &ixPage{def: *pl.def, points: true}}
	size := 0
	if from != nil && (kf == nil || kf(from.PartitionKey, from.RowKey)) {
		rec, err := rd.Get(ctx, account, table, from.PartitionKey, from.RowKey)
		switch {
		case errors.Is(err, storage.ErrNotFound):
		case err != nil:
			return Page{}, s.mapErr(err, entityScope)
		default:
			p.Scanned++
			if f.MatchRecord(&rec) {
				p.Records = append(p.Records, rec)
				size += storage.RecordSize(&rec)
			}
		}
	}
	first := max(4, min(top+1, (top+1)/max(len(pl.spans), 1)+1))
	streams := make([]ixStream, len(pl.spans))
	for i, sp := range pl.spans {
		streams[i] = ixStream{span: sp, limit: first}
		if from != nil {
			streams[i].after = &storage.IndexCursor{Key: sp.Lo, PartitionKey: from.PartitionKey, RowKey: from.RowKey}
		}
	}
	popped := 0
	for {
		full := len(p.Records) >= top || size >= PageBytes || popped > 0 && !time.Now().Before(deadline)
		// Refill the streams that ran dry, so that each one not done has its next row at
		// hand (a full page needs only that: its continuation's keys).
		for i := range streams {
			st := &streams[i]
			for len(st.buf) == 0 && !st.done {
				if err := ctx.Err(); err != nil {
					return Page{}, s.mapErr(err, entityScope)
				}
				n := st.limit
				if full {
					n = 1
				} else {
					st.limit = min(2*st.limit, MaxPageSize+1)
				}
				res, err := rd.ScanIndex(ctx, account, table, storage.IndexScanRequest{
					Index: pl.def.ID, Spans: []index.Span{st.span}, After: st.after, Limit: n, KeyFilter: kf})
				if err != nil {
					return Page{}, s.indexErr(err)
				}
				p.Scanned += res.Examined
				for _, rec := range res.Records {
					if kf == nil || kf(rec.Entity.PartitionKey, rec.Entity.RowKey) {
						st.buf = append(st.buf, rec)
					}
				}
				st.after, st.done = res.Next, res.Next == nil
			}
		}
		m := -1
		for i := range streams {
			if len(streams[i].buf) > 0 && (m < 0 || keyOf(&streams[i].buf[0]).Less(keyOf(&streams[m].buf[0]))) {
				m = i
			}
		}
		if m < 0 {
			break // every stream is done
		}
		if full {
			next := keyOf(&streams[m].buf[0])
			p.Cut = len(p.Records) < top && size < PageBytes
			p.NextPartitionKey = encodeToken(next.PartitionKey, 0)
			p.NextRowKey = encodeToken(next.RowKey, 0)
			break
		}
		rec := streams[m].buf[0]
		streams[m].buf[0] = storage.Record{}
		streams[m].buf = streams[m].buf[1:]
		popped++
		if f.MatchRecord(&rec) {
			p.Records = append(p.Records, rec)
			size += storage.RecordSize(&rec)
		}
	}
	s.markAvailable()
	return p, nil
}

func keyOf(r *storage.Record) storage.Key {
	return storage.Key{PartitionKey: r.Entity.PartitionKey, RowKey: r.Entity.RowKey}
}

// indexErr maps an index read's error, but for storage.ErrIndexNotFound — an index
// dropped since the plan was chosen — which it returns as it is for queryPage to decide.
func (s *Service) indexErr(err error) error {
	if errors.Is(err, storage.ErrIndexNotFound) {
		s.markAvailable()
		return err
	}
	return s.mapErr(err, entityScope)
}

// errIndexGone answers a page resuming an index token whose index was dropped as it read.
func errIndexGone() error {
	return azerr.Newf(azerr.InvalidInput, "The index this query runs on has been dropped. Start the query again.")
}

// Index tokens. A range plan's continuation goes in NextPartitionKey as "ix1." and the
// URL-safe base64 (no padding) of: the index id (uvarint), then 0 (resume at the start of
// the spans) or 1 and the entry to resume after — its index key and PartitionKey, each
// uvarint-length-prefixed, and its RowKey, the rest. NextRowKey carries the page's
// position in a standard token of the empty key, so both are non-empty (an SDK stops
// paging when either is missing). A standard token always starts "1!", so neither is ever
// read as the other, whatever the keys (a PartitionKey "ix1.…" is base64 inside "1!…").
const ixTokenPrefix = "ix1."

// ixToken is a decoded index token.
type ixToken struct {
	index uint32
	after *storage.IndexCursor
}

// encodeIndexToken writes the token resuming index id's read after entry after (nil:
// at its start).
func encodeIndexToken(id uint32, after *storage.IndexCursor) string {
	b := binary.AppendUvarint(nil, uint64(id))
	if after == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(len(after.Key)))
		b = append(b, after.Key...)
		b = binary.AppendUvarint(b, uint64(len(after.PartitionKey)))
		b = append(b, after.PartitionKey...)
		b = append(b, after.RowKey...)
	}
	return ixTokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// decodeIndexToken reads what encodeIndexToken writes; anything else is errBadToken.
func decodeIndexToken(tok string) (ixToken, error) {
	enc, ok := strings.CutPrefix(tok, ixTokenPrefix)
	if !ok {
		return ixToken{}, errBadToken
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return ixToken{}, errBadToken
	}
	id, n := binary.Uvarint(b)
	if n <= 0 || id == 0 || id > math.MaxUint32 || len(b) == n {
		return ixToken{}, errBadToken
	}
	t := ixToken{index: uint32(id)}
	flag, b := b[n], b[n+1:]
	switch flag {
	case 0:
		if len(b) != 0 {
			return ixToken{}, errBadToken
		}
		return t, nil
	case 1:
	default:
		return ixToken{}, errBadToken
	}
	field := func() ([]byte, bool) {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, false
		}
		f := b[n : n+int(l)]
		b = b[n+int(l):]
		return f, true
	}
	key, ok1 := field()
	pk, ok2 := field()
	if !ok1 || !ok2 || len(key) == 0 {
		return ixToken{}, errBadToken
	}
	t.after = &storage.IndexCursor{Key: slices.Clone(key), PartitionKey: string(pk), RowKey: string(b)}
	return t, nil
}
