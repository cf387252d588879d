package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unsafe"

	"github.com/ceruleandb/cerulean/auth"
	"github.com/ceruleandb/cerulean/azerr"
	"github.com/ceruleandb/cerulean/edmjson"
	"github.com/ceruleandb/cerulean/entity"
	"github.com/ceruleandb/cerulean/storage"
	"github.com/ceruleandb/cerulean/table"
)

// Bulk writes: POST /{table}?comp=bulk on an elastic table (docs/protocol.md §15).
//
// The request is one JSON document:
//
//	{"operations": [
//	  {"op": "insert", "entity": {"PartitionKey": "p", "RowKey": "r", "Price": 5}},
//	  {"op": "merge", "entity": {...}, "ifMatch": "W/\"datetime'…'\""},
//	  {"op": "delete", "entity": {"PartitionKey": "p", "RowKey": "old"}}
//	]}
//
// Each entity is an OData JSON entity exactly as Insert Entity takes it (decoded by
// edmjson.DecodeEntity: type annotations, odata.* keys ignored), so an entity read from a
// query can be written back as it is. "op" is insert, update (replace), merge, upsert
// (insert or replace), upsertMerge (insert or merge) or delete. update, merge and delete
// need the entity to exist; "ifMatch" (an ETag, or "*") makes them conditional on its
// version and is refused on the others. The ETag is never taken from the entity's own
// odata.etag, which every single write ignores too: copying a read entity into a bulk
// request must not make the write conditional unless the caller says so.
//
// The answer is 200 with one result per operation, in request order:
//
//	{"succeeded": 2, "failed": 1, "results": [
//	  {"index": 0, "status": 201, "etag": "W/\"datetime'…'\""},
//	  {"index": 1, "status": 412, "error": {"code": "UpdateConditionNotSatisfied", "message": "…"}},
//	  {"index": 2, "status": 204}
//	]}
//
// and x-ms-session-token covering every operation that succeeded. A body that is not
// such a document (bad JSON, an unknown op or member, an ifMatch where none is allowed)
// is refused whole with 400 before anything is written; a problem with one entity (its
// keys, types, limits, a duplicate, a failed precondition) fails that operation alone.

// bulkBodyCap is the largest bulk body accepted whatever the memory budget.
const bulkBodyCap = 32 << 20

// bulkBodyLimit is the largest bulk request body: a sixteenth of --max-body-memory, at
// most bulkBodyCap (4 MiB with the default budget). Bodies over 64 KiB together may hold
// half of the budget and one client half of that (body.go), and a bulk request holds
// about four times its body at its peak: twice while it is received (its chunks and one
// contiguous copy), then the body and its decoded operations, which take one to two times
// the body for entities of a few properties (decodedSize and bulkOpOverhead: 2 MiB of
// 900-byte entities held 5.5 MiB). So a bulk body of this size with ordinary entities
// always fits in what one client may hold; one whose operations would take more (many
// tiny properties take up to twelve times their JSON) is refused with 413 as it is
// decoded.
func (s *Server) bulkBodyLimit() int64 {
	return min(bulkBodyCap, s.limits.MaxBodyMemory/16)
}

// bulkOpOverhead is what each operation of a bulk request holds besides its entity
// (decodedSize), from decoding to the answer: the decoder's operation (twice: its slice
// grows by doubling), the table operation, its item and its result, and about 256 bytes
// of the answer's JSON and the duplicate check's map.
const bulkOpOverhead = 2*int64(unsafe.Sizeof(edmjson.BulkOperation{})) + int64(unsafe.Sizeof(table.BulkOp{})) +
	int64(unsafe.Sizeof(table.BulkItem{})) + int64(unsafe.Sizeof(bulkResultJSON{})) + 256

// bulkOps maps the request's op names to mutations.
var bulkOps = map[string]storage.Op{
	"insert":      storage.Insert,
	"update":      storage.Replace,
	"merge":       storage.Merge,
	"upsert":      storage.InsertOrReplace,
	"upsertMerge": storage.InsertOrMerge,
	"delete":      storage.Delete,
}

// bulkSASOps is the SAS operation each mutation counts as, so a SAS allows in bulk
// exactly what it allows one entity at a time.
var bulkSASOps = map[storage.Op]auth.OpKind{
	storage.Insert:          auth.OpInsert,
	storage.Replace:         auth.OpUpdate,
	storage.Merge:           auth.OpMerge,
	storage.InsertOrReplace: auth.OpUpsertReplace,
	storage.InsertOrMerge:   auth.OpUpsertMerge,
	storage.Delete:          auth.OpDelete,
}

// bulkResponseJSON is the answer document.
type bulkResponseJSON struct {
	Succeeded int              `json:"succeeded"`
	Failed    int              `json:"failed"`
	Results   []bulkResultJSON `json:"results"`
}

type bulkResultJSON struct {
	Index  int            `json:"index"`
	Status int            `json:"status"`
	ETag   string         `json:"etag,omitempty"`
	Error  *bulkErrorJSON `json:"error,omitempty"`
}

type bulkErrorJSON struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// bulkRequest serves POST /{table}?comp=bulk. On a standard table it answers exactly as
// the service answers a comp value it does not know, so a standard table shows nothing
// of the extension.
func (s *Server) bulkRequest(rq *request, method string) error {
	err := s.tables.CheckBulk(rq.r.Context(), rq.account, rq.res.Table)
	if errors.Is(err, table.ErrNotElastic) {
		return s.unknownComp(rq, method)
	}
	if err != nil {
		return err
	}
	if method != http.MethodPost {
		return azerr.New(azerr.MethodNotAllowed)
	}
	if err := checkContentType(rq.r); err != nil {
		return err
	}
	body, err := s.readBody(rq, s.bulkBodyLimit())
	if err != nil {
		return err
	}
	ops, err := s.decodeBulk(rq, body)
	if err != nil {
		return err
	}
	// Nothing decoded aliases the body: its memory goes back to the budget (and to the
	// collector), and the decoded operations hold theirs until the request ends.
	s.unhold(rq, int64(len(body)))
	rq.obs.BatchSize = len(ops)
	res, err := s.tables.Bulk(rq.r.Context(), rq.account, rq.res.Table, ops)
	if err != nil {
		return err
	}
	rq.obs.EntitiesWritten = res.Succeeded
	out := bulkResponseJSON{Succeeded: res.Succeeded, Failed: res.Failed, Results: make([]bulkResultJSON, len(ops))}
	for i, it := range res.Items {
		r := &out.Results[i]
		r.Index = i
		switch {
		case it.Err != nil:
			r.Status = it.Err.Status
			msg := it.Err.Message
			if it.Err.Detail != "" {
				msg += " " + it.Err.Detail
			}
			r.Error = &bulkErrorJSON{Code: string(it.Err.Code), Message: msg}
		case ops[i].Op == storage.Insert:
			r.Status, r.ETag = http.StatusCreated, entity.ETag(it.Version)
		case ops[i].Op == storage.Delete:
			r.Status = http.StatusNoContent
		default:
			r.Status, r.ETag = http.StatusNoContent, entity.ETag(it.Version)
		}
	}
	b, err := json.Marshal(&out)
	if err != nil {
		return fmt.Errorf("bulk response: %w", err)
	}
	if res.Succeeded > 0 {
		s.setSessionToken(rq.w.Header(), res.Position)
	}
	rq.send(http.StatusOK, "application/json", b)
	return nil
}

// unknownComp is the answer to a ?comp= the service does not know on a table: what
// aclRequest answers, in XML, to the account owner and to a SAS alike (serve authorized
// the SAS for the table, as for a bulk request; see auth.OpUnknown).
func (s *Server) unknownComp(rq *request, method string) error {
	rq.xml = true
	return s.aclRequest(rq, method)
}

// decodeBulk reads the request document into table operations, holding the memory each
// takes (decodedSize and bulkOpOverhead) of the body budget as it is decoded. Errors in
// the document's shape refuse the whole request, as does a budget that cannot hold the
// operations (503, or 413 when one client may never hold that much); errors in one entity
// become that operation's Err.
func (s *Server) decodeBulk(rq *request, body []byte) ([]table.BulkOp, error) {
	in, err := edmjson.DecodeBulkEach(body, table.MaxBulkOperations, func(o *edmjson.BulkOperation) error {
		if e := s.hold(rq, bulkOpOverhead+decodedSize(&o.Entity)); e != nil {
			return e
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	ops := make([]table.BulkOp, len(in))
	for i := range in {
		o, op := &in[i], &ops[i]
		kind, ok := bulkOps[o.Op]
		if !ok {
			return nil, azerr.Newf(azerr.InvalidInput, `Operation %d: "op" is %s; it must be one of insert, update, merge, upsert, upsertMerge, delete.`, i, strconv.Quote(o.Op))
		}
		op.Op = kind
		if o.HasIfMatch {
			switch kind {
			case storage.Insert, storage.InsertOrReplace, storage.InsertOrMerge:
				return nil, azerr.Newf(azerr.InvalidInput, `Operation %d: "ifMatch" is not allowed with %s; use update, merge or delete for a conditional write.`, i, o.Op)
			}
			cond, err := table.ParseCondition(o.IfMatch, true)
			if err != nil {
				e, _ := azerr.As(err)
				return nil, azerr.Newf(e.Code, "Operation %d: %s", i, e.Message)
			}
			op.Cond = cond
		}
		err := o.EntityErr
		if err == nil {
			err = o.Keys.Require()
		}
		if err == nil && rq.grant != nil {
			if err = rq.grant.Check(bulkSASOps[kind], rq.res.Table); err == nil {
				err = rq.grant.CheckKeys(o.Entity.PartitionKey, o.Entity.RowKey)
			}
		}
		op.Entity, op.Err = o.Entity, err
	}
	return ops, nil
}
