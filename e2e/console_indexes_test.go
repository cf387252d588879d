package e2e

// The console's Settings tab (issue 46): a table's settings and its secondary indexes,
// listed, added and dropped in headless Chromium, checked against what the settings
// endpoint then holds.

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ceruleandb/cerulean/client"
)

// ixRows is the Settings view's index rows, as "name|properties|unique|state".
const ixRows = `[...document.querySelectorAll('#ix-rows > tr')].map(r => [...r.children].slice(0, 4).map(c => c.textContent).join('|'))`

// TestConsoleIndexes: the Settings tab lists the table's settings and indexes; adding and
// dropping an index writes back every other setting and every other index — also one
// declared through the API after the view was drawn — and a refused change says why;
// a standard table offers no index.
func TestConsoleIndexes(t *testing.T) {
	srv := startServer(t)
	c := bulkClient(t, srv)
	name, plain := tableName(t), tableName(t)+"plain"
	st := client.TableSettings{Elastic: true, DefaultTimeToLive: 60, TimeToLiveProperty: "Exp", ChangeFeedRetention: 3600,
		Indexes: []client.Index{{Name: "ByA", Properties: []string{"A"}}}}
	if err := c.CreateTable(ctx(t), name, &st); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTable(ctx(t), plain, &client.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	// decls is the table's index declarations (states left out: an index declared on an
	// existing table may be building or ready, as its background build goes).
	decls := func() client.TableSettings {
		t.Helper()
		got, err := c.GetTableSettings(ctx(t), name)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got.Indexes {
			got.Indexes[i].State, got.Indexes[i].Progress = "", 0
		}
		return got.TableSettings
	}
	rowsAre := func(want ...string) chromedp.Action {
		want = append([]string{}, want...) // [] rather than null
		return wait(fmt.Sprintf(`JSON.stringify(%s.map(r => r.replace(/\|building$/, '|ready'))) === %q`, ixRows, marshal(t, want)))
	}

	b := newBrowser(t, srv)
	b.signIn()
	b.run("open settings", chromedp.Navigate(b.origin+"/-/#/tables/"+name+"/settings"),
		chromedp.WaitVisible("#ix-grid", chromedp.ByQuery),
		textHas(`#set-summary tr[data-setting="Default time-to-live"]`, "60 s"),
		textHas(`#set-summary tr[data-setting="Time-to-live property"]`, "Exp"),
		textHas(`#set-summary tr[data-setting="Change feed"]`, "3600 s"),
		rowsAre("ByA|A||ready"))

	b.run("add a unique compound index", setValue("#ix-name", "ByBC"), setValue("#ix-props", " B ,C"),
		click("#ix-unique"), click("#ix-submit"), textHas("#set-status", "Added ByBC."),
		rowsAre("ByA|A||ready", "ByBC|B, C|unique|ready"))
	want := st
	want.Indexes = []client.Index{{Name: "ByA", Properties: []string{"A"}}, {Name: "ByBC", Properties: []string{"B", "C"}, Unique: true}}
	if got := decls(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after adding ByBC the settings are %+v; want %+v", got, want)
	}
	b.doc("indexes")

	// An index declared through the API after the view was drawn survives a drop made in
	// the view, as every other setting does.
	withD := want
	withD.Indexes = append(append([]client.Index(nil), want.Indexes...), client.Index{Name: "ByD", Properties: []string{"D"}})
	if err := c.SetTableSettings(ctx(t), name, withD); err != nil {
		t.Fatal(err)
	}
	b.run("drop ByA", click(`button[data-drop="ByA"]`), chromedp.WaitVisible("#confirm-drop", chromedp.ByQuery),
		click("#confirm-drop"), textHas("#set-status", "Dropped ByA."),
		rowsAre("ByBC|B, C|unique|ready", "ByD|D||ready"))
	want.Indexes = withD.Indexes[1:]
	if got := decls(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after dropping ByA the settings are %+v; want %+v", got, want)
	}

	// Refused: a name taken (checked in the page, nothing written) and a declaration the
	// service refuses (its code and message shown).
	b.run("a name taken", setValue("#ix-name", "byd"), setValue("#ix-props", "E"), click("#ix-submit"),
		textHas("#set-status", "has an index named ByD already"))
	b.run("refused by the service", setValue("#ix-name", "ByKey"), setValue("#ix-props", "RowKey"), click("#ix-submit"),
		textHas("#set-status", "InvalidInput"), textHas("#set-status", "not an indexable property"),
		rowsAre("ByBC|B, C|unique|ready", "ByD|D||ready"))
	if got := decls(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after refused changes the settings are %+v; want %+v", got, want)
	}

	// Dropping every index leaves the other settings.
	for _, n := range []string{"ByBC", "ByD"} {
		b.run("drop "+n, click(fmt.Sprintf(`button[data-drop="%s"]`, n)), chromedp.WaitVisible("#confirm-drop", chromedp.ByQuery),
			click("#confirm-drop"), textHas("#set-status", "Dropped "+n+"."))
	}
	b.run("none left", chromedp.WaitVisible("#ix-none", chromedp.ByQuery), rowsAre())
	want.Indexes = nil
	if got := decls(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after dropping every index the settings are %+v; want %+v", got, want)
	}

	// A standard table: no index form.
	b.run("standard table", chromedp.Navigate(b.origin+"/-/#/tables/"+plain+"/settings"),
		chromedp.WaitVisible("#ix-standard", chromedp.ByQuery),
		textHas(`#set-summary tr[data-setting="Elastic"]`, "false"),
		wait(`document.querySelector('#ix-add').hidden && document.querySelector('#ix-grid').hidden`))
}

// TestConsoleIndexStates: the Settings tab shows a building index's progress and reads
// again until it is ready, and a failed index's reason. The settings answers are the
// page's own fetch answering for the service (states are the engine's, not something a
// test can set), everything else goes to the server.
func TestConsoleIndexStates(t *testing.T) {
	srv := startServer(t)
	c := bulkClient(t, srv)
	name := tableName(t)
	if err := c.CreateTable(ctx(t), name, &client.TableSettings{Elastic: true}); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, srv)
	b.signIn()
	answer := func(indexes string) chromedp.Action {
		return js(fmt.Sprintf(`window.settingsAnswer = %q`,
			`{"TableName":"`+name+`","Elastic":true,"TimeToLiveProperty":"TTLInSeconds","Indexes":`+indexes+`}`))
	}
	b.run("answer settings in the page",
		answer(`[{"Name":"ByA","Properties":["A"],"State":"building","Progress":1234},`+
			`{"Name":"U","Properties":["B","C"],"Unique":true,"State":"failed","Failure":"two entities hold one value: ('p', '1') and ('p', '2')"}]`),
		js(`(() => {
			const real = window.fetch;
			window.settingsReads = 0;
			window.fetch = (url, o) => {
				if (String(url).includes('comp=properties') && (o?.method || 'GET') === 'GET') {
					window.settingsReads++;
					return Promise.resolve(new Response(window.settingsAnswer, { status: 200, headers: { 'Content-Type': 'application/json' } }));
				}
				return real(url, o);
			};
		})()`),
		// The hash, not a navigation: a page load would drop the stand-in fetch.
		js(fmt.Sprintf(`location.hash = '#/tables/%s/settings'`, name)),
		textHas(`#ix-rows tr[data-index="ByA"] .state`, "building"),
		textHas(`#ix-rows tr[data-index="ByA"] .progress`, "1234 rows passed"),
		textHas(`#ix-rows tr[data-index="U"] .state`, "failed"),
		textHas(`#ix-rows tr[data-index="U"] .progress.error`, "two entities hold one value: ('p', '1') and ('p', '2')"))
	// While an index builds, the view reads again (every 2 s) and shows the new state;
	// once none builds, it stops reading.
	b.run("building: read again", answer(`[{"Name":"ByA","Properties":["A"],"State":"ready"}]`),
		waitWithin(`document.querySelector('#ix-rows tr[data-index="ByA"]')?.dataset.state === 'ready' && !document.querySelector('#ix-rows tr[data-index="U"]')`, 10*time.Second),
		wait(`document.querySelector('#ix-rows tr[data-index="ByA"] .progress').textContent === ''`))
	var reads, after int
	b.run("ready: no more reads", chromedp.Evaluate(`window.settingsReads`, &reads),
		chromedp.Sleep(5*time.Second), chromedp.Evaluate(`window.settingsReads`, &after))
	if after != reads {
		t.Errorf("the view read the settings %d more times with no index building", after-reads)
	}
}

// TestConsoleUniqueViolation: inserting in the entity editor an entity that takes a
// unique index's value another entity holds shows the refusal in plain words, with the
// code and the service's message naming the holder; nothing is written.
func TestConsoleUniqueViolation(t *testing.T) {
	srv := startServer(t)
	c := bulkClient(t, srv)
	name := tableName(t)
	err := c.CreateTable(ctx(t), name, &client.TableSettings{Elastic: true, Indexes: []client.Index{{Name: "ByEmail", Properties: []string{"Email"}, Unique: true}}})
	if err != nil {
		t.Fatal(err)
	}
	postEntity(t, srv, name, `{"PartitionKey":"eu","RowKey":"c1","Email":"ann@x"}`)
	b := newBrowser(t, srv)
	b.signIn()
	b.run("insert a duplicate", chromedp.Navigate(b.origin+"/-/#/tables/"+name),
		click("#new-entity"), chromedp.WaitVisible("#editor", chromedp.ByQuery),
		setValue("#ed-pk", "us"), setValue("#ed-rk", "c2"),
		fillEditor([][4]string{{"Email", "String", "", "ann@x"}}), click("#ed-insert"),
		textHas("#ed-status", "Another entity already holds this value of a unique index"),
		textHas("#ed-status .code", "UniqueIndexViolation"),
		textHas("#ed-status", "the entity with PartitionKey 'eu' and RowKey 'c1' holds"))
	r := srv.do(t, rawReq{Method: "GET", Path: "/" + devAccount + "/" + name + "(PartitionKey='us',RowKey='c2')"})
	requireStatus(t, r, 404, "the refused entity")
}
