package server

import (
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/svcprops"
	"github.com/ceruleandb/cerulean/internal/table"
)

// Session tokens on the wire (docs/compatibility.md "Session tokens"; the token's text form is the table
// layer's, table.FormatToken). Every successful entity write answers x-ms-session-token —
// single writes, deletes, each changeset part of a $batch and the $batch response — on
// standard tables too. A read (Get Entity, Query Entities, a batch's retrieve) may send
// one in x-ms-session-token or in Dataverse's MSCRM.SessionToken; it then sees at least
// every write the token covers, or fails with 503 ServerBusy. A read without one is
// served exactly as before tokens existed.
//
// Read consistency (docs/compatibility.md "Read consistency and replicas"): a read may ask for a level in
// x-ms-consistency-level (Cosmos DB's names; the server's default otherwise), and every
// successful read — Get Entity, Query Entities, Query Tables, Get Table, Get Table ACL,
// Get Table Service Properties, Get Table Settings — answers the token of the position it
// was served at (x-ms-session-token), where it was served (x-cerulean-read-source) and
// that position in decimal (x-cerulean-read-position). Table-level changes answer a
// token too (the engine's position after the change): with replicas they are not seen
// everywhere at once either. A $batch's retrieve is read at Strong with its token, as
// before: the batch answers its own token and the three read headers are not on it.
//
// The headers change nothing about authorization: they are read only after the request
// is authenticated and authorized as the same operation it is without them, so a token
// neither grants access nor, malformed, makes an unauthenticated caller's error a 400.
const (
	// headerSessionToken is x-ms-session-token in canonical form (the map key).
	headerSessionToken = "X-Ms-Session-Token"
	// sessionTokenName and dataverseTokenName are the headers a read may carry its token
	// in, spelled as errors name them.
	sessionTokenName   = "x-ms-session-token"
	dataverseTokenName = "MSCRM.SessionToken"

	// consistencyLevelName is the request header that asks for a consistency level.
	consistencyLevelName = "x-ms-consistency-level"

	// headerReadSource and headerReadPosition are the response headers that say where a
	// read was served and at what position (canonical form), readSourceName and
	// readPositionName their spelling in Access-Control-Expose-Headers.
	headerReadSource   = "X-Cerulean-Read-Source"
	headerReadPosition = "X-Cerulean-Read-Position"
	readSourceName     = "x-cerulean-read-source"
	readPositionName   = "x-cerulean-read-position"
)

// headerConsistencyLevel and headerDataverseToken are the request headers' map keys
// (canonical form), so reads index the map instead of canonicalising per request.
var (
	headerConsistencyLevel = textproto.CanonicalMIMEHeaderKey(consistencyLevelName)
	headerDataverseToken   = textproto.CanonicalMIMEHeaderKey(dataverseTokenName)
)

// readExposed are the headers a read answers, which CORS exposes.
var readExposed = [...]string{sessionTokenName, readSourceName, readPositionName}

// setSessionToken answers the session token of a committed write at position p, and
// returns it.
func (s *Server) setSessionToken(h http.Header, p storage.Position) string {
	tok := s.tables.Token(p)
	h[headerSessionToken] = []string{tok}
	exposeHeaders(h, sessionTokenName)
	return tok
}

// setTableWriteToken answers the session token of a table-level change that has
// succeeded (Create/Delete Table, Set Table ACL, Set Service Properties, Set Table
// Settings): the engine's position read after the change, which covers it. The change is
// committed whatever happens next, so failing to read the position is logged and the
// token left out rather than the request failed.
func (s *Server) setTableWriteToken(rq *request) {
	p, err := s.tables.Position(rq.r.Context())
	if err != nil {
		s.log.Warn("no session token for a table-level change: reading the position failed", "request_id", rq.id, "err", err)
		return
	}
	s.setSessionToken(rq.w.Header(), p)
}

// setServed answers where a read was served and at what position, and the session token
// of that position.
//
// The three values share one backing array (each slice's capacity is one, so appending to
// one copies it).
func (s *Server) setServed(h http.Header, sv table.Served) {
	vs := make([]string, 3)
	vs[0], vs[1], vs[2] = s.tables.Token(sv.Position), sv.Source, strconv.FormatUint(uint64(sv.Position), 10)
	h[headerSessionToken] = vs[0:1:1]
	h[headerReadSource] = vs[1:2:2]
	h[headerReadPosition] = vs[2:3:3]
	exposeHeaders(h, readExposed[:]...)
}

// setNotFoundServed answers, on a read that failed, where it was served and at what
// position when the failure is the answer "not found" (the table layer then reports
// them): a 404 carries the read headers as any other read does, so that a stale one can
// be traced to the replica and position it was read at.
func (s *Server) setNotFoundServed(rq *request, sv table.Served) {
	if sv.Source != "" {
		s.setServed(rq.w.Header(), sv)
	}
}

// exposeHeaders lets a browser's script read Cerulean's headers of its response: when the
// response carries CORS headers (a rule matched, addCORS), names join the headers the
// rule exposes. Azure exposes only what the rule lists; these headers are Cerulean's, and
// a rule written for Azure does not know to list them. Adding a header to the exposed
// list lets a script see one more header of its own response and nothing else.
func exposeHeaders(h http.Header, names ...string) {
	if len(h[svcprops.HeaderAllowOrigin]) == 0 {
		return
	}
	list := h.Get(svcprops.HeaderExposeHeaders)
	listed := strings.Split(list, ",")
	changed := false
next:
	for _, want := range names {
		for _, name := range listed {
			if strings.EqualFold(strings.TrimSpace(name), want) {
				continue next
			}
		}
		if list != "" {
			list += ","
		}
		list += want
		changed = true
	}
	if changed {
		h.Set(svcprops.HeaderExposeHeaders, list)
	}
}

// readRequest is how a read request asks to be served: the consistency level of its
// x-ms-consistency-level header (the server's default without one) and the position of
// its session token (readPosition). A level that is not one of the five names exactly
// (several header lines included) is 400 InvalidHeaderValue naming the header.
func (s *Server) readRequest(h http.Header) (table.Read, error) {
	rd := table.Read{Consistency: s.consistency}
	if vs := h[headerConsistencyLevel]; len(vs) > 0 {
		c, ok := storage.ParseConsistency(vs[0])
		if !ok || len(vs) > 1 {
			e := azerr.InvalidHeader(consistencyLevelName, quoteValue(strings.Join(vs, ",")))
			e.Message = "The value of the " + consistencyLevelName + " header is not valid: it must be one of Strong, BoundedStaleness, Session, ConsistentPrefix or Eventual."
			return table.Read{}, e
		}
		rd.Consistency = c
	}
	at, err := s.readPosition(h)
	if err != nil {
		return table.Read{}, err
	}
	rd.Token = at
	return rd, nil
}

// quoteValue bounds a refused header value quoted in an error.
func quoteValue(v string) string {
	const maxQuoted = 100
	if len(v) <= maxQuoted {
		return v
	}
	return strings.ToValidUTF8(v[:maxQuoted], "") + "…"
}

// readPosition is the position a read must see: the newest of the session tokens in the
// request's x-ms-session-token and MSCRM.SessionToken headers (several lines of one
// header are one comma-separated list), or 0 when it carries none. A malformed token is
// 400 InvalidHeaderValue naming the header it came in.
func (s *Server) readPosition(h http.Header) (storage.Position, error) {
	var at storage.Position
	for _, hd := range [...]struct{ key, name string }{
		{headerSessionToken, sessionTokenName},
		{headerDataverseToken, dataverseTokenName},
	} {
		name, vs := hd.name, h[hd.key]
		if len(vs) == 0 {
			continue
		}
		p, err := s.tables.ParseToken(name, strings.Join(vs, ","))
		if err != nil {
			return 0, err
		}
		at = max(at, p)
	}
	return at, nil
}
