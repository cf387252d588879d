package batch_test

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/ceruleandb/cerulean/internal/batch"
)

// recordGoBatch has the real Go SDK build a $batch of the given actions and returns the
// request's Content-Type and body as they went over the wire.
func recordGoBatch(b *testing.B, actions []aztables.TransactionAction) (string, []byte) {
	b.Helper()
	s := newBatchServer(b, false, answer(-1, nil, nil))
	if _, err := sdkClient(b, s, "").SubmitTransaction(context.Background(), actions, nil); err != nil {
		b.Fatal(err)
	}
	rec := s.last(b)
	return rec.header.Get("Content-Type"), rec.body
}

func inserts(n int) []aztables.TransactionAction {
	actions := make([]aztables.TransactionAction, n)
	for i := range actions {
		actions[i] = aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: []byte(
			`{"PartitionKey":"bench","RowKey":"` + strconv.Itoa(100000+i) +
				`","Name":"entity name","Count":42,"Price":1.5,"Big":"1234567890123","Big@odata.type":"Edm.Int64"}`)}
	}
	return actions
}

// BenchmarkParse100 parses a 100-insert batch exactly as the Go SDK sends it.
func BenchmarkParse100(b *testing.B) {
	ct, body := recordGoBatch(b, inserts(100))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		req, err := batch.Parse(ct, body)
		if err != nil || len(req.Operations) != 100 {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteResponse100 writes the success response of a 100-insert batch (ETag,
// Location, DataServiceId, Preference-Applied and Content-ID on each sub-response).
func BenchmarkWriteResponse100(b *testing.B) {
	results := make([]batch.Result, 100)
	for i := range results {
		results[i] = insertResult(strconv.Itoa(100000+i), strconv.Itoa(i+1))
	}
	var buf bytes.Buffer
	if _, err := batch.WriteResponse(&buf, results); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(buf.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := batch.WriteResponse(io.Discard, results); err != nil {
			b.Fatal(err)
		}
	}
}
