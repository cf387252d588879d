package server

import (
	"fmt"
	"net"
	"net/http"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/svcprops"
	"github.com/ceruleandb/cerulean/internal/table"
)

// authenticate checks the request's credentials and returns the shared access signature
// that authorizes it, or nil when a shared key does (the account owner: everything is
// allowed). A returned SAS is verified and checked against the operation by authorizeSAS
// once the operation is known.
//
// A request may carry both a shared key (Authorization) and a SAS (sig in the query). No
// service document says which wins; Azurite tries SharedKeyLite, SharedKey, account SAS and
// table SAS in turn and lets the first that verifies authorize the request
// (src/table/TableRequestListenerFactory.ts, middleware/AuthenticationMiddlewareFactory.ts).
// Cerulean does the same, and never combines the two:
//
//   - the shared key verifies: the request is the owner's, and the SAS is ignored, its
//     restrictions (permissions, table, key range, expiry, IP) included;
//   - the shared key fails and the SAS is well formed: the SAS alone decides, as if the
//     Authorization header were absent; its refusal (with the key's failure noted in the
//     detail) is the answer;
//   - the shared key fails and the SAS is malformed: the key's refusal, the SAS's noted.
//
// Whenever the query holds a sig, the SAS parameters are removed from rq.query, whichever
// credential authorizes, so they never reach $filter, $select, comp or the continuation.
func (s *Server) authenticate(rq *request) (*auth.SAS, error) {
	sas, sasErr := auth.ParseSAS(rq.query)
	if sas != nil || sasErr != nil {
		for k := range rq.query {
			if auth.IsSASParam(k) {
				delete(rq.query, k)
			}
		}
	}
	if len(rq.r.Header["Authorization"]) == 0 {
		if sasErr != nil {
			return nil, sasErr
		}
		if sas != nil {
			if err := checkSASVersion(sas); err != nil {
				return nil, err
			}
			return sas, nil
		}
		if s.bearer != nil {
			// Azure's answer to an anonymous request names where tokens come from; the
			// SDKs' challenge policies read the tenant from it.
			rq.w.Header().Set("WWW-Authenticate", s.bearer.Challenge())
		}
		return nil, s.verifier.Authenticate(rq.r, rq.account) // 401 NoAuthenticationInformation
	}
	if s.bearer != nil && len(rq.r.Header["Authorization"]) == 1 {
		if token, ok := bearerToken(rq.r.Header["Authorization"][0]); ok {
			// A token decides alone; a SAS beside it is ignored, as beside a shared key.
			return nil, s.authenticateBearer(rq, token)
		}
	}
	keyErr := s.verifier.Authenticate(rq.r, rq.account)
	switch {
	case keyErr == nil:
		rq.keyVerified = true
		return nil, nil
	case sas != nil:
		if err := checkSASVersion(sas); err != nil {
			return nil, noteRefusal(err, "The Authorization header was not used, it did not verify", keyErr)
		}
		rq.keyRefused = keyErr
		return sas, nil
	case sasErr != nil:
		return nil, noteRefusal(keyErr, "The shared access signature in the query was refused too", sasErr)
	}
	return nil, keyErr
}

// checkSASVersion refuses, 403 AuthenticationFailed, a SAS whose signed version is not one
// of the storage service versions Cerulean serves (serviceVersions): the request would be
// processed with that version (requestVersion), and a version Cerulean does not know is
// one whose string to sign and semantics it cannot claim to honour — as an unknown
// x-ms-version is 400 with a shared key. (Azure implementations answer an sv they do not
// support with AuthenticationFailed: docs/compatibility.md "Credentials".)
func checkSASVersion(sas *auth.SAS) error {
	if serviceVersions[sas.Version] {
		return nil
	}
	return azerr.New(azerr.AuthenticationFailed).WithDetail(fmt.Sprintf(
		"The signed version (sv) '%s' is not a version of the storage services this server knows (%s to %s).", sas.Version, oldestVersion, newestVersion))
}

// noteRefusal adds to err's detail why the other credential of the request was refused.
func noteRefusal(err error, what string, other error) error {
	e, ok := azerr.As(err)
	if !ok {
		return err
	}
	o, _ := azerr.As(other)
	why := o.Detail
	if why == "" {
		why = o.Message
	}
	note := what + ": " + string(o.Code) + ": " + why
	if e.Detail != "" {
		note = e.Detail + " " + note
	}
	return e.WithDetail(note)
}

// sasOperation names what a routed request does, for SAS permission checks (and, through
// operationNames, for the logs and metrics). A request that names no operation of the
// service — a comp it does not know on a table or on the service, the service root without
// restype=service — is auth.OpUnknown: authorized as far as the SAS goes, then answered 400
// InvalidQueryParameterValue by its handler, as the account owner is.
func sasOperation(res Resource, method string, q map[string][]string, cond table.Condition) auth.OpKind {
	comps, hasComp := q["comp"]
	comp := ""
	if len(comps) > 0 {
		comp = comps[0]
	}
	switch res.Kind {
	case KindService:
		if rt := q["restype"]; len(rt) == 0 || rt[0] != "service" {
			return auth.OpUnknown
		}
		switch {
		case comp == "stats":
			return auth.OpGetServiceStats
		case comp != "properties":
			return auth.OpUnknown
		case method == http.MethodPut:
			return auth.OpSetServiceProps
		}
		return auth.OpGetServiceProps
	case KindTables:
		if method == http.MethodPost {
			return auth.OpCreateTable
		}
		return auth.OpQueryTables
	case KindTable:
		if method == http.MethodDelete {
			return auth.OpDeleteTable
		}
		return auth.OpQueryTables
	case KindBatch:
		return auth.OpBatch
	case KindEntities:
		if !hasComp {
			if method == http.MethodPost {
				return auth.OpInsert
			}
			return auth.OpQueryEntities
		}
		switch comp {
		case compSettings:
			if method == http.MethodPut {
				return auth.OpSetTableSettings
			}
			return auth.OpGetTableSettings
		case compBulk:
			// Like a $batch: the table here, each operation by the handler (and, on a
			// standard table, the answer to an unknown comp).
			return auth.OpBatch
		case compChanges:
			return auth.OpReadChanges
		case "acl":
			if method == http.MethodPut {
				return auth.OpSetACL
			}
			return auth.OpGetACL
		}
		return auth.OpUnknown
	}
	return entityOp(method, cond)
}

// opCondition is the request's If-Match as far as naming its operation goes: a malformed
// one is still a condition, so that a PUT with If-Match: "x" is an Update (authorized and
// logged as one, and answered 400 by its handler), not an Insert Or Replace.
func opCondition(r *http.Request) table.Condition {
	cond, err := ifMatch(r)
	if err != nil && len(r.Header["If-Match"]) > 0 {
		cond.Present = true
	}
	return cond
}

// entityOp names a single-entity operation (also inside a batch).
func entityOp(method string, cond table.Condition) auth.OpKind {
	switch method {
	case http.MethodGet:
		return auth.OpGetEntity
	case http.MethodPost:
		return auth.OpInsert
	case http.MethodPut:
		if cond.Present {
			return auth.OpUpdate
		}
		return auth.OpUpsertReplace
	case "MERGE", http.MethodPatch:
		if cond.Present {
			return auth.OpMerge
		}
		return auth.OpUpsertMerge
	}
	return auth.OpDelete
}

// authorizeSAS checks a SAS against the operation and keeps the grant on the request for
// the key-range checks that follow. Stored access policies are read on every request, so
// changing or removing one takes effect at once.
func (s *Server) authorizeSAS(rq *request, sas *auth.SAS, kind auth.OpKind) error {
	ip := net.ParseIP(rq.r.RemoteAddr)
	if host, _, err := net.SplitHostPort(rq.r.RemoteAddr); err == nil {
		ip = net.ParseIP(host)
	}
	lookup := func(tbl, id string) (auth.Policy, bool, error) {
		// Strong (the zero Read): a revoked policy stops working at once, replicas or not.
		ids, _, err := s.tables.TableACL(rq.r.Context(), rq.account, tbl, table.Read{})
		if err != nil {
			return auth.Policy{}, false, nil
		}
		si, ok := svcprops.Lookup(ids, id)
		if !ok {
			return auth.Policy{}, false, nil
		}
		p := auth.Policy{ID: si.ID, Permission: si.Permission}
		if si.Start != nil {
			p.Start = *si.Start
		}
		if si.Expiry != nil {
			p.Expiry = *si.Expiry
		}
		return p, true, nil
	}
	op := auth.Operation{Kind: kind, Table: rq.res.Table, HTTPS: rq.r.TLS != nil, ClientIP: ip, StrictProtocol: s.strictProtocol}
	g, err := s.verifier.AuthorizeSAS(rq.account, sas, op, nowFunc(), lookup)
	if err != nil {
		if rq.keyRefused != nil {
			return noteRefusal(err, "The Authorization header was not used, it did not verify", rq.keyRefused)
		}
		return err
	}
	rq.grant = g
	return nil
}

// grantBound is the key range a SAS grant confines queries to, as a scan bound:
// start (spk, srk) inclusive, end (epk, erk) inclusive. ok is false when unbounded.
func grantBound(g *auth.Grant) (start storage.Key, end *storage.Key, ok bool) {
	if g == nil || !g.HasRange {
		return storage.Key{}, nil, false
	}
	start = storage.Key{PartitionKey: g.StartPK, RowKey: g.StartRK}
	switch {
	case g.EndPK == "":
	case g.EndRK == "":
		end = &storage.Key{PartitionKey: g.EndPK + "\x00"}
	default:
		end = &storage.Key{PartitionKey: g.EndPK, RowKey: g.EndRK + "\x00"}
	}
	return start, end, true
}
