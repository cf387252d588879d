package server

import (
	"net/http"
	"strconv"

	"github.com/ceruleandb/cerulean/azerr"
	"github.com/ceruleandb/cerulean/edmjson"
	"github.com/ceruleandb/cerulean/odata"
)

func (s *Server) createTable(rq *request) error {
	if err := checkContentType(rq.r); err != nil {
		return err
	}
	body, err := s.readBody(rq, maxSmallBody)
	if err != nil {
		return err
	}
	name, err := edmjson.DecodeTableName(body)
	if err != nil {
		return err
	}
	pref := preference(rq.r)
	if pref != "" {
		rq.w.Header()["Preference-Applied"] = []string{pref}
	}
	if err := s.tables.CreateTable(rq.r.Context(), rq.account, name); err != nil {
		return err
	}
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
	ti, err := s.tables.GetTable(rq.r.Context(), rq.account, rq.res.Table)
	if err != nil {
		return err
	}
	rq.odataHeaders()
	bp := bufPool.Get().(*[]byte)
	defer putBuf(bp)
	opts := s.tableOptions(rq)
	opts.Element = true
	*bp = edmjson.AppendTable((*bp)[:0], ti.Name, opts)
	rq.send(http.StatusOK, edmjson.ContentType(rq.level), *bp)
	return nil
}

func (s *Server) deleteTable(rq *request) error {
	if err := s.tables.DeleteTable(rq.r.Context(), rq.account, rq.res.Table); err != nil {
		return err
	}
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
	tables, next, err := s.tables.ListTables(rq.r.Context(), rq.account, filter, q.Get("NextTableName"), top)
	if err != nil {
		return err
	}
	if next != "" {
		rq.w.Header()["X-Ms-Continuation-Nexttablename"] = []string{next}
	}
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.Name
	}
	rq.odataHeaders()
	bp := bufPool.Get().(*[]byte)
	defer putBuf(bp)
	*bp = edmjson.AppendTables((*bp)[:0], names, s.tableOptions(rq))
	rq.send(http.StatusOK, edmjson.ContentType(rq.level), *bp)
	return nil
}

func (s *Server) tableOptions(rq *request) edmjson.TableOptions {
	return edmjson.TableOptions{Level: rq.level, ServiceRoot: rq.root, Account: rq.account}
}

// parseTop reads $top: empty means the default page size; otherwise a positive count.
func parseTop(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, azerr.Newf(azerr.InvalidQueryParameterValue, "The value '%s' of query parameter '$top' is not valid.", v)
	}
	// $top is a page size; larger values are served 1,000 at a time with continuation.
	return min(n, 1000), nil
}
