package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// Client kinds for Options.Client.
const (
	// ClientSDK sends the measured requests through the official Go SDK (aztables): what an
	// application sees, the SDK's own cost included.
	ClientSDK = "sdk"
	// ClientRaw sends them with the bench's own light HTTP/1.1 client (rawConn): one
	// keep-alive connection per worker, request bodies built by appending into reused
	// buffers, SharedKeyLite or SAS signing without a pipeline. It costs the load generator
	// a fraction of the SDK's CPU, so on a machine the server shares, the server's capacity
	// shows instead of the client's.
	ClientRaw = "raw"
)

// target is how one worker sends the workloads' requests to one endpoint. The workloads are
// written against it, so the same workload runs through the SDK or the raw client, against
// the server or the floor (floor.go). A target belongs to one worker at a time.
type target interface {
	// insert adds entity (JSON) as Insert Entity does, without Prefer: the SDK's AddEntity,
	// answered 201 with the entity.
	insert(ctx context.Context, entity []byte) error
	// get reads one entity and returns its JSON and ETag.
	get(ctx context.Context, pk, rk string) (entity []byte, etag string, err error)
	// upsert insert-or-merges entity (JSON, keys pk and rk) as the SDK's UpsertEntity does by
	// default: PATCH without If-Match, answered 204.
	upsert(ctx context.Context, pk, rk string, entity []byte) error
	// replace replaces an entity with If-Match: etag (Update Entity, mode Replace).
	replace(ctx context.Context, pk, rk string, entity []byte, etag string) error
	// query runs a filtered query, following continuation tokens to the end, and returns
	// how many entities came back.
	query(ctx context.Context, filter string) (int, error)
	// batch inserts entities (all in partition pk) as one entity group transaction.
	batch(ctx context.Context, pk string, entities [][]byte) error
	// close releases the target's connections.
	close()
}

// sdkTarget sends through an aztables.Client; it is safe for concurrent use, so all workers
// share one.
type sdkTarget struct{ t *aztables.Client }

func (s sdkTarget) insert(ctx context.Context, entity []byte) error {
	_, err := s.t.AddEntity(ctx, entity, nil)
	return err
}

func (s sdkTarget) get(ctx context.Context, pk, rk string) ([]byte, string, error) {
	g, err := s.t.GetEntity(ctx, pk, rk, nil)
	if err != nil {
		return nil, "", err
	}
	return g.Value, string(g.ETag), nil
}

func (s sdkTarget) upsert(ctx context.Context, _, _ string, entity []byte) error {
	_, err := s.t.UpsertEntity(ctx, entity, nil) // UpdateMode defaults to Merge
	return err
}

func (s sdkTarget) replace(ctx context.Context, _, _ string, entity []byte, etag string) error {
	e := azcore.ETag(etag)
	_, err := s.t.UpdateEntity(ctx, entity, &aztables.UpdateEntityOptions{IfMatch: &e, UpdateMode: aztables.UpdateModeReplace})
	return err
}

func (s sdkTarget) query(ctx context.Context, filter string) (int, error) {
	pager := s.t.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter})
	n := 0
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return n, err
		}
		n += len(page.Entities)
	}
	return n, nil
}

func (s sdkTarget) batch(ctx context.Context, _ string, entities [][]byte) error {
	actions := make([]aztables.TransactionAction, len(entities))
	for i, e := range entities {
		actions[i] = aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: e}
	}
	_, err := s.t.SubmitTransaction(ctx, actions, nil)
	return err
}

func (sdkTarget) close() {}

// statusError is a non-success answer to the raw client: the status, the Azure error code
// (x-ms-error-code) and the request line, which is what identifies it in a report.
type statusError struct {
	status       int
	code         string
	method, path string
}

func (e *statusError) Error() string {
	s := fmt.Sprintf("%s %s: HTTP %d", e.method, e.path, e.status)
	if e.code != "" {
		s += " " + e.code
	}
	return s
}

// statusOf returns the HTTP status of a service answer carried by err, from either client,
// and its Azure error code; ok is false for transport errors.
func statusOf(err error) (status int, code string, ok bool) {
	var re *azcore.ResponseError
	var se *statusError
	switch {
	case errors.As(err, &re):
		return re.StatusCode, re.ErrorCode, true
	case errors.As(err, &se):
		return se.status, se.code, true
	}
	return 0, "", false
}
