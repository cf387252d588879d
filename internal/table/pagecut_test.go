package table

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/odata"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

// TestPageBudgetCut: a query page that runs out of its time budget (here a budget already
// spent when the scan starts, so the engine stops at its first deadline check) ends early
// and says so (Page.Cut, which the server reports to the metrics as a page cut), with a
// continuation that resumes where the scan stopped: following it yields every match once,
// in order, and the last page is not cut.
func TestPageBudgetCut(t *testing.T) {
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	s := New(eng, nil)
	s.pageBudget = time.Nanosecond
	ctx := context.Background()
	if err := s.CreateTable(ctx, "acct", "cut", nil); err != nil {
		t.Fatal(err)
	}
	// 1,000 entities in two partitions; the filter (not on the keys) matches a tenth.
	const n = 1000
	var want []string
	for i := range n {
		e := &entity.Entity{PartitionKey: fmt.Sprint("p", i%2), RowKey: fmt.Sprintf("%04d", i),
			Props: []entity.Property{{Name: "N", Value: entity.Int32Value(int32(i))}}}
		if _, err := s.InsertEntity(ctx, "acct", "cut", e); err != nil {
			t.Fatal(err)
		}
	}
	for p := range 2 {
		for i := p; i < n; i += 2 {
			if i < n/10 {
				want = append(want, fmt.Sprintf("p%d/%04d", p, i))
			}
		}
	}
	f, err := odata.Parse(fmt.Sprint("N lt ", n/10))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	q := Query{Filter: f}
	pages, cut := 0, 0
	for {
		p, err := s.QueryEntities(ctx, "acct", "cut", q)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range p.Records {
			got = append(got, r.Entity.PartitionKey+"/"+r.Entity.RowKey)
		}
		if p.NextRowKey == "" {
			if p.Cut {
				t.Errorf("the last page is marked cut")
			}
			break
		}
		if !p.Cut {
			t.Errorf("page %d: %d records, continuation, not cut (budget spent, %d records short of the top)", pages, len(p.Records), MaxPageSize-len(p.Records))
		}
		cut++
		if pages > n {
			t.Fatal("the continuation does not advance")
		}
		q.NextPartitionKey, q.NextRowKey = p.NextPartitionKey, p.NextRowKey
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%d entities over %d pages, want %d: %v", len(got), pages, len(want), got)
	}
	if cut < 2 {
		t.Errorf("%d of %d pages cut; a 1 ns budget should cut every page but the last", cut, pages)
	}
	t.Logf("%d entities over %d pages, %d cut", len(got), pages, cut)
}
