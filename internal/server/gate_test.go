package server

import (
	"testing"

	"github.com/ceruleandb/cerulean/internal/faults"
	"github.com/ceruleandb/cerulean/internal/odata"
	"github.com/ceruleandb/cerulean/internal/throttle"
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

// BenchmarkGetEntityGate is BenchmarkGetEntity with the scale targets and faults off (the
// gate's nil checks only), with the targets on (never reached), and with faults on (a
// rule for inserts only: a draw-free lookup for reads), so the cost of each is plain.
func BenchmarkGetEntityGate(b *testing.B) {
	for _, c := range []struct {
		name string
		set  func(s *Server)
	}{
		{"off", func(*Server) {}},
		{"targets", func(s *Server) { s.throttle = throttle.New(throttle.Options{Partition: 1e12, Account: 1e12}) }},
		{"faults", func(s *Server) {
			spec, _ := faults.Parse("insert:503:1%")
			s.faults = faults.New(spec, 1)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			srv := benchServer(b)
			c.set(srv)
			benchServe(b, srv, benchRequest(b, "/devstoreaccount1/bench(PartitionKey='p',RowKey='500')"))
		})
	}
}
