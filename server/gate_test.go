package server

import (
	"testing"

	"github.com/ceruleandb/cerulean/odata"
)

// A throttled query is admitted against the one partition its filter confines it to.
func TestQueryPartition(t *testing.T) {
	for _, c := range []struct{ filter, want string }{
		{"", ""},
		{"PartitionKey eq 'x'", "x"},
		{"PartitionKey eq 'x' and RowKey gt '5'", "x"},
		{"PartitionKey eq 'x' and RowKey eq 'y'", "x"},
		{"PartitionKey eq 'x' and Value gt 3", "x"},
		{"PartitionKey ge 'x'", ""},
		{"PartitionKey eq 'x' or PartitionKey eq 'y'", ""},
		{"PartitionKey gt 'x' and PartitionKey lt 'x0'", ""},
		{"Value gt 3", ""},
	} {
		f, err := odata.Parse(c.filter)
		if err != nil {
			t.Fatalf("%q: %v", c.filter, err)
		}
		if got := queryPartition(f); got != c.want {
			t.Errorf("queryPartition(%q) = %q, want %q", c.filter, got, c.want)
		}
	}
}
