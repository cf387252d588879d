package server

import (
	"net/http"
	"strings"

	"github.com/ceruleandb/cerulean/storage"
	"github.com/ceruleandb/cerulean/svcprops"
)

// Session tokens on the wire (docs/protocol.md §15; the token's text form is the table
// layer's, table.FormatToken). Every successful entity write answers x-ms-session-token —
// single writes, deletes, each changeset part of a $batch and the $batch response — on
// standard tables too. A read (Get Entity, Query Entities, a batch's retrieve) may send
// one in x-ms-session-token or in Dataverse's MSCRM.SessionToken; it then sees at least
// every write the token covers, or fails with 503 ServerBusy. A read without one is
// served exactly as before tokens existed.
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
)

// setSessionToken answers the session token of a committed write at position p, and
// returns it.
func (s *Server) setSessionToken(h http.Header, p storage.Position) string {
	tok := s.tables.Token(p)
	h[headerSessionToken] = []string{tok}
	exposeSessionToken(h)
	return tok
}

// exposeSessionToken lets a browser's script read the token: when the response carries
// CORS headers (a rule matched, addCORS), x-ms-session-token joins the headers the rule
// exposes. Azure exposes only what the rule lists; the token is Cerulean's, and a rule
// written for Azure does not know to list it. Adding a header to the exposed list lets a
// script see one more header of its own response and nothing else.
func exposeSessionToken(h http.Header) {
	if len(h[svcprops.HeaderAllowOrigin]) == 0 {
		return
	}
	list := h.Get(svcprops.HeaderExposeHeaders)
	for _, name := range strings.Split(list, ",") {
		if strings.EqualFold(strings.TrimSpace(name), sessionTokenName) {
			return
		}
	}
	if list != "" {
		list += ","
	}
	h.Set(svcprops.HeaderExposeHeaders, list+sessionTokenName)
}

// readPosition is the position a read must see: the newest of the session tokens in the
// request's x-ms-session-token and MSCRM.SessionToken headers (several lines of one
// header are one comma-separated list), or 0 when it carries none. A malformed token is
// 400 InvalidHeaderValue naming the header it came in.
func (s *Server) readPosition(h http.Header) (storage.Position, error) {
	var at storage.Position
	for _, name := range [...]string{sessionTokenName, dataverseTokenName} {
		vs := h.Values(name)
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
