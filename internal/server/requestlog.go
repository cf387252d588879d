package server

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/azerr"
)

// logRequest writes the request's log line: at debug level one for every request, and at
// info level (as warnings) every request answered 5xx, plus every request slower than
// Options.SlowRequest. Two 5xx answers come in floods and are summarised instead, one
// line per code per failureLogWindow carrying how many were left out (see failureLog):
// 503 ServerBusy, the answer of a state (storage unreachable, disk full, the body budget
// spent) that is itself logged when it begins and ends, while every client retries; and
// 500 OperationTimedOut, which stalled or trickling uploads earn by the hundred. The line carries what an operator needs to find the request again
// (request ids, operation, account, table), never a credential: no Authorization header, no
// query string (a SAS signature travels in it), and every client-supplied value redacted
// (see redacted).
func (s *Server) logRequest(rq *request, start time.Time) {
	elapsed := time.Since(start)
	status := rq.rw.status
	if status == 0 && !rq.reset {
		status = http.StatusOK
	}
	failStatus := status
	if rq.err != nil && rq.err.Status > failStatus {
		failStatus = rq.err.Status // a batch answers 202 for a failed operation
	}
	level, msg := slog.LevelDebug, "request"
	var omitted int64
	switch {
	case failStatus >= 500 && rq.obs.Throttled == "" && (rq.obs.Fault == "" || rq.obs.Fault == "latency"):
		level, msg = slog.LevelWarn, "request failed"
		if rq.err != nil && (rq.err.Code == azerr.ServerBusy || rq.err.Code == azerr.OperationTimedOut) {
			var show bool
			if show, omitted = s.busyLog.admit(rq.err.Code, time.Now()); !show {
				level = slog.LevelDebug
			}
		}
	case rq.obs.Throttled != "" || rq.obs.Fault != "" && rq.obs.Fault != "latency":
		// Answers the operator asked for (--scale-targets, --faults): debug only.
		level = slog.LevelDebug
	case s.limits.SlowRequest > 0 && elapsed >= s.limits.SlowRequest:
		level, msg = slog.LevelInfo, "slow request"
	}
	ctx := context.Background()
	if !s.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 15)
	attrs = append(attrs,
		slog.String("op", s.operation(rq)),
		slog.Int("status", status),
	)
	if code := rq.w.Header().Get("X-Ms-Error-Code"); code != "" {
		attrs = append(attrs, slog.String("code", code))
	}
	attrs = append(attrs,
		slog.Duration("latency", elapsed),
		slog.String("request_id", rq.id),
	)
	if v := rq.w.Header().Get("X-Ms-Client-Request-Id"); v != "" {
		attrs = append(attrs, slog.String("client_request_id", s.redacted(rq, v)))
	}
	attrs = append(attrs, slog.String("account", s.redacted(rq, rq.account)))
	if rq.obs.Throttled != "" {
		attrs = append(attrs, slog.String("throttled", rq.obs.Throttled))
	}
	if rq.obs.Fault != "" {
		attrs = append(attrs, slog.String("fault", rq.obs.Fault))
	}
	if rq.res.Table != "" {
		attrs = append(attrs, slog.String("table", s.redacted(rq, rq.res.Table)))
	}
	attrs = append(attrs,
		slog.Int64("bytes_in", rq.bytesIn),
		slog.Int64("bytes_out", rq.rw.bytesOut),
		slog.String("remote", rq.r.RemoteAddr),
	)
	if failStatus >= 500 && rq.err != nil {
		attrs = append(attrs, slog.String("err", s.redacted(rq, rq.err.Message)))
	}
	if omitted > 0 {
		attrs = append(attrs, slog.Int64("similar_not_logged", omitted))
	}
	s.log.LogAttrs(ctx, level, msg, attrs...)
}

// failureLogWindow is how often a flooding error code gets an info-level line.
const failureLogWindow = 10 * time.Second

// failureLog rate-limits the info-level lines of error codes that come in floods: the
// first answer with a code in each failureLogWindow is logged, with the number of answers
// with that code left out since the previous line; the others are logged at debug only.
type failureLog struct {
	mu    sync.Mutex
	codes map[azerr.Code]*failureCount
}

type failureCount struct {
	last    time.Time
	omitted int64
}

// admit reports whether an answer with code at now gets its info-level line, and how
// many such answers were left out since the previous one.
func (f *failureLog) admit(code azerr.Code, now time.Time) (show bool, omitted int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.codes == nil {
		f.codes = make(map[azerr.Code]*failureCount)
	}
	c := f.codes[code]
	if c == nil {
		c = &failureCount{}
		f.codes[code] = c
	}
	if !c.last.IsZero() && now.Sub(c.last) < failureLogWindow {
		c.omitted++
		return false, 0
	}
	omitted, c.omitted, c.last = c.omitted, 0, now
	return true, omitted
}

// operation names what the request asked for, with the names Azure's Storage Analytics
// logs use for the Table service ("Storage Analytics logged operations and status
// messages", https://learn.microsoft.com/rest/api/storageservices/storage-analytics-logged-operations-and-status-messages).
// The operation is the one SAS authorization checks (sasOperation); only a read of one
// table by its own URL, which authorization treats as Query Tables, has a name of its own.
// A request too malformed to name, or naming no operation of the service (a comp it does
// not know), is "Unknown".
func (s *Server) operation(rq *request) string {
	r := rq.r
	if r.Method == http.MethodOptions {
		return "TablePreflightRequest"
	}
	res := rq.res
	if res.Kind == 0 { // not routed yet (an authentication failure)
		var err error
		if res, err = ParseResource(s.resourcePath(rq, rq.pathStyle)); err != nil {
			return "Unknown"
		}
	}
	method, err := effectiveMethod(r)
	if err != nil {
		return "Unknown"
	}
	if res.Kind == KindTable && method == http.MethodGet {
		return "QueryTable"
	}
	// The URL's own query: authenticate removed the SAS parameters from rq.query. Parsed
	// once, and not at all without a query string (most entity operations).
	var q url.Values
	if r.URL.RawQuery != "" {
		q = r.URL.Query()
	}
	if res.Kind == KindEntities && q.Get("comp") == compBulk {
		return "BulkWrite" // Cerulean's own: no Storage Analytics name
	}
	if res.Kind == KindEntities && q.Get("comp") == compChanges {
		return "ReadChanges" // Cerulean's own too
	}
	if name, ok := operationNames[sasOperation(res, method, q, opCondition(r))]; ok {
		return name
	}
	return "Unknown"
}

// operationNames are the Storage Analytics names of the operations.
var operationNames = map[auth.OpKind]string{
	auth.OpQueryEntities:   "QueryEntities",
	auth.OpGetEntity:       "QueryEntity",
	auth.OpInsert:          "InsertEntity",
	auth.OpUpdate:          "UpdateEntity",
	auth.OpMerge:           "MergeEntity",
	auth.OpDelete:          "DeleteEntity",
	auth.OpUpsertReplace:   "InsertOrReplaceEntity",
	auth.OpUpsertMerge:     "InsertOrMergeEntity",
	auth.OpQueryTables:     "QueryTables",
	auth.OpCreateTable:     "CreateTable",
	auth.OpDeleteTable:     "DeleteTable",
	auth.OpGetServiceProps: "GetTableServiceProperties",
	auth.OpSetServiceProps: "SetTableServiceProperties",
	auth.OpGetServiceStats: "GetTableServiceStats",
	auth.OpGetACL:          "GetTableACL",
	auth.OpSetACL:          "SetTableACL",
	auth.OpBatch:           "EntityGroupTransaction",
	// Cerulean's extensions, named in the same style.
	auth.OpGetTableSettings: "GetTableSettings",
	auth.OpSetTableSettings: "SetTableSettings",
}

// redacted is v with every credential in it redacted (auth.Redactor): a SAS signature
// (sig=…) or an account key in any layer of percent-encoding, and the request's own SAS
// signature wherever it appears. It is how every client-supplied value reaches a log or an
// observer: a client that percent-encodes the '?' of a SAS URL sends its signature as part
// of the path, so the account or table the request addressed can hold it.
func (s *Server) redacted(rq *request, v string) string {
	if v == "" {
		return v
	}
	if !rq.ownSigKnown {
		rq.ownSigKnown = true
		switch {
		case rq.sas != nil:
			rq.ownSig = rq.sas.Signature
		case strings.Contains(rq.r.URL.RawQuery, "sig="):
			rq.ownSig = rq.r.URL.Query().Get("sig")
		}
		// An unescaped '+' arrives as a space (auth.ParseSAS restores it the same way).
		rq.ownSig = strings.ReplaceAll(rq.ownSig, " ", "+")
	}
	return s.redact.StringWith(v, rq.ownSig)
}

// noteError keeps the error a request is answered with, for its log line.
func (rq *request) noteError(e *azerr.Error) { rq.err = e }

// observeRequest hands the answered request to the observer. The handlers have filled
// rq.obs's PartitionKey and entity counts; the rest is what the log line reports too. Every
// string the client chose (account, table, keys, client request id) is redacted, so no
// observer — the access log, the hot-partition lines and metric, the console — ever holds
// a credential a client put where it did not belong.
func (s *Server) observeRequest(rq *request, start time.Time) {
	o := &rq.obs
	o.Start = start
	o.Latency = time.Since(start)
	o.ID = rq.id
	o.ClientRequestID = s.redacted(rq, first(rq.w.Header()["X-Ms-Client-Request-Id"]))
	o.Account = s.redacted(rq, rq.account)
	o.Operation = s.operation(rq)
	res := rq.res
	if res.Kind == 0 { // not routed (refused before): what it addressed, for the access log
		if r, err := ParseResource(s.resourcePath(rq, rq.pathStyle)); err == nil {
			res = r
		}
	}
	if o.Table == "" { // a $batch names its table in its parts (batch.go fills it)
		o.Table = res.Table
	}
	if o.PartitionKey == "" && res.Kind == KindEntity {
		o.PartitionKey = res.PartitionKey
	}
	o.Table = s.redacted(rq, o.Table)
	o.PartitionKey = s.redacted(rq, o.PartitionKey)
	o.QueryPartition = s.redacted(rq, o.QueryPartition)
	o.Status = rq.rw.status
	if o.Status == 0 && !rq.reset {
		o.Status = http.StatusOK
	}
	o.ErrorCode = first(rq.w.Header()["X-Ms-Error-Code"])
	o.BytesIn, o.BytesOut = rq.bytesIn, rq.rw.bytesOut
	o.RemoteAddr = rq.r.RemoteAddr
	o.AuthScheme = authScheme(rq)
	if rq.principal != nil {
		o.Principal = rq.principal.Name()
	}
	if rq.err != nil {
		o.AuthFailure = authFailureReason(rq.err)
		if o.AuthFailure == "sas_permission" && rq.principal != nil {
			o.AuthFailure = "role" // a token's principal without the role for it
		}
	}
	s.observer.Observe(o)
}

// authFailureReason is why e refused a request's credentials or their rights, from a
// fixed set so that it can be a metric label: the error code tells authentication from
// authorization, and for 403 AuthenticationFailed the detail's wording (auth package)
// tells the cause. "" if e is not such a refusal.
func authFailureReason(e *azerr.Error) string {
	switch e.Code {
	case azerr.NoAuthenticationInformation:
		return "no_credentials"
	case azerr.InvalidAuthenticationInfo:
		if e.Status == http.StatusUnauthorized {
			return "token" // a bearer token that did not verify (azerr.BearerRefused)
		}
		return "malformed"
	case azerr.KeyBasedAuthenticationNotPermitted:
		return "shared_key_off"
	case azerr.AuthorizationFailure:
		return "sas_scope"
	case azerr.AuthorizationPermissionMismatch:
		return "sas_permission"
	case azerr.AuthorizationResourceTypeMismatch:
		return "sas_resource_type"
	case azerr.AuthorizationProtocolMismatch:
		return "sas_protocol"
	case azerr.AuthorizationSourceIPMismatch:
		return "sas_source_ip"
	case azerr.AuthenticationFailed:
	default:
		return ""
	}
	d := e.Detail
	switch {
	case strings.HasPrefix(d, "The MAC signature"), strings.HasPrefix(d, "Signature did not match"):
		return "signature"
	case strings.HasPrefix(d, "Request date header"), strings.Contains(d, "not a valid RFC 1123 date"):
		return "date"
	case strings.HasPrefix(d, "Bearer"), strings.HasPrefix(d, "Authentication scheme Bearer"):
		return "bearer" // a token where none is taken: no issuer configured, or over HTTP
	case strings.HasPrefix(d, "The account '"):
		return "account_mismatch"
	case strings.HasPrefix(d, "Signature not valid in the specified time frame"):
		return "sas_expired"
	case strings.HasPrefix(d, "The signed"), strings.HasPrefix(d, "The stored access policy"):
		return "sas_policy"
	}
	return "other"
}

// authScheme is how the request authenticated or tried to (observe.Request.AuthScheme).
func authScheme(rq *request) string {
	if rq.sas != nil {
		return "SAS"
	}
	if rq.principal != nil {
		return auth.SchemeBearer
	}
	if h := first(rq.r.Header["Authorization"]); h != "" {
		if rq.keyVerified {
			return auth.Scheme(h)
		}
		if scheme, _, _, err := auth.ParseAuthorization(h); err == nil {
			return scheme
		}
		return "Unknown"
	}
	// authenticate removed the SAS parameters from rq.query: a refused SAS is told by the
	// URL's own (parsed only here, for requests that were not authorized).
	if rq.r.URL.RawQuery != "" && rq.r.URL.Query().Has("sig") {
		return "SAS"
	}
	return ""
}
