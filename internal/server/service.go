package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/svcprops"
)

// maxXMLBody bounds ACL and service-properties bodies.
const maxXMLBody = 1 << 20

// serviceRequest serves the service root: Get/Set Table Service Properties and Get Table
// Service Stats.
//
// Stats are served on the secondary endpoint (<account>-secondary, either URL style), as
// by the service, and also on the primary path-style endpoint (http://127.0.0.1:10002/
// <account>, the development-storage address every printed connection string uses). There
// the SDKs cannot reach a secondary: Go's GetStatistics and JS's getStatistics() call the
// endpoint they were given (JS's rewrite of the first host label cannot apply to an IP
// address), so on this one node, whose secondary is its primary, refusing would only
// break them. A primary host-style endpoint (<account>.table.example) keeps the service's
// answer, 400 InvalidQueryParameterValue: there JS and Python derive the
// <account>-secondary host themselves, and code written against Azure sees Azure's rule.
func (s *Server) serviceRequest(rq *request, method string) error {
	rq.xml = true
	if rq.query.Get("restype") != "service" {
		return azerr.New(azerr.InvalidQueryParameterValue)
	}
	switch comp := rq.query.Get("comp"); {
	case comp == "properties" && method == http.MethodGet:
		rd, err := s.readRequest(rq.r.Header)
		if err != nil {
			return err
		}
		p, sv, err := s.tables.ReadServiceProperties(rq.r.Context(), rq.account, rd)
		if err != nil {
			return err
		}
		s.setServed(rq.w.Header(), sv)
		rq.sendXML(http.StatusOK, svcprops.AppendProperties(nil, p))
		return nil
	case comp == "properties" && method == http.MethodPut:
		if rq.secondary {
			return azerr.Newf(azerr.InvalidQueryParameterValue, "The secondary endpoint is read-only.")
		}
		body, err := s.readBody(rq, maxXMLBody)
		if err != nil {
			return err
		}
		u, err := svcprops.ParseProperties(body)
		if err != nil {
			return err
		}
		if err := s.tables.UpdateServiceProperties(rq.r.Context(), rq.account, u); err != nil {
			return err
		}
		s.setTableWriteToken(rq)
		rq.w.WriteHeader(http.StatusAccepted)
		return nil
	case comp == "stats" && method == http.MethodGet:
		if !rq.secondary && !rq.pathStyle {
			return azerr.Newf(azerr.InvalidQueryParameterValue, "Get Table Service Stats is only served on the secondary endpoint (<account>-secondary) or on a path-style endpoint.")
		}
		// One node has no replication lag: the secondary is the primary, live now.
		rq.sendXML(http.StatusOK, svcprops.AppendStats(nil, nowFunc()))
		return nil
	case comp == "properties" || comp == "stats":
		return azerr.New(azerr.MethodNotAllowed)
	}
	return azerr.New(azerr.InvalidQueryParameterValue)
}

// aclRequest serves Get and Set Table ACL (stored access policies).
func (s *Server) aclRequest(rq *request, method string) error {
	rq.xml = true
	if rq.query.Get("comp") != "acl" {
		return azerr.New(azerr.InvalidQueryParameterValue)
	}
	switch method {
	case http.MethodGet:
		rd, err := s.readRequest(rq.r.Header)
		if err != nil {
			return err
		}
		ids, sv, err := s.tables.TableACL(rq.r.Context(), rq.account, rq.res.Table, rd)
		if err != nil {
			s.setNotFoundServed(rq, sv)
			return err
		}
		s.setServed(rq.w.Header(), sv)
		rq.sendXML(http.StatusOK, svcprops.AppendACL(nil, ids))
		return nil
	case http.MethodPut:
		body, err := s.readBody(rq, maxXMLBody)
		if err != nil {
			return err
		}
		ids, err := svcprops.ParseACL(body)
		if err != nil {
			return err
		}
		if err := s.tables.SetTableACL(rq.r.Context(), rq.account, rq.res.Table, ids); err != nil {
			return err
		}
		s.setTableWriteToken(rq)
		rq.noContent()
		return nil
	}
	return azerr.New(azerr.MethodNotAllowed)
}

// preflight answers a CORS preflight (OPTIONS): unauthenticated, evaluated against the
// account's stored CORS rules.
func (s *Server) preflight(rq *request) error {
	rq.xml = true
	p, err := s.tables.ServiceProperties(rq.r.Context(), rq.account)
	if err != nil {
		return err
	}
	r := rq.r
	res, err := svcprops.Preflight(p.Cors, r.Header.Get("Origin"), r.Header.Get("Access-Control-Request-Method"),
		svcprops.SplitHeaderList(r.Header.Values("Access-Control-Request-Headers")...))
	if err != nil {
		return err
	}
	res.SetHeaders(rq.w.Header())
	rq.w.Header()["Content-Length"] = []string{"0"}
	rq.w.WriteHeader(http.StatusOK)
	return nil
}

// addCORS puts the CORS headers of an actual (non-preflight) request from a browser on
// its response, success or error. It costs a properties read only for requests carrying
// Origin.
func (s *Server) addCORS(rq *request, origin string) {
	p, err := s.tables.ServiceProperties(rq.r.Context(), rq.account)
	if err != nil || len(p.Cors) == 0 {
		return
	}
	h := rq.w.Header()
	for k, v := range svcprops.ActualRequestHeaders(p.Cors, origin, rq.r.Method) {
		h[k] = v
	}
}

// sendXML writes an XML response body.
func (rq *request) sendXML(status int, body []byte) {
	rq.send(status, "application/xml", body)
}

// appendXMLError renders the storage service's XML error body; fields follow the message,
// as in <HeaderName>x-ms-version</HeaderName><HeaderValue>…</HeaderValue>.
func appendXMLError(dst []byte, code, message string, fields []azerr.Field) []byte {
	dst = append(dst, `<?xml version="1.0" encoding="utf-8"?><Error><Code>`...)
	dst = appendXMLText(dst, code)
	dst = append(dst, "</Code><Message>"...)
	dst = appendXMLText(dst, message)
	dst = append(dst, "</Message>"...)
	for _, f := range fields {
		dst = append(dst, '<')
		dst = append(dst, f.Name...)
		dst = append(dst, '>')
		dst = appendXMLText(dst, f.Value)
		dst = append(dst, "</"...)
		dst = append(dst, f.Name...)
		dst = append(dst, '>')
	}
	return append(dst, "</Error>"...)
}

// appendJSONFields adds an error's fields to an odata.error body, after the message (as
// Azurite renders them: {"odata.error":{"code":…,"message":{…},"HeaderName":…}}).
func appendJSONFields(body []byte, fields []azerr.Field) []byte {
	if len(fields) == 0 || !bytes.HasSuffix(body, []byte("}}")) {
		return body
	}
	body = body[:len(body)-2]
	for _, f := range fields {
		name, _ := json.Marshal(f.Name)
		value, _ := json.Marshal(f.Value)
		body = append(body, ',')
		body = append(body, name...)
		body = append(body, ':')
		body = append(body, value...)
	}
	return append(body, "}}"...)
}

var xmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")

func appendXMLText(dst []byte, s string) []byte {
	return append(dst, xmlEscaper.Replace(s)...)
}
