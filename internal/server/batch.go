package server

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"unsafe"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/batch"
	"github.com/ceruleandb/cerulean/internal/edmjson"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/odata"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/table"
)

// batchOp is what one decoded changeset operation's response needs besides its
// table.BatchOp (which postBatch keeps apart, in the slice it hands to Transact).
type batchOp struct {
	pref   string
	status int
}

// postBatch serves POST $batch: an entity group transaction. Errors that prevent
// processing at all (body too large, malformed multipart) are ordinary error responses;
// an operation's failure is a 202 whose changeset holds only that operation's error.
func (s *Server) postBatch(rq *request) error {
	// Nothing decoded from the body aliases it (batch.Parse and DecodeEntity copy what
	// they keep), so it may be recycled when the request ends.
	body, err := s.readBatchBody(rq, batch.MaxBodyBytes)
	if err != nil {
		return err
	}
	req, err := batch.Parse(rq.r.Header.Get("Content-Type"), body)
	if err != nil {
		var oe *batch.OpError
		if errors.As(err, &oe) {
			return s.batchFailure(rq, oe.Index, oe.ContentID, oe.Err)
		}
		return err
	}
	if req.Retrieve {
		return s.batchRetrieve(rq, &req.Operations[0])
	}
	var tableName string
	n := len(req.Operations)
	tops, ops := make([]table.BatchOp, n), make([]batchOp, n)
	for i := range req.Operations {
		o := &req.Operations[i]
		name, err := s.decodeBatchOp(rq, o, &tops[i], &ops[i])
		if err == nil {
			// What the operation holds until the answer is sent: its entity, and its part of
			// the answer, which echoes an inserted entity (batchOpSize).
			if e := s.hold(rq, batchOpSize(o, &tops[i], &ops[i])); e != nil {
				return e
			}
		}
		if err == nil && i > 0 && !table.SameTable(name, tableName) {
			err = azerr.Newf(azerr.InvalidInput, "All operations in a batch must address the same table.")
		}
		if err == nil && rq.grant != nil {
			// A SAS must allow each operation, on its table and inside its key range.
			if err = rq.grant.Check(entityOp(o.Method, tops[i].Cond), name); err == nil {
				err = rq.grant.CheckKeys(tops[i].Entity.PartitionKey, tops[i].Entity.RowKey)
			}
		}
		if err == nil && rq.principal != nil {
			// A token's principal must have a role for each operation.
			err = s.authorizeBearer(rq, entityOp(o.Method, tops[i].Cond), name)
		}
		if err != nil {
			ae, _ := azerr.As(err)
			return s.batchFailure(rq, i, o.ContentID, ae)
		}
		tableName = name
	}
	// The operations hold copies of what they took from the body (the parts alias it):
	// its memory goes back to the budget, and the buffer to its pool.
	for i := range req.Operations {
		req.Operations[i].Body = nil
	}
	s.releaseBatchBody(rq, len(body))
	rq.obs.BatchSize, rq.obs.Table = n, tableName
	var pk string
	if n > 0 {
		pk = tops[0].Entity.PartitionKey
		rq.obs.PartitionKey = pk
	}
	if err := s.gate(rq, tableName, pk, n); err != nil {
		return err
	}
	applied, err := s.tables.Transact(rq.r.Context(), rq.account, tableName, tops)
	if err != nil {
		var be *table.BatchError
		if errors.As(err, &be) {
			return s.batchFailure(rq, be.Index, req.Operations[be.Index].ContentID, be.Err)
		}
		return err
	}
	// One commit: every part, and the $batch response itself, carries its session token.
	// (An empty changeset commits nothing and answers none.)
	var token string
	if n > 0 {
		token = s.setSessionToken(rq.w.Header(), applied.Position)
	}
	rq.obs.EntitiesWritten = n
	results := make([]batch.Result, n)
	// The sub-responses' header values are plain strings (batch.Known) cut from one
	// string, so the operations' ETags and URLs cost two allocations in all. The text is
	// sized for the usual keys at once (growing it by doubling cost as much again).
	size := 0
	for i := range tops {
		size += etagRoom
		if tops[i].Op == storage.Insert {
			size += len(rq.root) + len(tableName) + len("/(PartitionKey='',RowKey='')") +
				len(tops[i].Entity.PartitionKey) + len(tops[i].Entity.RowKey) + keyEscapeRoom
		}
	}
	text := make([]byte, 0, size)
	type span struct{ etag, loc [2]int }
	spans := make([]span, n)
	for i := range tops {
		op, sp := &tops[i], &spans[i]
		if op.Op != storage.Delete {
			sp.etag[0] = len(text)
			text = entity.AppendETag(text, applied.Versions[i])
			sp.etag[1] = len(text)
		}
		if op.Op == storage.Insert {
			e := &op.Entity
			sp.loc[0] = len(text)
			text = append(text, rq.root...)
			text = append(text, '/')
			text = append(text, tableName...)
			text = append(text, "(PartitionKey='"...)
			text = edmjson.AppendKeyEscaped(text, e.PartitionKey)
			text = append(text, "',RowKey='"...)
			text = edmjson.AppendKeyEscaped(text, e.RowKey)
			text = append(text, "')"...)
			sp.loc[1] = len(text)
		}
	}
	all := unsafe.String(unsafe.SliceData(text), len(text)) // text is not written again
	for i := range ops {
		o, sp := &ops[i], &spans[i]
		res := &results[i]
		*res = batch.Result{Status: o.status, ContentID: req.Operations[i].ContentID}
		res.Known.SessionToken = token
		res.Known.ETag = all[sp.etag[0]:sp.etag[1]]
		if tops[i].Op == storage.Insert {
			loc := all[sp.loc[0]:sp.loc[1]]
			res.Known.Location, res.Known.DataServiceID = loc, loc
			res.Known.PreferenceApplied = o.pref
			if o.status == http.StatusCreated {
				res.Known.ContentType = edmjson.ContentType(rq.level)
				opts := edmjson.EntityOptions{Level: rq.level, ServiceRoot: rq.root, Account: rq.account, Table: tableName, Element: true}
				res.Body = edmjson.AppendEntity(nil, &tops[i].Entity, applied.Versions[i], opts)
			}
		}
	}
	// The response is gathered in a pooled buffer (a 100-operation one is tens of KiB).
	bp := bufPool.Get().(*[]byte)
	defer putBuf(bp)
	var ct string
	*bp, ct, err = batch.AppendResponse((*bp)[:0], results)
	if err != nil {
		return err
	}
	rq.send(http.StatusAccepted, ct, *bp)
	return nil
}

// batchOpSize is what a decoded $batch operation holds of the body budget until the
// answer is sent (issue 42, item 27): its entity (decodedSize), its own structures and
// sub-response (about 1 KiB), and for an insert answered with its entity (201) that
// entity as JSON, which takes no more than its part of the request plus 64 bytes a
// property for type annotations. A 4 MiB batch of 100 inserts of 40 KiB strings held 4
// MiB of the budget (its body) and about 12 MiB in fact (body, entities, answer).
func batchOpSize(o *batch.Operation, top *table.BatchOp, op *batchOp) int64 {
	n := decodedSize(&top.Entity) + int64(unsafe.Sizeof(*op)+unsafe.Sizeof(*top)+unsafe.Sizeof(batch.Result{})) + 1<<10
	if op.status == http.StatusCreated {
		n += int64(len(o.Body)) + 64*int64(len(top.Entity.Props))
	}
	return n
}

// etagRoom and keyEscapeRoom size postBatch's text: an ETag takes 46 bytes for any
// version in the DateTime range, and a key rarely needs escaping.
const etagRoom, keyEscapeRoom = 48, 16

// releaseBatchBody gives back a $batch body once nothing uses it: its n bytes to the
// budget and the buffer to batchBodyPool.
func (s *Server) releaseBatchBody(rq *request, n int) {
	if rq.pooledBody != nil {
		batchBodyPool.Put(rq.pooledBody)
		rq.pooledBody = nil
	}
	s.unhold(rq, int64(n))
}

// decodeBatchOp turns one parsed sub-request into a table operation and returns the
// table it addresses.
// It fills top (the operation for Transact) and out (what its answer needs).
func (s *Server) decodeBatchOp(rq *request, o *batch.Operation, top *table.BatchOp, out *batchOp) (string, error) {
	res, err := ParseResource(partPath(rq, o))
	if err != nil {
		return "", err
	}
	cond, err := matchCondition(o.Header.Values("If-None-Match"), o.Header.Values("If-Match"))
	if err != nil {
		return "", err
	}
	top.Cond = cond
	if top.Expiry, err = writeExpiry(o.Method, o.Header.Values(expiryHeaderName)); err != nil {
		return "", err
	}
	var prefer [2]string
	out.pref = preferenceOf(o.Header.AppendValues(prefer[:0], "Prefer"))
	out.status = http.StatusNoContent
	var e entity.Entity
	if o.Method != http.MethodDelete {
		if ct := strings.ToLower(o.Header.Get("Content-Type")); strings.Contains(ct, "xml") {
			return "", azerr.New(azerr.AtomFormatNotSupported)
		}
		var keys edmjson.Keys
		if e, keys, err = edmjson.DecodeEntity(o.Body); err != nil {
			return "", err
		}
		if o.Method == http.MethodPost {
			if err := keys.Require(); err != nil {
				return "", err
			}
		}
	}
	switch {
	case o.Method == http.MethodPost && res.Kind == KindEntities:
		top.Op = storage.Insert
		top.Cond = table.Condition{}
		if out.pref != "return-no-content" {
			out.status = http.StatusCreated
		}
	case res.Kind != KindEntity:
		return "", azerr.Newf(azerr.InvalidInput, "A batch operation must address an entity or a table's entities.")
	case o.Method == http.MethodPut:
		top.Op = table.OpFor(table.ReplaceMode, cond)
	case o.Method == "MERGE":
		top.Op = table.OpFor(table.MergeMode, cond)
	case o.Method == http.MethodDelete:
		top.Op = storage.Delete
	default:
		return "", azerr.New(azerr.UnsupportedHTTPVerb)
	}
	if res.Kind == KindEntity {
		e.PartitionKey, e.RowKey = res.PartitionKey, res.RowKey
	}
	top.Entity = e
	return res.Table, nil
}

// partPath is a part's resource path after the account. Part URLs may be absolute (the
// host is ignored) or relative, with or without the account segment.
func partPath(rq *request, o *batch.Operation) string {
	p := strings.TrimPrefix(o.Path, "/")
	seg, rest, _ := strings.Cut(p, "/")
	if seg == rq.account || seg == rq.account+"-secondary" {
		return rest
	}
	return p
}

// batchFailure answers 202 with a changeset holding only the failing operation's error,
// its message prefixed with the operation's index, as every SDK parses it.
func (s *Server) batchFailure(rq *request, index int, contentID string, e *azerr.Error) error {
	rq.noteError(e)
	msg := strconv.Itoa(index) + ":" + errorMessage(rq, e)
	body := edmjson.AppendError(nil, string(e.Code), msg)
	res := batch.Result{
		Status:    e.Status,
		Header:    http.Header{"Content-Type": {edmjson.ContentType(rq.level)}},
		Body:      body,
		ContentID: contentID,
	}
	var buf bytes.Buffer
	ct, err := batch.WriteFailure(&buf, index, res)
	if err != nil {
		return err
	}
	// The real service leaves x-ms-error-code off a 202; setting it costs no SDK anything
	// and gives the Go SDK's ResponseError a code.
	rq.w.Header()["X-Ms-Error-Code"] = []string{string(e.Code)}
	rq.send(http.StatusAccepted, ct, buf.Bytes())
	return nil
}

// batchRetrieve answers a batch holding a single GET of one entity.
func (s *Server) batchRetrieve(rq *request, o *batch.Operation) error {
	res, err := ParseResource(partPath(rq, o))
	if err == nil && res.Kind != KindEntity {
		err = azerr.Newf(azerr.InvalidInput, "A retrieve operation in a batch must address one entity.")
	}
	var result batch.Result
	var sel []string
	if err == nil {
		sel, err = odata.ParseSelect(o.Query().Get("$select"))
	}
	var at storage.Position
	if err == nil {
		// The retrieve's token may come on its part or on the $batch request.
		part := http.Header{}
		for _, k := range [...]string{headerSessionToken, headerDataverseToken} {
			if vs := o.Header.Values(k); vs != nil {
				part[k] = vs
			}
		}
		if at, err = s.readPosition(part); err == nil {
			var outer storage.Position
			outer, err = s.readPosition(rq.r.Header)
			at = max(at, outer)
		}
	}
	if err == nil {
		var rec storage.Record
		// Strong with the token, as before read consistency: the batch answers its own
		// session token, and x-ms-consistency-level does not apply to it.
		rec, _, err = s.tables.GetEntityEncoded(rq.r.Context(), rq.account, res.Table, res.PartitionKey, res.RowKey, table.Read{Token: at})
		rq.obs.Table, rq.obs.PartitionKey, rq.obs.BatchSize = res.Table, res.PartitionKey, 1
		if err == nil {
			rq.obs.EntitiesRead = 1
			opts := edmjson.EntityOptions{Level: rq.level, ServiceRoot: rq.root, Account: rq.account, Table: res.Table, Element: true, Select: edmjson.NewSelection(sel)}
			h := http.Header{"Content-Type": {edmjson.ContentType(rq.level)}, "ETag": {entity.ETag(rec.Version)}}
			// The part's own Prefer asks for the expiry, and its answer says so.
			opts.Expiry = wantsExpiry(http.Header{"Prefer": o.Header.Values("Prefer")}, h)
			result = batch.Result{Status: http.StatusOK, Header: h, Body: edmjson.AppendRecord(nil, &rec, opts)}
		}
	}
	if err != nil {
		// The retrieve is operation 0, and its failure carries the "0:" prefix of every
		// other batch failure (batchFailure): the parsers that read an index (Python's
		// TableTransactionError, .NET) then find 0 instead of guessing, and the legacy .NET
		// library, the one client that sends a retrieve, reads a 404 by its status alone.
		e, _ := azerr.As(err)
		msg := "0:" + errorMessage(rq, e)
		result = batch.Result{Status: e.Status, Header: http.Header{"Content-Type": {edmjson.ContentType(rq.level)}}, Body: edmjson.AppendError(nil, string(e.Code), msg)}
	}
	result.ContentID = o.ContentID
	var buf bytes.Buffer
	ct, err := batch.WriteRetrieve(&buf, result)
	if err != nil {
		return err
	}
	rq.send(http.StatusAccepted, ct, buf.Bytes())
	return nil
}
