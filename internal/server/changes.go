package server

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/edmjson"
	"github.com/ceruleandb/cerulean/internal/table"
)

// Change feeds: GET /{table}?comp=changes on a table whose feed is on (docs/change-feed.md).
//
// Query parameters:
//   - from: "beginning" (the default: the oldest record retained), "now" (the feed's
//     current end: a page without records whose continuation is where the feed is), or
//     a continuation from an earlier page;
//   - limit: the most records in the page, 1 to 1000 (default 1000);
//   - wait: seconds, 0 to 60 (default 0): when no record follows from, wait up to that
//     long for one (long polling) before answering an empty page;
//   - startpk, endpk: only records of PartitionKeys in [startpk, endpk), so that
//     consumers can split a table (the table-level records reach every consumer).
//
// The answer is 200 with a JSON page (edmjson.AppendChange):
//
//	{"changes":[{"seq":12,"op":"insert","at":"…","PartitionKey":"p","RowKey":"r","entity":{…}}],
//	 "continuation":"AQ…","ended":false}
//
// Reading on from the continuation never misses nor repeats a record. A table without
// the feed answers as the service answers a comp it does not know; a continuation
// whose records retention removed is 410 ChangeFeedContinuationExpired. Authorization:
// the account key, or a SAS that may query the table's entities (r); a SAS with a key
// range sees the records of its range only.
func (s *Server) changesRequest(rq *request, method string) error {
	if method != http.MethodGet && method != http.MethodHead {
		ti, _, err := s.tables.TableSettings(rq.r.Context(), rq.account, rq.res.Table, table.Read{})
		if err == nil && ti.Settings.ChangeFeedOn() {
			return azerr.New(azerr.MethodNotAllowed)
		}
		return s.unknownComp(rq, method)
	}
	q, err := changesQuery(rq)
	if err != nil {
		return err
	}
	rd, err := s.readRequest(rq.r.Header)
	if err != nil {
		return err
	}
	// Faults and throttling as for a query of the table (one request, whatever it waits).
	if err := s.gate(rq, rq.res.Table, "", 1); err != nil {
		return err
	}
	q.Stop = s.pollStop
	page, sv, err := s.tables.ReadChanges(rq.r.Context(), rq.account, rq.res.Table, q, rd)
	if errors.Is(err, table.ErrNoChangeFeed) {
		return s.unknownComp(rq, method)
	}
	if err != nil {
		s.setNotFoundServed(rq, sv)
		return err
	}
	s.setServed(rq.w.Header(), sv)
	rq.obs.EntitiesRead = len(page.Changes)
	bp := bufPool.Get().(*[]byte)
	defer putBuf(bp)
	b := edmjson.AppendChangesStart((*bp)[:0])
	for i := range page.Changes {
		b = edmjson.AppendChange(b, &page.Changes[i], i == 0)
	}
	b = edmjson.AppendChangesEnd(b, page.Next.String(), page.Ended)
	*bp = b
	rq.send(http.StatusOK, settingsContentType, b)
	return nil
}

// changesQuery reads the query parameters of a feed read.
func changesQuery(rq *request) (table.ChangesQuery, error) {
	qv := rq.query
	from, err := table.ParseCursor(qv.Get("from"))
	if err != nil {
		return table.ChangesQuery{}, err
	}
	q := table.ChangesQuery{From: from, Limit: table.MaxChangesPage}
	if v := qv.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > table.MaxChangesPage {
			return table.ChangesQuery{}, azerr.New(azerr.InvalidQueryParameterValue).WithDetail("The value of 'limit' must be a number of records from 1 to 1000.")
		}
		q.Limit = n
	}
	if v := qv.Get("wait"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || time.Duration(n)*time.Second > table.MaxChangesWait {
			return table.ChangesQuery{}, azerr.New(azerr.InvalidQueryParameterValue).WithDetail("The value of 'wait' must be a number of seconds from 0 to 60.")
		}
		q.Wait = time.Duration(n) * time.Second
	}
	if qv.Has("startpk") {
		v := qv.Get("startpk")
		q.StartPK = &v
	}
	if qv.Has("endpk") {
		v := qv.Get("endpk")
		q.EndPK = &v
	}
	if g := rq.grant; g != nil && g.HasRange {
		q.Keep = g.InRange
	}
	return q, nil
}
