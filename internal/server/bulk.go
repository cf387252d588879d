package server

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/edmjson"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/table"
)

// Bulk writes: POST /{table}?comp=bulk on an elastic table (docs/compatibility.md "Bulk writes").
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

// bulkBodyLimit is the largest bulk request body: a quarter of --max-body-memory, at most
// bulkBodyCap (16 MiB with the default budget), which is what one client may hold of
// large bodies (body.go). The body is held once, in the chunks it arrived in
// (readBulkBody), and what the request keeps besides — an index of about a hundred bytes per operation and the
// groups being applied (bulkIndex) — counts against the client's half of the budget
// (holdKept), so a body at the limit fits. (It was a sixteenth while every operation was
// decoded at once: they took 1.2 to 11.6 times their JSON.)
func (s *Server) bulkBodyLimit() int64 {
	return min(bulkBodyCap, s.limits.MaxBodyMemory/4)
}

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

// bulkRequest serves POST /{table}?comp=bulk. On a standard table it answers exactly as
// the service answers a comp value it does not know, so a standard table shows nothing
// of the extension.
//
// The request holds, against the body budget, its body (readBulkBody), an index of its
// operations (scanBulk), and room for the groups of operations it has decoded at any time
// (holdGroups); the body and that room go back once the operations are applied, the
// index once the answer is sent.
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
	if rq.r.Header[headerExpiry] != nil {
		// Refused rather than ignored: a client sending it expects every operation to take
		// it, and none would.
		return azerr.New(azerr.UnsupportedHeader).WithDetail("x-cerulean-expiry: a bulk request's operations take the expiry their table computes; give an explicit one on single writes or $batch operations.")
	}
	body, err := s.readBulkBody(rq, s.bulkBodyLimit())
	if err != nil {
		return err
	}
	x, err := s.scanBulk(rq, body)
	if err != nil {
		return err
	}
	rq.obs.BatchSize = len(x.ops)
	workers, room, err := s.holdGroups(rq, x)
	if err != nil {
		return err
	}
	res, err := s.tables.BulkFrom(rq.r.Context(), rq.account, rq.res.Table, x, workers)
	// The operations are applied and their entities dropped; nothing the answer needs
	// aliases the body, which goes back now, with the groups' room.
	x.body = nil
	s.dropBody(rq)
	s.unholdKept(rq, room)
	if err != nil {
		return err
	}
	rq.obs.EntitiesWritten = res.Succeeded
	if res.Succeeded > 0 {
		s.setSessionToken(rq.w.Header(), res.Position)
	}
	s.sendBulkAnswer(rq, &res, x)
	return nil
}

// unknownComp is the answer to a ?comp= the service does not know on a table: what
// aclRequest answers, in XML, to the account owner and to a SAS alike (serve authorized
// the SAS for the table, as for a bulk request; see auth.OpUnknown).
func (s *Server) unknownComp(rq *request, method string) error {
	rq.xml = true
	return s.aclRequest(rq, method)
}

// bulkIndex is a bulk request as scanBulk indexes it: the body, and per operation what
// grouping, decoding and answering it takes. It is the table.BulkSource of the request:
// Load decodes an operation's entity from the body when its group's turn comes.
type bulkIndex struct {
	body  [][]byte // in chunks of bodyChunk bytes
	ops   []bulkEntry
	grant *auth.Grant
	// allow, for a bearer token's request, refuses an operation its principal has no
	// role for (authorizeBearer); nil otherwise.
	allow func(op auth.OpKind) error
	table string
	// mem is, per operation, a bound on what its decoded entity takes while its group is
	// in flight (bulkEntityMem), until holdGroups has used it.
	mem []int32
	// parts is how many partitions the operations name.
	parts int
}

// bulkEntry is one operation of the index.
type bulkEntry struct {
	start, end int32 // the entity's JSON in the body
	part       int32 // its partition (table.BulkSource), or -1
	op         storage.Op
	cond       table.Condition
}

// Memory a request keeps per operation, per partition and per group in flight, besides
// the entities: the index entry and its memory bound; the table's grouping (an int32,
// twice while its slice grows) and result; the duplicate check's map entry and copy of
// the row key (plus the key's length); a partition's key in the index's map and the
// table's copy (plus twice its length) and its slice; a group's decoded operations and
// mutations.
const (
	bulkPerOp        = int64(unsafe.Sizeof(bulkEntry{})) + 4 + 8 + int64(unsafe.Sizeof(table.BulkItem{})) + 48
	bulkPerPartition = 96
	bulkPerGroup     = table.MaxBatchOperations * (int64(unsafe.Sizeof(table.BulkOp{})) + int64(unsafe.Sizeof(storage.Mutation{})) + 4)
)

// bulkEntityMem bounds what the entity of an operation takes while its group is in
// flight, from its JSON (span bytes, members at its top level, whether it crosses from
// one chunk of the body into the next): its strings and bytes, which unescaping and
// base64 only shrink (span); a Property per member; the decoder's scratch member per
// member past the 32 it keeps on its stack (two slices and a few bytes: 64); the
// engine's encoded copy of the properties, about the JSON again (span); the copy Load
// decodes a crossing entity from (span); and the allocations' rounding (64).
func bulkEntityMem(span, members int, crosses bool) int64 {
	n := 2*int64(span) + int64(members)*int64(unsafe.Sizeof(entity.Property{})) + 64
	if members > 32 {
		n += int64(members) * 64
	}
	if crosses {
		n += int64(span)
	}
	return n
}

// bulkHoldStep is how much index memory scanBulk gathers before it holds it.
const bulkHoldStep = 64 << 10

// scanBulk checks the request document and indexes its operations (edmjson.ScanBulk),
// holding the index's memory (bulkPerOp, bulkPerPartition) as it grows. Errors in the
// document's shape refuse the whole request (the scan's first; then, in order, each
// operation's op and ifMatch), as does a budget that cannot hold the index (503, or 413
// when one client may never hold that much). Problems of one entity are found when it is
// decoded, and fail that operation alone.
func (s *Server) scanBulk(rq *request, body [][]byte) (*bulkIndex, error) {
	// At most one operation per 22 bytes ({"op":"","entity":{}} and a comma): the index
	// never grows by copying.
	x := &bulkIndex{body: body, grant: rq.grant, table: rq.res.Table}
	if rq.principal != nil {
		x.allow = func(op auth.OpKind) error { return s.authorizeBearer(rq, op, rq.res.Table) }
	}
	n := min(table.MaxBulkOperations, int(rq.bytesIn)/22+1)
	x.ops = make([]bulkEntry, 0, n)
	x.mem = make([]int32, 0, n)
	// The index, and the buffer the answer is written from.
	pending := int64(n)*int64(unsafe.Sizeof(bulkEntry{})+4) + bulkAnswerChunk + 1024
	byPK := map[string]int32{}
	var opErr error // the first operation whose op or ifMatch refuses the request
	// What the scan copies of the operations that cross from one chunk into the next.
	grow := func(n int) error {
		if e := s.holdKept(rq, int64(n)); e != nil {
			return e
		}
		return nil
	}
	err := edmjson.ScanBulkChunks(body, table.MaxBulkOperations, grow, func(o *edmjson.BulkEntry) error {
		i := len(x.ops)
		e := bulkEntry{start: int32(o.Start), end: int32(o.End), part: -1}
		kind, ok := bulkOps[string(o.Op)]
		switch {
		case opErr != nil:
		case !ok:
			opErr = azerr.Newf(azerr.InvalidInput, `Operation %d: "op" is %s; it must be one of insert, update, merge, upsert, upsertMerge, delete.`, i, strconv.Quote(string(o.Op)))
		case o.HasIfMatch && (kind == storage.Insert || kind == storage.InsertOrReplace || kind == storage.InsertOrMerge):
			opErr = azerr.Newf(azerr.InvalidInput, `Operation %d: "ifMatch" is not allowed with %s; use update, merge or delete for a conditional write.`, i, o.Op)
		case o.HasIfMatch:
			cond, err := table.ParseCondition(string(o.IfMatch), true)
			if err != nil {
				ae, _ := azerr.As(err)
				opErr = azerr.Newf(ae.Code, "Operation %d: %s", i, ae.Message)
			}
			e.cond = cond
		}
		e.op = kind
		if o.HasPartitionKey {
			p, ok := byPK[string(o.PartitionKey)]
			if !ok {
				p = int32(len(byPK))
				byPK[string(o.PartitionKey)] = p
				pending += bulkPerPartition + 2*int64(len(o.PartitionKey))
			}
			e.part = p
		}
		x.ops = append(x.ops, e)
		crosses := o.Start/bodyChunk != (o.End-1)/bodyChunk
		x.mem = append(x.mem, int32(min(bulkEntityMem(o.End-o.Start, o.Members, crosses), 1<<31-1)))
		pending += bulkPerOp + int64(len(o.RowKey))
		if pending >= bulkHoldStep {
			if e := s.holdKept(rq, pending); e != nil {
				return e
			}
			pending = 0
		}
		return nil
	})
	if err == nil {
		err = opErr
	}
	if err == nil && pending > 0 {
		if e := s.holdKept(rq, pending); e != nil {
			err = e
		}
	}
	if err != nil {
		return nil, err
	}
	x.parts = len(byPK)
	return x, nil
}

// holdGroups holds the memory the request's groups of decoded operations may take at
// once: with w workers, w groups of up to table.MaxBatchOperations operations each, so
// at most the w·100 largest operations' bulkEntityMem, and each group's operations and
// mutations (bulkPerGroup). It asks for room for table.BulkWorkers groups, then fewer
// when the budget cannot hold that many, down to one; it returns how many groups the
// request may apply at once and what it holds for them (until the operations are
// applied), or the error for a budget that cannot hold even one group (503, or 413 when
// one client may never hold that much).
func (s *Server) holdGroups(rq *request, x *bulkIndex) (workers int, room int64, err error) {
	mem := x.mem
	x.mem = nil
	if len(mem) == 0 {
		return 1, 0, nil
	}
	most := max(1, min(table.BulkWorkers, x.parts, (len(mem)+table.MaxBatchOperations-1)/table.MaxBatchOperations))
	if len(mem) > most*table.MaxBatchOperations {
		slices.Sort(mem)
		slices.Reverse(mem)
	}
	// top[w] is what w groups of the largest operations take.
	var sum int64
	top := make([]int64, most+1)
	for w := 1; w <= most; w++ {
		for _, m := range mem[min(len(mem), (w-1)*table.MaxBatchOperations):min(len(mem), w*table.MaxBatchOperations)] {
			sum += int64(m)
		}
		top[w] = sum + int64(w)*bulkPerGroup
	}
	var e *azerr.Error
	for w := most; w >= 1; w-- {
		if e = s.holdKept(rq, top[w]); e == nil {
			return w, top[w], nil
		}
	}
	return 0, 0, e
}

func (x *bulkIndex) Len() int            { return len(x.ops) }
func (x *bulkIndex) Partition(i int) int { return int(x.ops[i].part) }

// Load decodes operation i (table.BulkSource): its entity, then the checks a single write
// of its kind makes before the table's (keys present, what a SAS or the token's roles
// allow), in that order.
func (x *bulkIndex) Load(i int, op *table.BulkOp) {
	e := &x.ops[i]
	op.Op, op.Cond = e.op, e.cond
	ent, keys, err := edmjson.DecodeEntity(x.entity(e))
	if err == nil {
		err = keys.Require()
	}
	if err == nil && x.grant != nil {
		if err = x.grant.Check(bulkSASOps[e.op], x.table); err == nil {
			err = x.grant.CheckKeys(ent.PartitionKey, ent.RowKey)
		}
	}
	if err == nil && x.allow != nil {
		err = x.allow(bulkSASOps[e.op])
	}
	op.Entity, op.Err = ent, err
}

// entity is the JSON of e's entity: in its chunk of the body, or a copy of its parts
// when it crosses from one chunk into the next.
func (x *bulkIndex) entity(e *bulkEntry) []byte {
	start, end := int(e.start), int(e.end)
	if k := start / bodyChunk; k == (end-1)/bodyChunk {
		return x.body[k][start-k*bodyChunk : end-k*bodyChunk]
	}
	b := make([]byte, 0, end-start)
	for k := start / bodyChunk; k*bodyChunk < end; k++ {
		b = append(b, x.body[k][max(start-k*bodyChunk, 0):min(end-k*bodyChunk, bodyChunk)]...)
	}
	return b
}

// bulkAnswerChunk is how much of the answer is encoded before it is written out.
const bulkAnswerChunk = 32 << 10

// sendBulkAnswer writes the answer document, {"succeeded":…,"failed":…,"results":[…]},
// as encoding/json would encode it, in pieces of bulkAnswerChunk with its length
// announced: a pass that measures it, and one that writes it, so the answer is never
// held whole (ten thousand results take about a megabyte).
func (s *Server) sendBulkAnswer(rq *request, res *table.BulkResult, x *bulkIndex) {
	head := fmt.Sprintf(`{"succeeded":%d,"failed":%d,"results":[`, res.Succeeded, res.Failed)
	buf := make([]byte, 0, bulkAnswerChunk+1024)
	total := len(head) + len("]}")
	for i := range res.Items {
		buf = appendBulkResult(buf[:0], i, &res.Items[i], x.ops[i].op)
		total += len(buf)
	}
	h := rq.w.Header()
	h["Content-Type"] = rq.hdr("application/json")
	h["Content-Length"] = rq.hdr(strconv.Itoa(total))
	rq.w.WriteHeader(http.StatusOK)
	buf = append(buf[:0], head...)
	for i := range res.Items {
		buf = appendBulkResult(buf, i, &res.Items[i], x.ops[i].op)
		if len(buf) >= bulkAnswerChunk {
			if _, err := rq.w.Write(buf); err != nil {
				return
			}
			buf = buf[:0]
		}
	}
	buf = append(buf, "]}"...)
	_, _ = rq.w.Write(buf)
}

// appendBulkResult appends result i of the answer (with a comma before all but the
// first): {"index":i,"status":…,"etag":"…"} or {"index":i,"status":…,"error":{"code":…,
// "message":…}}.
func appendBulkResult(dst []byte, i int, it *table.BulkItem, op storage.Op) []byte {
	if i > 0 {
		dst = append(dst, ',')
	}
	dst = append(dst, `{"index":`...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	dst = append(dst, `,"status":`...)
	switch {
	case it.Err != nil:
		dst = strconv.AppendInt(dst, int64(it.Err.Status), 10)
		msg := it.Err.Message
		if it.Err.Detail != "" {
			msg += " " + it.Err.Detail
		}
		dst = append(dst, `,"error":{"code":`...)
		dst = appendJSONString(dst, string(it.Err.Code))
		dst = append(dst, `,"message":`...)
		dst = appendJSONString(dst, msg)
		dst = append(dst, '}')
	case op == storage.Insert:
		dst = append(dst, `201,"etag":`...)
		dst = appendJSONString(dst, entity.ETag(it.Version))
	case op == storage.Delete:
		dst = append(dst, `204`...)
	default:
		dst = append(dst, `204,"etag":`...)
		dst = appendJSONString(dst, entity.ETag(it.Version))
	}
	return append(dst, '}')
}

// appendJSONString appends s as encoding/json encodes a string (HTML characters, U+2028
// and U+2029 escaped; invalid UTF-8 as U+FFFD).
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
