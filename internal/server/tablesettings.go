package server

import (
	"net/http"
	"strings"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/edmjson"
)

// settingsContentType is the media type of the table-settings answer: plain JSON, not
// OData (it is no entity or table feed).
const settingsContentType = "application/json; charset=utf-8"

// tableSettingsRequest serves Cerulean's table-settings extension (docs/compatibility.md "Elastic tables: settings on the wire"):
//
//   - GET /{table}?comp=properties answers 200 with the table's settings as
//     edmjson.AppendTableSettings writes them, e.g.
//     {"TableName":"events","Elastic":true,"DefaultTimeToLive":86400,"TimeToLiveProperty":"TTLInSeconds"};
//   - PUT /{table}?comp=properties with such a body replaces them (members left out take
//     their defaults: a standard table for {}) and answers 204. A TableName in the body
//     must name the table addressed (case-insensitively).
//
// A missing table is 404 TableNotFound, as for the table's ACL. Authorization: the
// account key, or an account SAS (sasOperation: reading needs srt=c and r or l, writing
// srt=c and w); a table SAS can do neither.
func (s *Server) tableSettingsRequest(rq *request, method string) error {
	switch method {
	case http.MethodGet:
		rd, err := s.readRequest(rq.r.Header)
		if err != nil {
			return err
		}
		ti, sv, err := s.tables.TableSettings(rq.r.Context(), rq.account, rq.res.Table, rd)
		if err != nil {
			s.setNotFoundServed(rq, sv)
			return err
		}
		s.setServed(rq.w.Header(), sv)
		bp := bufPool.Get().(*[]byte)
		defer putBuf(bp)
		*bp = edmjson.AppendTableSettings((*bp)[:0], ti)
		rq.send(http.StatusOK, settingsContentType, *bp)
		return nil
	case http.MethodPut:
		if err := checkContentType(rq.r); err != nil {
			return err
		}
		body, err := s.readBody(rq, maxSmallBody)
		if err != nil {
			return err
		}
		tb, err := edmjson.DecodeTableSettings(body)
		if err != nil {
			return err
		}
		if tb.HasName && !strings.EqualFold(tb.Name, rq.res.Table) {
			return azerr.Newf(azerr.InvalidInput, "The TableName '%s' in the body is not the table addressed, '%s'.", tb.Name, rq.res.Table)
		}
		if err := s.tables.SetTableSettings(rq.r.Context(), rq.account, rq.res.Table, tb.Settings); err != nil {
			return err
		}
		s.setTableWriteToken(rq)
		rq.noContent()
		return nil
	}
	return azerr.New(azerr.MethodNotAllowed)
}
