package e2e

// The console's live tail of a table's change feed (issue 45): the Changes view, driven in
// headless Chromium, with the writes made through the Go SDK.

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/chromedp/chromedp"
)

// waitWithin polls a JavaScript expression until it is true, for at most d.
func waitWithin(expr string, d time.Duration) chromedp.Action {
	return chromedp.Poll(expr, nil, chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(50*time.Millisecond))
}

// tailRows is the Changes view's rows, top to bottom, as "seq op pk/rk".
const tailRows = `[...document.querySelectorAll('#ch-rows > tr')].map(r => r.dataset.seq + ' ' + r.dataset.op + ' ' + r.dataset.pk + '/' + r.dataset.rk)`

// readTail returns the Changes view's rows as "op pk/rk", top to bottom, checking that
// their seqs decrease (newest first).
func readTail(t *testing.T, b *browser) []string {
	t.Helper()
	var rows []string
	b.run("read the tail", chromedp.Evaluate(tailRows, &rows))
	out := make([]string, len(rows))
	prev := uint64(0)
	for i, r := range rows {
		seqText, rest, _ := strings.Cut(r, " ")
		seq, err := strconv.ParseUint(seqText, 10, 64)
		if err != nil {
			t.Fatalf("row %d: %q", i, r)
		}
		if i > 0 && seq >= prev {
			t.Fatalf("rows not newest first: %v", rows)
		}
		prev, out[i] = seq, rest
	}
	return out
}

// TestConsoleChanges: the Changes view of a table with the feed shows the writes made
// through the SDK within seconds, newest first, with the entity's new state; Pause stops
// the updates and Resume shows what was written meanwhile; at most 500 rows are kept; a
// table without the feed says the feed is off.
func TestConsoleChanges(t *testing.T) {
	srv := startServer(t)
	c := bulkClient(t, srv)
	tc, name := newFeedTable(t, srv, c, false)
	plain := tableName(t) + "plain"
	if err := c.CreateTable(ctx(t), plain, nil); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, srv)
	b.signIn()
	b.run("open changes", chromedp.Navigate(b.origin+"/-/#/tables/"+name+"/changes"),
		chromedp.WaitVisible("#change-grid", chromedp.ByQuery), textHas("#ch-status", "Following"))

	write := func(steps ...func() error) {
		t.Helper()
		for _, s := range steps {
			if err := s(); err != nil {
				t.Fatal(err)
			}
		}
	}
	add := func(pk, rk string, props map[string]any) func() error {
		return func() error {
			props["PartitionKey"], props["RowKey"] = pk, rk
			_, err := tc.AddEntity(ctx(t), marshal(t, props), nil)
			return err
		}
	}
	write(
		add("p", "1", map[string]any{"Name": "first", "Big": "9007199254740993", "Big@odata.type": "Edm.Int64"}),
		func() error {
			_, err := tc.UpdateEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "1", "Note": "merged"}), &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge})
			return err
		},
		add("q", "2", map[string]any{"Name": "second"}),
		func() error { _, err := tc.DeleteEntity(ctx(t), "p", "1", nil); return err },
	)
	b.run("rows appear", waitWithin(`document.querySelectorAll('#ch-rows > tr').length === 4`, 5*time.Second))
	want := []string{"delete p/1", "insert q/2", "merge p/1", "insert p/1"}
	if got := readTail(t, b); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("the tail shows %v, want %v", got, want)
	}
	// The merge's entity is its whole new state, collapsed until opened; a delete has none.
	merge := `#ch-rows > tr[data-op="merge"]`
	b.run("open an entity",
		wait(fmt.Sprintf(`!document.querySelector('%s details').open`, merge)),
		textHas(merge+" summary", "3 properties"),
		click(merge+" summary"),
		wait(fmt.Sprintf(`document.querySelector('%s details').open`, merge)),
		textHas(merge+` tr[data-prop="Big"]`, "Int64"), textHas(merge+` tr[data-prop="Big"]`, "9007199254740993"),
		textHas(merge+` tr[data-prop="Note"]`, "merged"), textHas(merge+` tr[data-prop="Name"]`, "first"),
		wait(`document.querySelector('#ch-rows > tr[data-op="delete"] details') === null`))
	b.doc("changes")

	// Paused, the view reads nothing; resumed, it shows what was written meanwhile.
	b.run("pause", click("#ch-pause"), textHas("#ch-status", "Paused"), textHas("#ch-pause", "Resume"))
	write(add("r", "3", map[string]any{"Name": "while paused"}))
	b.run("paused", chromedp.Sleep(1500*time.Millisecond))
	if got := readTail(t, b); len(got) != 4 {
		t.Fatalf("paused, the tail shows %v", got)
	}
	b.run("resume", click("#ch-pause"), textHas("#ch-pause", "Pause"),
		waitWithin(`document.querySelectorAll('#ch-rows > tr').length === 5`, 5*time.Second))
	if got := readTail(t, b); got[0] != "insert r/3" || got[1] != "delete p/1" {
		t.Fatalf("resumed, the tail shows %v", got)
	}

	// 600 more records: the newest 500 are kept, newest first.
	for i := range 6 {
		var ops []aztables.TransactionAction
		for j := range 100 {
			ops = append(ops, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd,
				Entity: marshal(t, map[string]any{"PartitionKey": "bulk", "RowKey": fmt.Sprintf("%03d", i*100+j)})})
		}
		if _, err := tc.SubmitTransaction(ctx(t), ops, nil); err != nil {
			t.Fatal(err)
		}
	}
	b.run("bounded", waitWithin(`document.querySelector('#ch-rows > tr')?.dataset.rk === '599'`, 10*time.Second),
		textHas("#ch-info", "605 received"))
	got := readTail(t, b)
	if len(got) != 500 || got[0] != "insert bulk/599" || got[499] != "insert bulk/100" {
		t.Fatalf("after 605 records the tail has %d rows, %q … %q", len(got), got[0], got[len(got)-1])
	}

	// A table without the feed: the view says so, and how to turn it on.
	b.run("no feed", chromedp.Navigate(b.origin+"/-/#/tables/"+plain+"/changes"),
		chromedp.WaitVisible("#ch-off", chromedp.ByQuery), textHas("#ch-off", "change feed of "+plain+" is off"),
		textHas("#ch-off", "ChangeFeedRetention"), wait(`document.querySelector('#change-grid').offsetParent === null`))
}
