package server

import (
	"net/http/httptest"
	"testing"
)

// Requests that name no operation of the service, and conditional writes whose If-Match
// is malformed, are named for what they are (issue 42 items 13 and 28): an unknown comp
// is Unknown, not Get/SetTableACL; a PUT or MERGE with a bad If-Match is an Update/Merge.
func TestOperationNamesUnknownAndMalformed(t *testing.T) {
	srv := &Server{}
	for _, c := range []struct{ method, path, ifMatch, want string }{
		{"GET", "/a/t?comp=bulkk", "", "Unknown"},
		{"PUT", "/a/t?comp=bulkk", "", "Unknown"},
		{"POST", "/a/t?comp=nosuch", "", "Unknown"},
		{"GET", "/a/t?comp=", "", "Unknown"},
		{"POST", "/a/t?comp=bulk", "", "BulkWrite"},
		{"GET", "/a/t?comp=acl", "", "GetTableACL"},
		{"GET", "/a/?restype=service&comp=list", "", "Unknown"},
		{"GET", "/a/?comp=properties", "", "Unknown"},
		{"PUT", "/a/tbl(PartitionKey='p',RowKey='r')", `"strong"`, "UpdateEntity"},
		{"MERGE", "/a/tbl(PartitionKey='p',RowKey='r')", "a, b", "MergeEntity"},
		{"DELETE", "/a/tbl(PartitionKey='p',RowKey='r')", "junk", "DeleteEntity"},
	} {
		r := httptest.NewRequest(c.method, "http://127.0.0.1:10002"+c.path, nil)
		if c.ifMatch != "" {
			r.Header.Set("If-Match", c.ifMatch)
		}
		rq := &request{r: r}
		rq.pathStyle = srv.address(rq)
		if got := srv.operation(rq); got != c.want {
			t.Errorf("%s %s (If-Match %q): %s, want %s", c.method, c.path, c.ifMatch, got, c.want)
		}
	}
}
