package table

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/odata"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// MaxPageSize is the most entities or tables one page holds.
const MaxPageSize = 1000

// TopNone is the page size of a query that asks for no entities at all ($top=0, which
// MS-ODATA §2.2.3.6.1.8 allows: "an integer greater than or equal to zero"). Its page is
// empty and final: it carries no continuation, since a continuation from a page that may
// hold nothing could never advance and an SDK pager would follow it forever. The table,
// and any continuation token sent, are still checked as for any other page.
const TopNone = -1

// PageBudget is how long one query page may run before it returns what it has and a
// continuation (the service's 5 s rule).
const PageBudget = 5 * time.Second

// PageBytes bounds a query page by size (storage.RecordSize: keys plus stored
// properties) as well as by count, so the memory a query takes does not grow with its
// entities' size: a full page of 1 MiB entities would otherwise be a gigabyte held at once,
// several times over by the time it is encoded. 4 MiB keeps every page of entities up to
// about 4 KiB whole (1000 of them), holds at least four of the largest (1 MiB) entities,
// and bounds a page's decoded records to a few MiB — and the response, which the server
// streams as it encodes, to about that times JSON's expansion (at most 4/3 for Binary,
// more only for strings of control characters). The continuation that ends such a page
// is the one any page may carry (docs/protocol.md §5.6), so no client notices.
const PageBytes = 4 << 20

// Query selects entities of one table.
type Query struct {
	// Filter is the parsed $filter; nil selects every entity.
	Filter *odata.Filter
	// Top is the page size: 1–1000; 0 (no $top) means 1000; TopNone is $top=0.
	Top int
	// NextPartitionKey and NextRowKey are the continuation tokens of the previous page.
	NextPartitionKey, NextRowKey string
	// Bound, if set, confines the query to a key range whatever its filter says (the range
	// of a shared access signature).
	Bound *odata.KeyRange
	// Read is how the page is read (consistency level and session token); the page also
	// sees at least the position its continuation token carries, at every level.
	Read Read
	// Encoded lets the page's records carry their properties in the stored form
	// (storage.Record.Encoded) where the engine keeps it: for a caller that only writes
	// them out, such as a query response (edmjson.AppendRecord takes both forms).
	Encoded bool
}

// Page is one page of query results. NextPartitionKey/NextRowKey are both non-empty when
// more results may follow (an SDK stops when either is missing) and both empty otherwise;
// NextRowKey carries the page's position (Served.Position), so the next page is never
// read from an older state, whichever front end and replica serve it.
type Page struct {
	Records                      []storage.Record
	NextPartitionKey, NextRowKey string
	Served                       Served
	// Plan names how the page was read, for the x-cerulean-plan header and the access
	// log: "keys", "keys: 3 ranges", "keys: point", "index ByEmail: 1 point",
	// "index ByDate: range", … (see plan.name), "none" for $top=0.
	Plan string
	// Scanned is how many stored entities the engine examined for the page (at least
	// len(Records); more when the filter is not captured by key ranges).
	Scanned int
	// Cut is whether PageBudget ended the page before it was full or its ranges done.
	Cut bool
	// blocks hold the Encoded records' bags (storage.ScanResult.Blocks).
	blocks []*[]byte
	// ix is set on a page read on an index (CutAt needs its plan).
	ix *ixPage
}

// Release hands the buffers of the page's Encoded records back for reuse by later
// scans and empties the page. Call it once the records are written out, and use none of
// them after; a page never released costs only its buffers' recycling.
func (p *Page) Release() {
	clear(p.Records)
	p.Records = nil
	storage.PutBlocks(p.blocks)
	p.blocks = nil
}

// QueryEntities returns one page of q's results in (PartitionKey, RowKey) order, or in
// index order on a range plan of a secondary index (docs/indexes-design.md §4).
//
// The filter's key ranges are scanned in order; the filter itself runs on what they hold
// unless the ranges capture it exactly. A filter they do not capture may run on a ready
// index of the table instead (choosePlan), with the same paging rules. A page ends at Top entities, at the end of the
// last range, when its entities' size reaches PageBytes (past it by at most one entity),
// or when PageBudget has passed — then it may hold fewer entities, even none, and its
// continuation resumes exactly where the scan stopped, so resuming with the same query
// yields each matching entity once, in order, whatever is written in between. A page
// whose context is done before it is complete fails with the context's error.
func (s *Service) QueryEntities(ctx context.Context, account, table string, q Query) (Page, error) {
	top := q.Top
	if top == 0 || top > MaxPageSize {
		top = MaxPageSize
	}
	ranges := q.Filter.KeyRanges()
	resuming := q.NextPartitionKey != "" || q.NextRowKey != ""
	var cont storage.Position
	var cur cursor
	if resuming {
		// The position is NextRowKey's; one in NextPartitionKey (we never write one) is
		// ignored, not refused. An index token (NextPartitionKey "ix1.…", which no
		// standard token starts with) resumes an index read; its NextRowKey carries the
		// position only.
		rk, pos, err2 := decodeToken(q.NextRowKey)
		var err1 error
		if strings.HasPrefix(q.NextPartitionKey, ixTokenPrefix) {
			var tok ixToken
			tok, err1 = decodeIndexToken(q.NextPartitionKey)
			cur.ix = &tok
		} else {
			var pk string
			pk, _, err1 = decodeToken(q.NextPartitionKey)
			from := storage.Key{PartitionKey: pk, RowKey: rk}
			ranges = odata.ClipRanges(ranges, from)
			cur.key = &from
		}
		if err1 != nil || err2 != nil {
			return Page{}, azerr.Newf(azerr.InvalidInput, "The continuation token is not valid.")
		}
		cont = pos
	}
	// Open the view (waiting for the token's position) before anything else is read, so
	// that a token from the future is refused alike whatever the query asks for.
	v, err := s.view(ctx, q.Read, cont, entityScope)
	if err != nil {
		return Page{}, err
	}
	p, err := s.queryPage(ctx, v, account, table, q, top, ranges, cur)
	if err != nil {
		return Page{Served: notFound(v, err)}, err
	}
	p.Served = served(v)
	if p.NextRowKey != "" {
		p.NextRowKey = appendPosition(p.NextRowKey, p.Served.Position)
	}
	return p, nil
}

// queryPage reads one page of q from v (QueryEntities), resuming at cur.
func (s *Service) queryPage(ctx context.Context, rd storage.Reader, account, table string, q Query, top int, ranges []odata.KeyRange, cur cursor) (Page, error) {
	if top < 0 {
		// $top=0: nothing to return, but the table must exist.
		if _, err := rd.GetTable(ctx, account, table); err != nil {
			return Page{}, s.mapErr(err, entityScope)
		}
		s.markAvailable()
		return Page{Plan: planNone}, nil
	}
	resuming := cur.key != nil || cur.ix != nil
	if pk, rk, ok := q.Filter.IsPoint(); ok && !resuming && (q.Bound == nil || q.Bound.Contains(storage.Key{PartitionKey: pk, RowKey: rk})) {
		p, err := s.pointQuery(ctx, rd, account, table, q.Filter, pk, rk)
		p.Plan = planPoint
		return p, err
	}
	if q.Bound != nil {
		ranges = intersect(ranges, *q.Bound)
	}
	pl, err := s.choosePlan(ctx, rd, account, table, q.Filter, ranges, cur)
	if err != nil {
		return Page{}, err
	}
	if pl.def != nil {
		var p Page
		switch {
		case len(pl.ranges) == 0:
			// The key predicates (or the Bound) leave nothing; the token was checked.
			s.markAvailable()
		case pl.points:
			p, err = s.equalityPage(ctx, rd, account, table, q.Filter, &pl, cur.key, top)
		default:
			var after *storage.IndexCursor
			if cur.ix != nil {
				after = cur.ix.after
			}
			p, err = s.rangePage(ctx, rd, account, table, q.Filter, &pl, after, top)
		}
		switch {
		case !errors.Is(err, storage.ErrIndexNotFound):
			p.Plan = pl.name()
			return p, err
		case cur.ix != nil:
			return Page{}, errIndexGone()
		}
		// Dropped between the settings read and the index read: a first page, or one
		// resuming a standard token, runs on the keys as it would have a moment later.
		pl.def, pl.spans, pl.points = nil, nil, false
	}
	p, err := s.keysPage(ctx, rd, account, table, q, top, ranges)
	p.Plan = pl.name()
	return p, err
}

// keysPage reads one page of q on the key plan: ranges, in order.
func (s *Service) keysPage(ctx context.Context, rd storage.Reader, account, table string, q Query, top int, ranges []odata.KeyRange) (Page, error) {
	var residual func(*storage.Record) bool
	var encoded func(pk, rk string, version int64, props []byte) (bool, error)
	if !q.Filter.Exact() {
		residual, encoded = q.Filter.MatchRecord, q.Filter.MatchEncoded
	}
	if len(ranges) == 0 {
		// Nothing can match, but the table must still exist.
		if _, err := rd.GetTable(ctx, account, table); err != nil {
			return Page{}, s.mapErr(err, entityScope)
		}
		return Page{}, nil
	}
	deadline := time.Now().Add(s.pageBudget)
	var p Page
	size := 0
	for i, r := range ranges {
		if err := ctx.Err(); err != nil {
			return Page{}, s.mapErr(err, entityScope)
		}
		res, err := rd.Scan(ctx, account, table, storage.ScanRequest{
			Start:    r.Start,
			End:      r.End,
			Limit:    top - len(p.Records),
			MaxBytes: PageBytes - size,
			Deadline: deadline,
			Filter:   residual,
			Encoded:  q.Encoded,

			EncodedFilter: encoded,
		})
		if err != nil {
			return Page{}, s.mapErr(err, entityScope)
		}
		p.Scanned += res.Examined
		p.blocks = append(p.blocks, res.Blocks...)
		for j := range res.Records {
			size += storage.RecordSize(&res.Records[j])
		}
		if p.Records == nil {
			p.Records = res.Records
		} else {
			p.Records = append(p.Records, res.Records...)
		}
		next := res.Next
		if next == nil && i+1 < len(ranges) && (len(p.Records) >= top || size >= PageBytes || !time.Now().Before(deadline)) {
			next = &ranges[i+1].Start
		}
		if next != nil {
			p.Cut = len(p.Records) < top && size < PageBytes && !time.Now().Before(deadline)
			p.NextPartitionKey = encodeToken(next.PartitionKey, 0)
			p.NextRowKey = encodeToken(next.RowKey, 0)
			break
		}
	}
	s.markAvailable()
	return p, nil
}

// intersect clips sorted, disjoint ranges to bound.
func intersect(rs []odata.KeyRange, bound odata.KeyRange) []odata.KeyRange {
	rs = odata.ClipRanges(rs, bound.Start)
	if bound.End == nil {
		return rs
	}
	out := make([]odata.KeyRange, 0, len(rs))
	for _, r := range rs {
		if !r.Start.Less(*bound.End) {
			break
		}
		if r.End == nil || bound.End.Less(*r.End) {
			r.End = bound.End
		}
		out = append(out, r)
	}
	return out
}

// pointQuery serves "PartitionKey eq … and RowKey eq …" as a Get, so it costs no more.
func (s *Service) pointQuery(ctx context.Context, rd storage.Reader, account, table string, f *odata.Filter, pk, rk string) (Page, error) {
	rec, err := rd.Get(ctx, account, table, pk, rk)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return Page{}, nil
	case err != nil:
		return Page{}, s.mapErr(err, entityScope)
	case f.Exact() || f.MatchRecord(&rec):
		return Page{Records: []storage.Record{rec}, Scanned: 1}, nil
	}
	return Page{Scanned: 1}, nil
}

// Continuation tokens follow the service's shape, "1!<n>!<base64>", with the URL-safe
// alphabet and no padding so they survive any client's (non-)encoding, and never empty,
// even for an empty key. A token may end in "!<position>" (decimal): the position of the
// page that issued it, which the next page reads at (NextRowKey and NextTableName carry
// it; a position of 0 is left out). Tokens are opaque to clients, which send them back
// verbatim, and a token without a position — from a server before positions — still
// decodes, as position 0.
func encodeToken(key string, p storage.Position) string {
	b := base64.RawURLEncoding.EncodeToString([]byte(key))
	return appendPosition("1!"+strconv.Itoa(len(b))+"!"+b, p)
}

// appendPosition adds position p to an encoded token that has none.
func appendPosition(tok string, p storage.Position) string {
	if p == 0 {
		return tok
	}
	return tok + "!" + strconv.FormatUint(uint64(p), 10)
}

var errBadToken = errors.New("bad continuation token")

// decodeToken reads a continuation token: its key and the position it carries (0 when
// none). Anything but the form encodeToken writes is errBadToken, including a position
// that is not a decimal uint64 in ASCII digits.
func decodeToken(tok string) (string, storage.Position, error) {
	rest, ok := strings.CutPrefix(tok, "1!")
	if !ok {
		return "", 0, errBadToken
	}
	n, b, ok := strings.Cut(rest, "!")
	if !ok {
		return "", 0, errBadToken
	}
	l, err := strconv.Atoi(n)
	if err != nil || l < 0 || l > len(b) {
		return "", 0, errBadToken
	}
	b, tail := b[:l], b[l:]
	var p storage.Position
	if tail != "" {
		pos, ok := strings.CutPrefix(tail, "!")
		if !ok {
			return "", 0, errBadToken
		}
		d, ok := decimal(pos)
		if !ok {
			return "", 0, errBadToken
		}
		p = storage.Position(d)
	}
	key, err := base64.RawURLEncoding.DecodeString(b)
	if err != nil {
		return "", 0, errBadToken
	}
	return string(key), p, nil
}

// CutAt shortens the page to its first k entities (0 ≤ k < len(Records)), its
// continuation resuming at entity k, at the page's position: a page ended early, as the
// service ends pages at partition boundaries, which a client must follow like any other
// (the cut fault of package faults). It does nothing to a page of k entities or fewer.
func (p *Page) CutAt(k int) {
	if k < 0 || k >= len(p.Records) {
		return
	}
	if p.ix != nil && !p.ix.points {
		// A range plan resumes after the last entity kept (or where the page began).
		after := p.ix.start
		if k > 0 {
			c := ixCursor(&p.ix.def, &p.Records[k-1])
			after = &c
		}
		clear(p.Records[k:])
		p.Records = p.Records[:k]
		p.NextPartitionKey = encodeIndexToken(p.ix.def.ID, after)
		p.NextRowKey = encodeToken("", p.Served.Position)
		p.Cut = true
		return
	}
	next := p.Records[k].Entity
	clear(p.Records[k:])
	p.Records = p.Records[:k]
	p.NextPartitionKey = encodeToken(next.PartitionKey, 0)
	p.NextRowKey = encodeToken(next.RowKey, p.Served.Position)
	p.Cut = true
}
