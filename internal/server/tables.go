package server

import (
	"net/http"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/edmjson"
	"github.com/ceruleandb/cerulean/internal/odata"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/table"
)

func (s *Server) createTable(rq *request) error {
	if err := checkContentType(rq.r); err != nil {
		return err
	}
	body, err := s.readBody(rq, maxSmallBody)
	if err != nil {
		return err
	}
	tb, err := edmjson.DecodeTable(body)
	if err != nil {
		return err
	}
	name := tb.Name
	rq.obs.Table = name // the table is named in the body, not the URL
	// Settings in the body (Cerulean's extension) win; a body without them leaves the
	// table to the server's --elastic-tables rules.
	var settings *storage.TableSettings
	if tb.HasSettings {
		settings = &tb.Settings
	}
	pref := preference(rq.r)
	if pref != "" {
		rq.w.Header()["Preference-Applied"] = []string{pref}
	}
	if err := s.gate(rq, "", "", 1); err != nil {
		return err
	}
	if s.deletions != nil && s.deletions.BeingDeleted(rq.account, name) {
		return azerr.New(azerr.TableBeingDeleted)
	}
	if err := s.tables.CreateTable(rq.r.Context(), rq.account, name, settings); err != nil {
		return err
	}
	s.setTableWriteToken(rq)
	loc := rq.root + "/Tables('" + name + "')"
	h := rq.w.Header()
	h["Location"] = []string{loc}
	h["Dataserviceid"] = []string{loc}
	if pref == "return-no-content" {
		rq.noContent()
		return nil
	}
	rq.odataHeaders()
	opts := s.tableOptions(rq)
	opts.Element = true
	bp := bufPool.Get().(*[]byte)
	defer putBuf(bp)
	*bp = edmjson.AppendTable((*bp)[:0], name, opts)
	rq.send(http.StatusCreated, edmjson.ContentType(rq.level), *bp)
	return nil
}

func (s *Server) getTable(rq *request) error {
	sel, err := tableSelect(rq)
	if err != nil {
		return err
	}
	rd, err := s.readRequest(rq.r.Header)
	if err != nil {
		return err
	}
	if err := s.gate(rq, "", "", 1); err != nil {
		return err
	}
	ti, sv, err := s.tables.GetTable(rq.r.Context(), rq.account, rq.res.Table, rd)
	if err != nil {
		s.setNotFoundServed(rq, sv)
		return err
	}
	s.setServed(rq.w.Header(), sv)
	rq.odataHeaders()
	bp := bufPool.Get().(*[]byte)
	defer putBuf(bp)
	opts := s.tableOptions(rq)
	opts.Element = true
	opts.Select = sel
	*bp = edmjson.AppendTableInfo((*bp)[:0], ti, opts)
	rq.send(http.StatusOK, edmjson.ContentType(rq.level), *bp)
	return nil
}

func (s *Server) deleteTable(rq *request) error {
	if err := s.gate(rq, "", "", 1); err != nil {
		return err
	}
	if err := s.tables.DeleteTable(rq.r.Context(), rq.account, rq.res.Table); err != nil {
		return err
	}
	if s.deletions != nil {
		s.deletions.Deleted(rq.account, rq.res.Table)
	}
	s.setTableWriteToken(rq)
	rq.noContent()
	return nil
}

func (s *Server) listTables(rq *request) error {
	q := rq.query
	top, err := parseTop(q.Get("$top"))
	if err != nil {
		return err
	}
	filter, err := odata.Parse(q.Get("$filter"))
	if err != nil {
		return err
	}
	sel, err := tableSelect(rq)
	if err != nil {
		return err
	}
	rd, err := s.readRequest(rq.r.Header)
	if err != nil {
		return err
	}
	if err := s.gate(rq, "", "", 1); err != nil {
		return err
	}
	page, err := s.tables.ListTables(rq.r.Context(), rq.account, filter, q.Get("NextTableName"), top, rd)
	if err != nil {
		return err
	}
	s.setServed(rq.w.Header(), page.Served)
	if page.NextTableName != "" {
		rq.w.Header()["X-Ms-Continuation-Nexttablename"] = []string{page.NextTableName}
	}
	tables := page.Tables
	rq.odataHeaders()
	bp := bufPool.Get().(*[]byte)
	defer putBuf(bp)
	opts := s.tableOptions(rq)
	opts.Select = sel
	*bp = edmjson.AppendTables((*bp)[:0], tables, opts)
	rq.send(http.StatusOK, edmjson.ContentType(rq.level), *bp)
	return nil
}

// tableSelect reads $select of Query Tables and Get Table: the table settings members it
// names are written after TableName, which is always written; other names select nothing
// (docs/compatibility.md "Elastic tables: settings on the wire"). A malformed list is 400 InvalidInput, as for entities.
func tableSelect(rq *request) (edmjson.TableSelect, error) {
	names, err := odata.ParseSelect(rq.query.Get("$select"))
	if err != nil {
		return 0, err
	}
	return edmjson.NewTableSelect(names), nil
}

func (s *Server) tableOptions(rq *request) edmjson.TableOptions {
	return edmjson.TableOptions{Level: rq.level, ServiceRoot: rq.root, Account: rq.account}
}

// parseTop reads $top as the table layer's page size (table.Query.Top).
//
//   - absent or empty: no $top (0), a page of up to table.MaxPageSize;
//   - "0": table.TopNone, an empty and final page (MS-ODATA §2.2.3.6.1.8 allows any integer
//     >= 0, Storage Explorer sends 0 and the service answers no entities);
//   - 1–1000: the page size; anything larger, however many digits, is served 1,000 at a
//     time with a continuation (no response holds more than 1,000 items, "Query Timeout
//     and Pagination"), so an SDK's pager still gets everything;
//   - anything but ASCII digits ("-1", "+5", " 5", "1.5", "abc"): 400
//     InvalidQueryParameterValue. MS-ODATA's grammar is "$top=" 1*DIGIT and calls a
//     negative value malformed.
func parseTop(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, azerr.Newf(azerr.InvalidQueryParameterValue, "The value '%s' of query parameter '$top' is not valid: it must be a non-negative integer.", v)
		}
		if n <= table.MaxPageSize {
			n = n*10 + int(c-'0')
		}
	}
	switch {
	case n == 0:
		return table.TopNone, nil
	case n > table.MaxPageSize:
		return table.MaxPageSize, nil
	}
	return n, nil
}
