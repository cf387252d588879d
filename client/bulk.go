package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
)

// MaxBulkOperations is the most operations the server takes in one bulk request.
const MaxBulkOperations = 10_000

// BulkOpKind is what a bulk operation does to its entity.
type BulkOpKind string

// Bulk operation kinds. Update, Merge and Delete need the entity to exist (and to have
// the version IfMatch names, when set); Insert needs it not to; the upserts need nothing.
const (
	BulkInsert      BulkOpKind = "insert"
	BulkUpdate      BulkOpKind = "update" // replace every property
	BulkMerge       BulkOpKind = "merge"  // overlay the given properties
	BulkUpsert      BulkOpKind = "upsert" // insert or replace
	BulkUpsertMerge BulkOpKind = "upsertMerge"
	BulkDelete      BulkOpKind = "delete"
)

// BulkOp is one operation of a bulk request.
type BulkOp struct {
	Op BulkOpKind `json:"op"`
	// Entity is the entity as OData JSON with its PartitionKey and RowKey — what the
	// Go SDK's AddEntity takes (json.Marshal of an aztables.EDMEntity, or of any struct
	// or map). It is sent as it is, so it must be valid JSON. A Delete needs only the
	// keys.
	Entity json.RawMessage `json:"entity"`
	// IfMatch, for Update, Merge and Delete, is the ETag the entity must have, or "*";
	// empty means any existing version.
	IfMatch string `json:"ifMatch,omitempty"`
}

// BulkResponse is the answer to a bulk request: one result per operation, in order.
type BulkResponse struct {
	Succeeded int          `json:"succeeded"`
	Failed    int          `json:"failed"`
	Results   []BulkResult `json:"results"`
	// SessionToken covers every operation that succeeded (x-ms-session-token); send it
	// with a read to see them.
	SessionToken string `json:"-"`
}

// BulkResult is one operation's outcome: Status 201 (inserted) or 204 with the entity's
// new ETag (none after a delete), or the error's status with Error set; then nothing of
// the operation was written.
type BulkResult struct {
	Index  int        `json:"index"`
	Status int        `json:"status"`
	ETag   string     `json:"etag,omitempty"`
	Error  *BulkError `json:"error,omitempty"`
}

// BulkError is why one operation failed: a service error code (EntityAlreadyExists,
// UpdateConditionNotSatisfied, ResourceNotFound, InvalidDuplicateRow, ...) and message.
type BulkError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *BulkError) Error() string { return e.Code + ": " + e.Message }

// Bulk writes many entities of an elastic table, across partitions, in one request
// (POST /{table}?comp=bulk). It is not a transaction: each operation succeeds or fails
// on its own and the response says which. An error means the request as a whole was
// refused (a malformed request, a standard table, too many operations or bytes) and
// nothing was written (an *Error), or that no answer arrived — then any operation may or may not
// have been written, and repeating the request with upserts is safe.
func (c *Client) Bulk(ctx context.Context, table string, ops []BulkOp) (*BulkResponse, error) {
	body, err := appendBulk(make([]byte, 0, bulkSize(ops)), ops)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(ctx, http.MethodPost, url.PathEscape(table), url.Values{"comp": {"bulk"}}, nil, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if err := ResponseError(resp); err != nil {
		return nil, fmt.Errorf("bulk: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bulk: the server answered %d, not a bulk answer: it does not take bulk requests", resp.StatusCode)
	}
	var out BulkResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("bulk: decode answer: %w", err)
	}
	out.SessionToken = resp.Header.Get("x-ms-session-token")
	return &out, nil
}

// bulkSize is about the size of the request document of ops.
func bulkSize(ops []BulkOp) int {
	n := 20
	for i := range ops {
		n += 40 + len(ops[i].Op) + len(ops[i].Entity) + len(ops[i].IfMatch)
	}
	return n
}

// appendBulk appends the request document of ops to dst. The entities are copied as
// they are, not encoded again: a bulk load spends its client-side time here, and the
// server checks each entity anyway.
func appendBulk(dst []byte, ops []BulkOp) ([]byte, error) {
	dst = append(dst, `{"operations":[`...)
	for i := range ops {
		o := &ops[i]
		if o.Op == "" || len(o.Entity) == 0 {
			return nil, fmt.Errorf("bulk: operation %d: no op or no entity", i)
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		op, _ := json.Marshal(string(o.Op))
		dst = append(dst, `{"op":`...)
		dst = append(dst, op...)
		dst = append(dst, `,"entity":`...)
		dst = append(dst, o.Entity...)
		if o.IfMatch != "" {
			m, _ := json.Marshal(o.IfMatch)
			dst = append(dst, `,"ifMatch":`...)
			dst = append(dst, m...)
		}
		dst = append(dst, '}')
	}
	return append(dst, `]}`...), nil
}
