package table

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/ceruleandb/cerulean/azerr"
	"github.com/ceruleandb/cerulean/storage"
)

// MaxPageSize is the most entities or tables one page holds.
const MaxPageSize = 1000

// PageBudget is how long one query page may run before it returns what it has and a
// continuation (the service's 5 s rule).
const PageBudget = 5 * time.Second

// Query selects entities of one table.
type Query struct {
	// PartitionKey, when non-nil, restricts the query to one partition.
	PartitionKey *string
	// Top is the page size (1–1000); 0 means 1000.
	Top int
	// NextPartitionKey and NextRowKey are the continuation tokens of the previous page.
	NextPartitionKey, NextRowKey string
}

// Page is one page of query results. NextPartitionKey/NextRowKey are both non-empty when
// more results may follow (an SDK stops when either is missing) and both empty otherwise.
type Page struct {
	Records                      []storage.Record
	NextPartitionKey, NextRowKey string
}

// QueryEntities returns one page of q's results in (PartitionKey, RowKey) order.
func (s *Service) QueryEntities(ctx context.Context, account, table string, q Query) (Page, error) {
	top := q.Top
	if top <= 0 || top > MaxPageSize {
		top = MaxPageSize
	}
	req := storage.ScanRequest{Limit: top, Deadline: time.Now().Add(PageBudget)}
	if q.PartitionKey != nil {
		pk := *q.PartitionKey
		req.Start = storage.Key{PartitionKey: pk}
		req.End = &storage.Key{PartitionKey: pk + "\x00"}
	}
	if q.NextPartitionKey != "" || q.NextRowKey != "" {
		pk, err1 := decodeToken(q.NextPartitionKey)
		rk, err2 := decodeToken(q.NextRowKey)
		if err1 != nil || err2 != nil {
			return Page{}, azerr.Newf(azerr.InvalidInput, "The continuation token is not valid.")
		}
		resume := storage.Key{PartitionKey: pk, RowKey: rk}
		if req.Start.Less(resume) {
			req.Start = resume
		}
	}
	res, err := s.eng.Scan(ctx, account, table, req)
	if err != nil {
		return Page{}, s.mapErr(err, entityScope)
	}
	p := Page{Records: res.Records}
	if res.Next != nil {
		p.NextPartitionKey = encodeToken(res.Next.PartitionKey)
		p.NextRowKey = encodeToken(res.Next.RowKey)
	}
	return p, nil
}

// Continuation tokens follow the service's shape, "1!<n>!<base64>", with the URL-safe
// alphabet and no padding so they survive any client's (non-)encoding, and never empty,
// even for an empty key.
func encodeToken(key string) string {
	b := base64.RawURLEncoding.EncodeToString([]byte(key))
	return "1!" + strconv.Itoa(len(b)) + "!" + b
}

var errBadToken = errors.New("bad continuation token")

func decodeToken(tok string) (string, error) {
	rest, ok := strings.CutPrefix(tok, "1!")
	if !ok {
		return "", errBadToken
	}
	n, b, ok := strings.Cut(rest, "!")
	if !ok {
		return "", errBadToken
	}
	if l, err := strconv.Atoi(n); err != nil || l != len(b) {
		return "", errBadToken
	}
	key, err := base64.RawURLEncoding.DecodeString(b)
	if err != nil {
		return "", errBadToken
	}
	return string(key), nil
}
