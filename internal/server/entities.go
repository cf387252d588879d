package server

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/edmjson"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/odata"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/table"
)

// entityOptions says how to render entities for rq; sel is prepared once per request.
func (s *Server) entityOptions(rq *request, element bool, sel *edmjson.Selection) edmjson.EntityOptions {
	return edmjson.EntityOptions{
		Level:       rq.level,
		ServiceRoot: rq.root,
		Account:     rq.account,
		Table:       rq.res.Table,
		Element:     element,
		Select:      sel,
	}
}

// entityLocation is the entity's URL, as Location and DataServiceId carry it.
func entityLocation(rq *request, pk, rk string) string {
	return rq.root + "/" + rq.res.Table + "(PartitionKey='" + escapeKey(pk) + "',RowKey='" + escapeKey(rk) + "')"
}

// escapeKey doubles quotes and percent-encodes a key for use inside a URL path.
func escapeKey(k string) string {
	return url.PathEscape(strings.ReplaceAll(k, "'", "''"))
}

func (s *Server) decodeEntity(rq *request) (entity.Entity, edmjson.Keys, error) {
	if err := checkContentType(rq.r); err != nil {
		return entity.Entity{}, edmjson.Keys{}, err
	}
	body, err := s.readBody(rq, maxEntityBody)
	if err != nil {
		return entity.Entity{}, edmjson.Keys{}, err
	}
	return edmjson.DecodeEntity(body)
}

func (s *Server) insertEntity(rq *request) error {
	expiry, err := writeExpiry(rq.r.Method, rq.r.Header[headerExpiry])
	if err != nil {
		return err
	}
	e, keys, err := s.decodeEntity(rq)
	if err != nil {
		return err
	}
	if !keys.PartitionKey || !keys.RowKey {
		return azerr.New(azerr.PropertiesNeedValue)
	}
	if err := rq.grant.CheckKeys(e.PartitionKey, e.RowKey); err != nil {
		return err
	}
	pref := preference(rq.r)
	if pref != "" {
		rq.w.Header()["Preference-Applied"] = rq.hdr(pref)
	}
	rq.obs.PartitionKey = e.PartitionKey
	if err := s.gate(rq, rq.res.Table, e.PartitionKey, 1); err != nil {
		return err
	}
	c, err := s.tables.InsertEntityExpiring(rq.r.Context(), rq.account, rq.res.Table, &e, expiry)
	if err != nil {
		return err
	}
	rq.obs.EntitiesWritten = 1
	h := rq.w.Header()
	loc := entityLocation(rq, e.PartitionKey, e.RowKey)
	h["Etag"] = rq.hdr(entity.ETag(c.Version))
	s.setSessionToken(h, c.Position)
	h["Location"] = rq.hdr(loc)
	h["Dataserviceid"] = rq.hdr(loc)
	if pref == "return-no-content" {
		rq.noContent()
		return nil
	}
	rq.odataHeaders()
	bp := bufPool.Get().(*[]byte)
	defer putBuf(bp)
	*bp = edmjson.AppendEntity((*bp)[:0], &e, c.Version, s.entityOptions(rq, true, nil))
	rq.send(http.StatusCreated, edmjson.ContentType(rq.level), *bp)
	return nil
}

// ifMatch reads the If-Match condition of a request or batch part (table.ParseCondition).
// Several If-Match lines are one comma-separated list (RFC 9110 §5.3), which the service
// refuses like any list: it takes exactly one entity-tag or "*".
func ifMatch(r *http.Request) (table.Condition, error) {
	return matchCondition(r.Header.Values("If-None-Match"), r.Header.Values("If-Match"))
}

// matchCondition is ifMatch's condition from the request's If-None-Match and If-Match
// values.
func matchCondition(noneMatch, vs []string) (table.Condition, error) {
	if len(noneMatch) > 0 {
		return table.Condition{}, azerr.Newf(azerr.InvalidInput, "If-None-Match HTTP header is not allowed on this request.")
	}
	if len(vs) == 0 {
		return table.ParseCondition("", false)
	}
	return table.ParseCondition(strings.Join(vs, ", "), true)
}

func (s *Server) writeEntity(rq *request, mode table.Mode) error {
	cond, err := ifMatch(rq.r)
	if err != nil {
		return err
	}
	expiry, err := writeExpiry(rq.r.Method, rq.r.Header[headerExpiry])
	if err != nil {
		return err
	}
	e, _, err := s.decodeEntity(rq)
	if err != nil {
		return err
	}
	// The URL addresses the entity; keys in the body are ignored (the Go SDK's EDMEntity
	// even doubles quotes in them).
	e.PartitionKey, e.RowKey = rq.res.PartitionKey, rq.res.RowKey
	if err := rq.grant.CheckKeys(e.PartitionKey, e.RowKey); err != nil {
		return err
	}
	if err := s.gate(rq, rq.res.Table, e.PartitionKey, 1); err != nil {
		return err
	}
	c, err := s.tables.WriteEntityExpiring(rq.r.Context(), rq.account, rq.res.Table, &e, mode, cond, expiry)
	if err != nil {
		return err
	}
	rq.obs.EntitiesWritten = 1
	h := rq.w.Header()
	h["Etag"] = rq.hdr(entity.ETag(c.Version))
	s.setSessionToken(h, c.Position)
	rq.noContent()
	return nil
}

func (s *Server) deleteEntity(rq *request) error {
	cond, err := ifMatch(rq.r)
	if err != nil {
		return err
	}
	if _, err := writeExpiry(http.MethodDelete, rq.r.Header[headerExpiry]); err != nil {
		return err
	}
	if err := rq.grant.CheckKeys(rq.res.PartitionKey, rq.res.RowKey); err != nil {
		return err
	}
	if err := s.gate(rq, rq.res.Table, rq.res.PartitionKey, 1); err != nil {
		return err
	}
	c, err := s.tables.DeleteEntity(rq.r.Context(), rq.account, rq.res.Table, rq.res.PartitionKey, rq.res.RowKey, cond)
	if err != nil {
		return err
	}
	rq.obs.EntitiesWritten = 1
	s.setSessionToken(rq.w.Header(), c.Position)
	rq.noContent()
	return nil
}

func (s *Server) getEntity(rq *request) error {
	if err := entity.ValidateKey("PartitionKey", rq.res.PartitionKey); err != nil {
		return err
	}
	if err := entity.ValidateKey("RowKey", rq.res.RowKey); err != nil {
		return err
	}
	if err := rq.grant.CheckKeys(rq.res.PartitionKey, rq.res.RowKey); err != nil {
		return err
	}
	rd, err := s.readRequest(rq.r.Header)
	if err != nil {
		return err
	}
	if err := s.gate(rq, rq.res.Table, rq.res.PartitionKey, 1); err != nil {
		return err
	}
	rec, sv, err := s.tables.GetEntityEncoded(rq.r.Context(), rq.account, rq.res.Table, rq.res.PartitionKey, rq.res.RowKey, rd)
	if err != nil {
		s.setNotFoundServed(rq, sv)
		return err
	}
	sel, err := odata.ParseSelect(rq.query.Get("$select"))
	if err != nil {
		return err
	}
	rq.obs.EntitiesRead = 1
	rq.w.Header()["Etag"] = rq.hdr(entity.ETag(rec.Version))
	s.setServed(rq.w.Header(), sv)
	rq.odataHeaders()
	opts := s.entityOptions(rq, true, edmjson.NewSelection(sel))
	opts.Expiry = wantsExpiry(rq.r.Header, rq.w.Header())
	bp := bufPool.Get().(*[]byte)
	defer putBuf(bp)
	*bp = edmjson.AppendRecord((*bp)[:0], &rec, opts)
	rq.send(http.StatusOK, edmjson.ContentType(rq.level), *bp)
	return nil
}

func (s *Server) queryEntities(rq *request) error {
	q := rq.query
	top, err := parseTop(q.Get("$top"))
	if err != nil {
		return err
	}
	query := table.Query{
		Top:              top,
		NextPartitionKey: q.Get("NextPartitionKey"),
		NextRowKey:       q.Get("NextRowKey"),
		// The page is only written out: its properties may stay in the stored form.
		Encoded: true,
	}
	if query.Filter, err = odata.Parse(q.Get("$filter")); err != nil {
		return err
	}
	if start, end, ok := grantBound(rq.grant); ok {
		query.Bound = &odata.KeyRange{Start: start, End: end}
	}
	sel, err := odata.ParseSelect(q.Get("$select"))
	if err != nil {
		return err
	}
	if query.Read, err = s.readRequest(rq.r.Header); err != nil {
		return err
	}
	if err := s.gate(rq, rq.res.Table, queryPartition(query.Filter), 1); err != nil {
		return err
	}
	page, err := s.tables.QueryEntities(rq.r.Context(), rq.account, rq.res.Table, query)
	if err != nil {
		s.setNotFoundServed(rq, page.Served)
		return err
	}
	if rq.cutPage {
		s.cutQueryPage(rq, &page)
	}
	rq.obs.EntitiesRead = len(page.Records)
	rq.obs.QueryPartition = onePartition(page.Records)
	rq.obs.EntitiesScanned = page.Scanned
	rq.obs.PageCut = page.Cut
	rq.obs.Plan = page.Plan
	h := rq.w.Header()
	h[headerPlan] = []string{page.Plan}
	s.setServed(h, page.Served)
	exposeHeaders(h, headerPlanName)
	if page.NextPartitionKey != "" {
		h["X-Ms-Continuation-Nextpartitionkey"] = []string{page.NextPartitionKey}
		h["X-Ms-Continuation-Nextrowkey"] = []string{page.NextRowKey}
	}
	opts := s.entityOptions(rq, false, edmjson.NewSelection(sel))
	opts.Expiry = wantsExpiry(rq.r.Header, h)
	rq.odataHeaders()
	s.sendPage(rq, page.Records, opts)
	page.Release() // written out: the stored bags' buffers serve the next query
	return nil
}

// headerPlan names, on every Query Entities answer, the plan its page was read with
// (table.Page.Plan): the keys, or which secondary index (docs/indexes-design.md §4);
// headerPlanName is its spelling in Access-Control-Expose-Headers: a browser's script
// (the console's, say) may read it like the read headers.
const (
	headerPlan     = "X-Cerulean-Plan"
	headerPlanName = "x-cerulean-plan"
)

// queryPartition is the one partition filter confines a query to, or "" if it may read
// several: the partition a throttled query is admitted against.
func queryPartition(f *odata.Filter) string {
	if f == nil {
		return ""
	}
	if pk, _, ok := f.IsPoint(); ok {
		return pk
	}
	rs := f.KeyRanges()
	if len(rs) == 0 || rs[len(rs)-1].End == nil {
		return ""
	}
	pk, end := rs[0].Start.PartitionKey, *rs[len(rs)-1].End
	if end.PartitionKey == pk || end.PartitionKey == pk+"\x00" && end.RowKey == "" {
		return pk
	}
	return ""
}

// onePartition is the PartitionKey all recs share, "" if they are none or not all in one
// partition (observe.Request.QueryPartition).
func onePartition(recs []storage.Record) string {
	if len(recs) == 0 {
		return ""
	}
	pk := recs[0].Entity.PartitionKey
	for i := range recs[1:] {
		if recs[i+1].Entity.PartitionKey != pk {
			return ""
		}
	}
	return pk
}

// streamChunk is how much encoded JSON a query response gathers before writing it out.
// A page that encodes to less goes out in one write with a Content-Length; a larger one
// is written in chunks as it is encoded (chunked transfer encoding), so the response
// never holds more than about this much plus one entity.
const streamChunk = 128 << 10

// sendPage writes a Query Entities body for recs. Each record is dropped once encoded,
// so the page's memory is released as the response goes out. The continuation headers
// must be set before: they go out with the first chunk. If the client goes away, the
// encoding stops at the next chunk (or within 64 entities) and nothing more is written.
func (s *Server) sendPage(rq *request, recs []storage.Record, opts edmjson.EntityOptions) {
	ctx := rq.r.Context()
	ct := edmjson.ContentType(rq.level)
	bp := bufPool.Get().(*[]byte)
	defer putBuf(bp)
	b := edmjson.AppendCollectionStart((*bp)[:0], opts)
	streaming := false
	for i := range recs {
		if i > 0 {
			b = append(b, ',')
		}
		b = edmjson.AppendRecord(b, &recs[i], opts)
		recs[i] = storage.Record{}
		if i%64 == 63 && ctx.Err() != nil {
			*bp = b
			return
		}
		if len(b) < streamChunk || rq.r.Method == http.MethodHead {
			continue
		}
		if !streaming {
			rq.w.Header()["Content-Type"] = []string{ct}
			rq.w.WriteHeader(http.StatusOK)
			streaming = true
		}
		_, err := rq.w.Write(b)
		b = b[:0]
		if err != nil || ctx.Err() != nil {
			*bp = b
			return
		}
	}
	b = edmjson.AppendCollectionEnd(b)
	*bp = b
	if !streaming {
		rq.send(http.StatusOK, ct, b)
		return
	}
	_, _ = rq.w.Write(b)
}
