package e2e

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/chromedp/cdproto/input"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/ceruleandb/cerulean/internal/faults"
)

// chromiumPath finds Debian's Chromium (scripts/test installs it). Without one the
// browser tests skip, except in CI, where they must run.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium binary on PATH, and CI=true: the browser tests must run in CI (scripts/test installs the chromium package)")
	}
	t.Skip("no chromium binary on PATH (apt-get install chromium, or run ./scripts/test, which installs it)")
	return ""
}

// browser is one headless Chromium tab on the console of srv, with what the tests check
// about it: every URL the page requested, and uncaught JavaScript exceptions.
type browser struct {
	t   *testing.T
	ctx context.Context
	srv *server
	// origin is where the page is served from: every request must go there.
	origin string
	mu     sync.Mutex
	urls   []string
	errs   []string
	// shots is where each step's screenshot goes when a step fails (artefacts), docs the
	// directory of CERULEAN_CONSOLE_SCREENSHOTS ("" when not asked for).
	shots, docs string
	step        int
}

func newBrowser(t *testing.T, srv *server, flags ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], flags...)
	if srv.HTTPS() {
		// The run's certificate is self-signed (CERULEAN_TEST_HTTPS); Chromium has no
		// SSL_CERT_FILE to trust it by.
		opts = append(opts, chromedp.Flag("ignore-certificate-errors", true))
	}
	opts = append(opts,
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // root in CI containers
		chromedp.WindowSize(1366, 768),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	// chromedp's protocol types trail Chromium's: events it cannot decode (new enum
	// values) are noise, not failures.
	bctx, cancelB := chromedp.NewContext(actx, chromedp.WithErrorf(func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !strings.Contains(msg, "could not unmarshal event") && !strings.Contains(msg, "unhandled node event") {
			t.Logf("chromedp: %s", msg)
		}
	}))
	t.Cleanup(func() { cancelB(); cancelA() })
	art := os.Getenv("CERULEAN_TEST_ARTIFACTS")
	if art == "" {
		art = filepath.Join("..", ".artifacts")
	}
	b := &browser{t: t, ctx: bctx, srv: srv, origin: srv.BaseURL(), shots: filepath.Join(art, "console", t.Name()), docs: os.Getenv("CERULEAN_CONSOLE_SCREENSHOTS")}
	if b.docs != "" && !filepath.IsAbs(b.docs) {
		b.docs = filepath.Join("..", b.docs) // relative to the repository, as the README says
	}
	chromedp.ListenTarget(bctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.urls = append(b.urls, e.Request.URL)
		case *runtime.EventExceptionThrown:
			b.errs = append(b.errs, e.ExceptionDetails.Error())
		case *cdplog.EventEntryAdded:
			// A Content-Security-Policy violation silently drops a style or a request: a
			// failure. (Refused API requests are logged too, as network errors: expected.)
			if e.Entry.Source == cdplog.SourceSecurity || strings.Contains(e.Entry.Text, "Content Security Policy") {
				b.errs = append(b.errs, e.Entry.Text)
			}
		}
	})
	if err := chromedp.Run(bctx, network.Enable(), cdplog.Enable(), chromedp.EmulateViewport(1366, 768)); err != nil {
		t.Fatalf("starting chromium (%s): %v", path, err)
	}
	t.Cleanup(b.checkRequests)
	return b
}

// run runs one step's actions; on failure it saves a screenshot and fails the test.
func (b *browser) run(name string, actions ...chromedp.Action) {
	b.t.Helper()
	b.step++
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	err := chromedp.Run(ctx, actions...)
	b.mu.Lock()
	jsErrs := append([]string(nil), b.errs...)
	b.mu.Unlock()
	if len(jsErrs) > 0 {
		// Also when the step failed otherwise: an exception is often why it timed out.
		pageErrs := fmt.Errorf("page errors (uncaught exceptions, Content-Security-Policy violations): %s", strings.Join(jsErrs, "; "))
		if err != nil {
			pageErrs = fmt.Errorf("%w; %w", err, pageErrs)
		}
		err = pageErrs
	}
	if err != nil {
		file := filepath.Join(b.shots, fmt.Sprintf("%02d-%s.png", b.step, strings.ReplaceAll(name, " ", "-")))
		var png []byte
		sctx, scancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer scancel()
		if serr := chromedp.Run(sctx, chromedp.FullScreenshot(&png, 100)); serr == nil {
			if os.MkdirAll(b.shots, 0o755) == nil && os.WriteFile(file, png, 0o644) == nil {
				b.t.Logf("screenshot of the failed step: %s", file)
			}
		}
		var html string
		_ = chromedp.Run(sctx, chromedp.Evaluate(`[...document.querySelectorAll('.status, [role=alert], .msg')].map(e => e.id + ': ' + e.innerText).filter(s => !/^[\w-]*: $/.test(s)).join('\n')`, &html))
		b.t.Fatalf("step %q: %v\nstatuses on the page:\n%s", name, err, truncateString(html, 3000))
	}
}

func truncateString(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// doc saves a screenshot for the README when CERULEAN_CONSOLE_SCREENSHOTS names a directory.
func (b *browser) doc(name string) {
	b.t.Helper()
	if b.docs == "" {
		return
	}
	var png []byte
	b.run("screenshot "+name, chromedp.Sleep(300*time.Millisecond), chromedp.CaptureScreenshot(&png))
	if err := os.MkdirAll(b.docs, 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.docs, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// checkRequests asserts that the page requested nothing outside the server's origin.
func (b *browser) checkRequests() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.urls) == 0 {
		b.t.Error("no request was recorded: the network events are not being seen")
	}
	for _, u := range b.urls {
		if !strings.HasPrefix(u, b.origin+"/") && !strings.HasPrefix(u, "data:") {
			b.t.Errorf("the page requested %s, outside %s", u, b.origin)
		}
	}
}

// wait polls a JavaScript expression until it is true.
func wait(expr string) chromedp.Action {
	return chromedp.Poll(expr, nil, chromedp.WithPollingTimeout(20*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))
}

// textHas waits until the element's text contains want.
func textHas(sel, want string) chromedp.Action {
	return wait(fmt.Sprintf(`(document.querySelector(%q)?.textContent || '').includes(%q)`, sel, want))
}

// js runs a statement in the page.
func js(code string) chromedp.Action {
	return chromedp.Evaluate(code, nil, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) })
}

// fillEditor adds the properties to the open editor, one row each, as a user would:
// name, type (a change event makes the value input for it), Binary format, value.
func fillEditor(props [][4]string) chromedp.Action {
	b, _ := json.Marshal(props)
	return js(fmt.Sprintf(`(() => {
	  const set = (el, v) => { el.value = v; el.dispatchEvent(new Event('input', {bubbles: true})); el.dispatchEvent(new Event('change', {bubbles: true})); };
	  for (const [name, type, fmt, text] of %s) {
	    let rows = [...document.querySelectorAll('#editor tr.prop')];
	    let tr = rows.find(r => r.querySelector('.name').value === name) || rows.find(r => r.querySelector('.name').value === '');
	    if (!tr) { document.querySelector('#ed-add').click(); rows = [...document.querySelectorAll('#editor tr.prop')]; tr = rows[rows.length - 1]; }
	    set(tr.querySelector('.name'), name);
	    set(tr.querySelector('select.type'), type);
	    if (fmt) set(tr.querySelector('select.format'), fmt);
	    set(tr.querySelector('.value'), text);
	  }
	})()`, b))
}

// conflictHas waits until the conflict view shows, in the side ("mine" or "theirs"),
// the property name with a value containing want.
func conflictHas(side, name, want string) chromedp.Action {
	return wait(fmt.Sprintf(`[...document.querySelectorAll('#conflict tbody tr')].some(tr => tr.querySelector('th').textContent === %q && tr.querySelector('td.%s').textContent.includes(%q))`, name, side, want))
}

// setValue sets an input's value as typing would end (an input event), waiting for it.
func setValue(sel, v string) chromedp.Action {
	return chromedp.Tasks{chromedp.WaitVisible(sel, chromedp.ByQuery), js(fmt.Sprintf(`(() => { const el = document.querySelector(%q); el.value = %q; el.dispatchEvent(new Event('input', {bubbles: true})); })()`, sel, v))}
}

// click clicks the element sel once it is visible. A view that is still rendering can
// replace the element between the query and the click ("Could not find node with given
// id"); the click is then tried again on the element that replaced it, up to 5 times.
func click(sel string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		var err error
		for range 5 {
			err = chromedp.Click(sel, chromedp.ByQuery, chromedp.NodeVisible).Do(ctx)
			if err == nil || !strings.Contains(err.Error(), "Could not find node") {
				return err
			}
			time.Sleep(50 * time.Millisecond)
		}
		return err
	})
}

// rawEntity reads an entity through the Go SDK's client as its raw JSON (numbers kept as
// written), the way the tests check bit-exactness.
func rawEntity(t *testing.T, c *aztables.Client, pk, rk string) map[string]json.RawMessage {
	t.Helper()
	resp, err := c.GetEntity(ctx(t), pk, rk, &aztables.GetEntityOptions{Format: to.Ptr(aztables.MetadataFormatFull)})
	if err != nil {
		t.Fatalf("GetEntity(%s, %s): %v", pk, rk, err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(resp.Value, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestConsole drives the console in headless Chromium against a real server: every item
// of issue 14's "What must be shown", one step each.
func TestConsole(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	b := newBrowser(t, srv)
	name := tableName(t)
	home := srv.BaseURL() + "/-/"

	// Sign in with a key: a wrong key first, refused in plain words with the code.
	b.run("open", chromedp.Navigate(home), chromedp.WaitVisible("#signin", chromedp.ByQuery))
	b.run("wrong key", setValue("#in-key", base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 64))), click("#signin-submit"),
		textHas("#signin-status", "AuthenticationFailed"), textHas("#signin-status", "did not accept"))
	b.run("sign in with key", setValue("#in-key", devKey), chromedp.SendKeys("#in-key", kb.Enter, chromedp.ByQuery),
		chromedp.WaitVisible("#table-list", chromedp.ByQuery), textHas("#who", "devstoreaccount1"))
	var stored string
	b.run("credentials in sessionStorage only", chromedp.Evaluate(`document.cookie + '|' + location.href + '|' + (localStorage.length)`, &stored))
	if strings.Contains(stored, devKey[:20]) || !strings.HasSuffix(stored, "|0") {
		t.Fatalf("credentials leaked outside sessionStorage: %q", stored)
	}

	// The pure-JS HMAC (for non-secure contexts) agrees with Go's.
	var got string
	b.run("js hmac fallback", chromedp.Evaluate(`import('/-/sha256.js').then(m => { const e = new TextEncoder(); return import('/-/api.js').then(a => a.b64encode(m.hmacSha256(a.b64decode(`+"`"+devKey+"`"+`), e.encode('GET\n\n\nx'.repeat(40))))) })`, &got,
		func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
	key, _ := base64.StdEncoding.DecodeString(devKey)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(strings.Repeat("GET\n\n\nx", 40)))
	if want := base64.StdEncoding.EncodeToString(mac.Sum(nil)); got != want {
		t.Fatalf("pure-JS HMAC-SHA256 = %s, want %s", got, want)
	}

	// Create a table: a bad name is refused with the naming rules, then a good one.
	b.run("create bad table", setValue("#new-table", "1bad"), chromedp.SendKeys("#new-table", kb.Enter, chromedp.ByQuery),
		textHas("#create-status", "Table names are 3 to 63 characters"))
	b.run("create table", setValue("#new-table", name), click("#create-table button[type=submit]"),
		chromedp.WaitVisible(fmt.Sprintf(`a[data-table=%q]`, name), chromedp.ByQuery), chromedp.WaitVisible("#query-form", chromedp.ByQuery))
	c := svc.NewClient(name)
	if _, err := c.GetAccessPolicy(ctx(t), nil); err != nil {
		t.Fatalf("the table the console created is not there: %v", err)
	}

	// Insert an entity with every EDM type through the editor.
	const guid = "0f8fad5b-d9cb-469f-a165-70867728950e"
	b.run("insert every type", click("#new-entity"), chromedp.WaitVisible("#editor", chromedp.ByQuery),
		setValue("#ed-pk", "p'1"), setValue("#ed-rk", "r 1 ü"),
		fillEditor([][4]string{
			{"S", "String", "", "héllo 'quoted' ✓ \"x\""},
			{"B", "Boolean", "", "true"},
			{"I32", "Int32", "", "-2147483648"},
			{"I64", "Int64", "", "9007199254740993"},
			{"D", "Double", "", "0.1"},
			{"DMax", "Double", "", "1.7976931348623157e308"},
			{"DNaN", "Double", "", "NaN"},
			{"DInf", "Double", "", "-Infinity"},
			{"DT", "DateTime", "", "2024-02-29T23:59:59.1234567Z"},
			{"G", "Guid", "", guid},
			{"BinHex", "Binary", "hex", "00ff10abcdef"},
			{"Bin64", "Binary", "base64", "AAECAw=="},
		}))
	b.doc("editor")
	b.run("insert submit", chromedp.SendKeys("#ed-rk", kb.Enter, chromedp.ByQuery),
		wait(`!document.querySelector('#dialog').open`), chromedp.WaitVisible(`#entity-grid tr[data-rk="r 1 ü"]`, chromedp.ByQuery))
	m := rawEntity(t, c, "p'1", "r 1 ü")
	wantRaw := map[string]string{
		"S": `"héllo 'quoted' ✓ \"x\""`, "B": `true`, "I32": `-2147483648`, "I64": `"9007199254740993"`, "I64@odata.type": `"Edm.Int64"`,
		"DNaN": `"NaN"`, "DInf": `"-Infinity"`, "DT": `"2024-02-29T23:59:59.1234567Z"`, "DT@odata.type": `"Edm.DateTime"`,
		"G": `"` + guid + `"`, "G@odata.type": `"Edm.Guid"`, "BinHex": `"AP8Qq83v"`, "Bin64": `"AAECAw=="`,
	}
	for k, want := range wantRaw {
		if string(m[k]) != want {
			t.Errorf("read back through the Go SDK: %s = %s, want %s", k, m[k], want)
		}
	}
	var d, dmax float64
	_ = json.Unmarshal(m["D"], &d)
	_ = json.Unmarshal(m["DMax"], &dmax)
	if math.Float64bits(d) != math.Float64bits(0.1) || dmax != math.MaxFloat64 {
		t.Errorf("Doubles read back as %s, %s: not bit-exact", m["D"], m["DMax"])
	}
	var edmE aztables.EDMEntity
	resp, err := c.GetEntity(ctx(t), "p'1", "r 1 ü", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(resp.Value, &edmE); err != nil {
		t.Fatal(err)
	}
	if v := edmE.Properties["I64"]; v != aztables.EDMInt64(9007199254740993) {
		t.Errorf("SDK I64 = %#v", v)
	}
	if v, ok := edmE.Properties["DT"].(aztables.EDMDateTime); !ok || !time.Time(v).Equal(time.Date(2024, 2, 29, 23, 59, 59, 123456700, time.UTC)) {
		t.Errorf("SDK DT = %#v", edmE.Properties["DT"])
	}
	if v, ok := edmE.Properties["BinHex"].(aztables.EDMBinary); !ok || !bytes.Equal(v, []byte{0, 0xff, 0x10, 0xab, 0xcd, 0xef}) {
		t.Errorf("SDK BinHex = %#v", edmE.Properties["BinHex"])
	}
	b.doc("grid")

	row := `#entity-grid tr[data-rk="r 1 ü"]`
	// The grid shows every property with its type.
	b.run("grid types", textHas("#entity-grid thead", "I64Int64"), textHas("#entity-grid thead", "DTDateTime"),
		textHas(row, "9007199254740993"), textHas(row, "2024-02-29T23:59:59.1234567Z"), textHas(row, "NaN"))

	// Edit it: merge one property; the others stay.
	b.run("open and merge", click(row), chromedp.WaitVisible("#ed-merge", chromedp.ByQuery), textHas("#ed-etag", "W/"),
		fillEditor([][4]string{{"S", "String", "", "edited"}}), click("#ed-merge"),
		wait(`!document.querySelector('#dialog').open`), textHas(row, "edited"))
	m = rawEntity(t, c, "p'1", "r 1 ü")
	if string(m["S"]) != `"edited"` || string(m["I64"]) != `"9007199254740993"` || string(m["DT"]) != `"2024-02-29T23:59:59.1234567Z"` {
		t.Fatalf("after merge: S=%s I64=%s DT=%s", m["S"], m["I64"], m["DT"])
	}

	// Provoke a 412: open the editor, change the entity behind its back, save.
	b.run("open for conflict", click(row), chromedp.WaitVisible("#ed-replace", chromedp.ByQuery))
	other := marshal(t, map[string]any{"PartitionKey": "p'1", "RowKey": "r 1 ü", "Other": "from the SDK"})
	if _, err := c.UpdateEntity(ctx(t), other, &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge}); err != nil {
		t.Fatal(err)
	}
	b.run("conflict shown", fillEditor([][4]string{{"I32", "Int32", "", "7"}}), click("#ed-replace"),
		chromedp.WaitVisible("#conflict", chromedp.ByQuery), textHas("#conflict", "UpdateConditionNotSatisfied"),
		conflictHas("theirs", "Other", "from the SDK"), conflictHas("mine", "I32", "7"), conflictHas("theirs", "I32", "-2147483648"))
	b.doc("conflict")
	b.run("conflict resolved", click("#conflict-overwrite"), wait(`!document.querySelector('#dialog').open`))
	m = rawEntity(t, c, "p'1", "r 1 ü")
	if string(m["I32"]) != "7" || m["Other"] != nil || string(m["I64"]) != `"9007199254740993"` {
		t.Fatalf("after overwriting: I32=%s Other=%s I64=%s", m["I32"], m["Other"], m["I64"])
	}

	// A filter with a syntax error shows the service's error where it points; then a valid one.
	b.run("filter syntax error", setValue("#q-filter", "I32 eq eq 7"), chromedp.SendKeys("#q-filter", kb.Enter, chromedp.ByQuery),
		textHas("#q-status", "InvalidInput"), textHas("#q-caret", "^"), textHas("#q-caret", "position"))
	var caret string
	b.run("caret text", chromedp.Text("#q-caret", &caret, chromedp.ByQuery))
	if lines := strings.Split(caret, "\n"); len(lines) < 2 || lines[0] != "I32 eq eq 7" || !strings.HasPrefix(strings.TrimLeft(lines[1], " "), "^") || strings.Index(lines[1], "^") < 4 {
		t.Fatalf("caret under the filter: %q", caret)
	}
	b.run("valid filter", setValue("#q-filter", "I32 eq 7 and S eq 'edited'"), click("#q-run"),
		textHas("#q-page", "1 entities"), chromedp.WaitVisible(row, chromedp.ByQuery), wait(`document.querySelector('#q-caret').textContent === ''`))
	b.run("filter matching nothing", setValue("#q-filter", "I32 eq 8"), click("#q-run"), textHas("#q-page", "0 entities"), textHas("#q-status", "No entities match"))
	b.run("select and top", setValue("#q-filter", ""), setValue("#q-select", "I64,DT"), click("#q-run"),
		textHas("#q-page", "1 entities"), textHas("#entity-grid thead", "I64"), wait(`!document.querySelector('#entity-grid thead').textContent.includes('BinHex')`))
	b.run("clear select", setValue("#q-select", ""), click("#q-run"), textHas("#entity-grid thead", "BinHex"))

	// Delete the entity, with confirmation; it changed meanwhile, so the 412 shows first.
	b.run("open for delete", click(row), chromedp.WaitVisible("#ed-delete", chromedp.ByQuery))
	if _, err := c.UpdateEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p'1", "RowKey": "r 1 ü", "Late": "write"}),
		&aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge}); err != nil {
		t.Fatal(err)
	}
	b.run("delete entity", click("#ed-delete"),
		chromedp.WaitVisible("#confirm-delete-entity", chromedp.ByQuery), chromedp.SendKeys("#confirm-delete", kb.Enter, chromedp.ByQuery),
		chromedp.WaitVisible("#conflict", chromedp.ByQuery), conflictHas("theirs", "Late", "write"), textHas("#conflict-overwrite", "Delete anyway"))
	if _, err := c.GetEntity(ctx(t), "p'1", "r 1 ü", nil); err != nil {
		t.Fatalf("deleted despite the 412: %v", err)
	}
	b.run("delete anyway", click("#conflict-overwrite"), wait(`!document.querySelector('#dialog').open`), textHas("#q-page", "0 entities"))
	if _, err := c.GetEntity(ctx(t), "p'1", "r 1 ü", nil); statusOf(err) != 404 {
		t.Fatalf("the deleted entity: %v", err)
	}

	// Page through 2,500 entities (1,000 a page), next and previous; quick filters.
	bigName := tableName(t)
	big := svc.NewClient(bigName)
	if _, err := big.CreateTable(ctx(t), nil); err != nil {
		t.Fatal(err)
	}
	for p := range 25 {
		var batch []aztables.TransactionAction
		for r := range 100 {
			batch = append(batch, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd,
				Entity: marshal(t, map[string]any{"PartitionKey": fmt.Sprintf("p%02d", p), "RowKey": fmt.Sprintf("r%03d", r), "N": p*100 + r})})
		}
		if _, err := big.SubmitTransaction(ctx(t), batch, nil); err != nil {
			t.Fatal(err)
		}
	}
	firstRow := `document.querySelector('#entity-grid tbody tr')?.dataset.pk + '/' + document.querySelector('#entity-grid tbody tr')?.dataset.rk`
	b.run("page 1", chromedp.Navigate(home+"#/tables/"+bigName), textHas("#q-page", "page 1 · 1000 entities · more"),
		wait(firstRow+` === 'p00/r000'`))
	b.doc("tables")
	b.run("page 2", click("#q-next"), textHas("#q-page", "page 2 · 1000 entities · more"), wait(firstRow+` === 'p10/r000'`))
	b.run("page 3", click("#q-next"), textHas("#q-page", "page 3 · 500 entities"), wait(`document.querySelector('#q-next').disabled`),
		wait(firstRow+` === 'p20/r000'`))
	b.run("back to page 2", click("#q-prev"), textHas("#q-page", "page 2 · 1000 entities"), wait(firstRow+` === 'p10/r000'`))
	b.run("PartitionKey prefix", setValue("#q-pk-prefix", "p1"), click("#q-run"), textHas("#q-page", "page 1 · 1000 entities"),
		wait(`document.querySelector('#q-next').disabled`), wait(firstRow+` === 'p10/r000'`))
	b.run("RowKey range", setValue("#q-pk-prefix", ""), setValue("#q-pk-from", "p03"), setValue("#q-pk-to", "p03"),
		setValue("#q-rk-from", "r010"), setValue("#q-rk-to", "r019"), click("#q-run"), textHas("#q-page", "page 1 · 10 entities"), wait(firstRow+` === 'p03/r010'`))

	// Stored access policies and CORS, viewed and edited.
	b.run("policies", click("#tab-policies"), textHas("#acl-status", "No stored access policies"), click("#acl-add"),
		setValue("#acl-rows tr:last-child .id", "readers"), setValue("#acl-rows tr:last-child .expiry", "2099-01-01T00:00:00Z"),
		click(`#acl-rows tr:last-child input[value="r"]`), click("#acl-save"), textHas("#acl-status", "Saved"))
	pol, err := big.GetAccessPolicy(ctx(t), nil)
	if err != nil || len(pol.SignedIdentifiers) != 1 || *pol.SignedIdentifiers[0].ID != "readers" || *pol.SignedIdentifiers[0].AccessPolicy.Permission != "r" {
		t.Fatalf("access policy after saving in the console: %+v, %v", pol, err)
	}
	b.run("policies reloaded", chromedp.Reload(), wait(`document.querySelector('#acl-rows .id')?.value === 'readers'`))
	b.run("cors", chromedp.Navigate(home+"#/cors"), textHas("#cors-status", "No CORS rules"), click("#cors-add"),
		setValue("#cors-rows tr:last-child .origins", "https://app.example"), setValue("#cors-rows tr:last-child .methods", "GET,PUT"),
		setValue("#cors-rows tr:last-child .allowed", "x-ms-*"), setValue("#cors-rows tr:last-child .age", "600"),
		click("#cors-save"), textHas("#cors-status", "Saved"))
	props, err := svc.GetProperties(ctx(t), nil)
	if err != nil || len(props.Cors) != 1 || *props.Cors[0].AllowedOrigins != "https://app.example" || *props.Cors[0].MaxAgeInSeconds != 600 {
		t.Fatalf("CORS after saving in the console: %+v, %v", props.Cors, err)
	}

	// Watch: the request rates and the hot partitions of the table, against the target.
	// 200 single writes, then 25,000 entity writes in batches of 100 (each counts its
	// entities): over the window since the server started, a partition above the target.
	for i := range 200 {
		e := marshal(t, map[string]any{"PartitionKey": "hot", "RowKey": fmt.Sprintf("w%03d", i)})
		if _, err := big.UpsertEntity(ctx(t), e, nil); err != nil {
			t.Fatal(err)
		}
	}
	hotStart := time.Now()
	var hotWG sync.WaitGroup
	for g := range 4 {
		hotWG.Add(1)
		go func() {
			defer hotWG.Done()
			for range 250 / 4 {
				var batch []aztables.TransactionAction
				for r := range 100 {
					batch = append(batch, aztables.TransactionAction{ActionType: aztables.TransactionTypeInsertReplace,
						Entity: marshal(t, map[string]any{"PartitionKey": "hot", "RowKey": fmt.Sprintf("b%d-%03d", g, r)})})
				}
				if _, err := big.SubmitTransaction(ctx(t), batch, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	hotWG.Wait()
	t.Logf("25,000 entity writes in batches: %v", time.Since(hotStart).Round(time.Millisecond))
	b.run("watch", chromedp.Navigate(home+"#/watch"), setValue("#watch-table", bigName), chromedp.SendKeys("#watch-table", kb.Enter, chromedp.ByQuery),
		chromedp.WaitVisible(`#hot-list tr[data-partition="hot"]`, chromedp.ByQuery), textHas("#watch-legend", "InsertOrMergeEntity"),
		wait(`document.querySelector('#hot-list tbody tr').dataset.partition === 'hot'`))
	b.doc("watch")

	// Generate a read-only SAS for the table in the console, with a key range.
	var sasURL string
	b.run("generate SAS", chromedp.Navigate(home+"#/tables/"+bigName+"/sas"), chromedp.WaitVisible("#sas-form", chromedp.ByQuery),
		setValue("#sas-spk", "p01"), setValue("#sas-epk", "p02"), click("#sas-make"), wait(`document.querySelector('#sas-out').value.includes('sig=')`),
		chromedp.Value("#sas-out", &sasURL, chromedp.ByQuery))
	if !strings.Contains(sasURL, "sp=r&") || !strings.Contains(sasURL, "spk=p01") || !strings.HasPrefix(sasURL, srv.BaseURL()+"/devstoreaccount1/"+bigName+"?") {
		t.Fatalf("generated SAS URL: %s", sasURL)
	}
	// The service accepts it for reading the range.
	sasClient := sasTableClient(t, sasURL, nil)
	page, err := sasClient.NewListEntitiesPager(nil).NextPage(ctx(t))
	if err != nil || len(page.Entities) != 200 {
		t.Fatalf("reading through the generated SAS: %d entities, %v", len(page.Entities), err)
	}

	// Sign in with that SAS: just the range, read-only, no Watch.
	b.run("sign out", click("#signout"), chromedp.WaitVisible("#signin", chromedp.ByQuery))
	b.run("sign in with SAS", click("#tab-sas"), setValue("#in-sas", sasURL), click("#signin-submit"),
		chromedp.WaitVisible("#entity-grid", chromedp.ByQuery), textHas("#who", "table SAS for "+bigName), textHas("#who", "query"),
		textHas("#who", "keys from (p01"), textHas("#q-page", "200 entities"), wait(firstRow+` === 'p01/r000'`),
		wait(`!document.querySelector('#new-entity') && !document.querySelector('#create-table') && !document.querySelector('[data-delete-table]') && !document.querySelector('#tab-policies')`))
	b.doc("sas")
	b.run("read-only editor", click(`#entity-grid tbody tr`), chromedp.WaitVisible("#ed-readonly", chromedp.ByQuery),
		wait(`!document.querySelector('#ed-replace') && !document.querySelector('#ed-merge') && !document.querySelector('#ed-delete') && document.querySelector('#editor .value').readOnly`),
		chromedp.SendKeys("#ed-close", kb.Escape, chromedp.ByQuery), wait(`!document.querySelector('#dialog').open`))
	b.run("watch needs the key", chromedp.Navigate(home+"#/watch"), chromedp.WaitVisible("#watch-needs-key", chromedp.ByQuery))
	// And the service refuses what the page does not offer.
	_, err = sasClient.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p01", "RowKey": "new"}), nil)
	requireRespErr(t, err, 403, "AuthorizationPermissionMismatch")

	// An account SAS that may list and read: the tables and their entities, nothing to change.
	accountSAS, err := svc.GetAccountSASURL(aztables.AccountSASResourceTypes{Container: true, Object: true},
		aztables.AccountSASPermissions{Read: true, List: true}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	b.run("sign in with account SAS", click("#signout"), click("#tab-sas"), setValue("#in-sas", accountSAS), click("#signin-submit"),
		chromedp.WaitVisible(fmt.Sprintf(`a[data-table=%q]`, bigName), chromedp.ByQuery), textHas("#who", "account SAS: read, list"),
		wait(`!document.querySelector('#create-table') && !document.querySelector('[data-delete-table]')`))
	b.run("account SAS reads", click(fmt.Sprintf(`a[data-table=%q]`, bigName)), textHas("#q-page", "1000 entities"),
		wait(`!document.querySelector('#new-entity') && !document.querySelector('#tab-policies')`))
	b.run("account SAS cannot read CORS", chromedp.Navigate(home+"#/cors"), textHas("#cors-status", "cannot read the service properties"))

	// Sign in with a connection string; delete the table, with confirmation.
	cs := fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;TableEndpoint=%s;", devAccount, devKey, srv.Endpoint(devAccount))
	b.run("sign in with connection string", click("#signout"), click("#tab-conn"), setValue("#in-conn", cs), click("#signin-submit"),
		chromedp.WaitVisible(fmt.Sprintf(`a[data-table=%q]`, bigName), chromedp.ByQuery))
	b.run("delete table", click(fmt.Sprintf(`[data-delete-table=%q]`, bigName)), chromedp.WaitVisible("#confirm-delete-table", chromedp.ByQuery),
		click("#confirm-delete"), wait(fmt.Sprintf(`!document.querySelector('a[data-table=%q]')`, bigName)))
	if contains(listTableNames(t, svc), bigName) {
		t.Fatalf("table %s still listed after deleting it in the console", bigName)
	}
}

// TestConsoleInsecureContextAndTablePaging opens the console by a name that is not
// localhost over plain HTTP, where the browser offers no crypto.subtle, so every request
// is signed by the page's own SHA-256; the name is virtual-hosted
// (<account>.console.test), so the page addresses the account by its host as the
// service reads it. And it pages through more than 1,000 tables.
func TestConsoleInsecureContextAndTablePaging(t *testing.T) {
	// An account of its own: the pages of tables are this test's alone, even when the
	// servers of a run share one database (the postgres engine).
	srv := startOwnServer(t)
	acct := srv.Default()
	if srv.HTTPS() {
		t.Skip("the pure-JS signing is for plain HTTP (over HTTPS the page has crypto.subtle); the HTTP pass runs this")
	}
	svc := newServiceClientFor(t, srv.Endpoint(acct.Name), acct.Name, acct.Key, nil)
	// 1,003 tables (the service lists 1,000 a page), created eight at a time.
	prefix := tableName(t)
	start := time.Now()
	names := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range names {
				if _, err := svc.CreateTable(ctx(t), n, nil); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for i := range 1003 {
		names <- fmt.Sprintf("%sx%04d", prefix, i)
	}
	close(names)
	wg.Wait()
	t.Logf("created 1,003 tables in %v", time.Since(start).Round(time.Millisecond))
	if t.Failed() {
		t.FailNow()
	}

	b := newBrowser(t, srv, chromedp.Flag("host-resolver-rules", "MAP *.console.test 127.0.0.1"))
	b.origin = fmt.Sprintf("http://%s.console.test:%d", acct.Name, srv.Port)
	var secure bool
	b.run("open by name", chromedp.Navigate(b.origin+"/-/"), chromedp.WaitVisible("#signin", chromedp.ByQuery),
		chromedp.Evaluate(`window.isSecureContext || !!(globalThis.crypto && crypto.subtle)`, &secure))
	if secure {
		t.Fatal("http://console.test is a secure context: the test does not exercise the pure-JS signing")
	}
	b.run("another account is refused", setValue("#in-account", "otheraccount"), setValue("#in-key", acct.Key), click("#signin-submit"),
		textHas("#signin-status", "serves the account "+acct.Name))
	b.run("sign in without crypto.subtle", setValue("#in-account", acct.Name), click("#signin-submit"),
		textHas("#tables-page", "page 1"), wait(`document.querySelectorAll('#table-list li').length === 1000`),
		wait(`!document.querySelector('#tables-next').disabled`))
	b.run("tables page 2", click("#tables-next"), textHas("#tables-page", "page 2"),
		wait(`document.querySelectorAll('#table-list li').length === 3`), wait(`document.querySelector('#tables-next').disabled`),
		textHas("#table-list", prefix+"x1002"))
	b.run("tables page 1 again", click("#tables-prev"), textHas("#tables-page", "page 1"), wait(`document.querySelectorAll('#table-list li').length === 1000`))
	// A slow page: page 2's answer is held back 1.5 s and Next is clicked twice meanwhile.
	// The second click must not start another load (which, with no continuation for a
	// third page, read page 1 again, and whichever answer came last won): the list ends on
	// page 2.
	b.run("a slow page and a second click", js(`(() => {
		const f = window.fetch;
		window.slowPagesOff = () => { window.fetch = f; return true; };
		window.fetch = (u, o) => {
			const p = f(u, o);
			return String(u).includes('NextTableName') ? p.then((r) => new Promise((res) => setTimeout(() => res(r), 1500))) : p;
		};
		return true;
	})()`), click("#tables-next"), js(`document.querySelector('#tables-next').click(), true`),
		chromedp.Sleep(2500*time.Millisecond))
	var listed int
	var label string
	b.run("after the slow page", chromedp.Evaluate(`document.querySelectorAll('#table-list li').length`, &listed),
		chromedp.Text("#tables-page", &label, chromedp.ByQuery))
	if listed != 3 || label != "page 2" {
		t.Fatalf("after Next twice on a slow page: %d tables listed, label %q; want page 2's 3", listed, label)
	}
	b.run("back to page 1", js(`window.slowPagesOff()`), click("#tables-prev"), textHas("#tables-page", "page 1"),
		wait(`document.querySelectorAll('#table-list li').length === 1000`))
	// A write signed by the pure-JS HMAC.
	b.run("create table without crypto.subtle", setValue("#new-table", prefix+"js"), click("#create-table button[type=submit]"),
		chromedp.WaitVisible(fmt.Sprintf(`a[data-table=%q][aria-current]`, prefix+"js"), chromedp.ByQuery), textHas("#q-status", "No entities match"))
	if !contains(listTableNames(t, svc), prefix+"js") {
		t.Fatal("the table created with the pure-JS signature is not there")
	}
	// The SAS generator gives the virtual-hosted URL, and the console signs in with it.
	var sasURL string
	b.run("generate SAS by host", chromedp.Navigate(b.origin+"/-/#/tables/"+prefix+"js/sas"), chromedp.WaitVisible("#sas-form", chromedp.ByQuery),
		click("#sas-make"), wait(`document.querySelector('#sas-out').value.includes('sig=')`), chromedp.Value("#sas-out", &sasURL, chromedp.ByQuery))
	if !strings.HasPrefix(sasURL, b.origin+"/"+prefix+"js?") {
		t.Fatalf("SAS URL on a virtual-hosted address: %s", sasURL)
	}
	b.run("sign in with SAS by host", click("#signout"), click("#tab-sas"), setValue("#in-sas", sasURL), click("#signin-submit"),
		textHas("#who", "table SAS for "+prefix+"js"), textHas("#q-status", "No entities match"))
}

// TestConsoleEDMCodec checks the page's EDM value handling (edm.js) in the browser, table
// driven: what the editor accepts and refuses for each type, the JSON it sends, and that
// numbers read from the service keep their exact text.
func TestConsoleEDMCodec(t *testing.T) {
	srv := startServer(t)
	b := newBrowser(t, srv)
	b.run("open", chromedp.Navigate(srv.BaseURL()+"/-/"), chromedp.WaitVisible("#signin", chromedp.ByQuery))
	type check struct {
		Typ    string `json:"typ"`
		Text   string `json:"text"`
		Format string `json:"format"`
		OK     bool   `json:"ok"`
	}
	checks := []check{
		{"Int32", "2147483647", "", true}, {"Int32", "-2147483648", "", true}, {"Int32", "2147483648", "", false}, {"Int32", "1.5", "", false}, {"Int32", "", "", false},
		{"Int64", "9223372036854775807", "", true}, {"Int64", "-9223372036854775808", "", true}, {"Int64", "9223372036854775808", "", false}, {"Int64", "1e3", "", false},
		{"Double", "0.1", "", true}, {"Double", "-1e-300", "", true}, {"Double", ".5", "", true}, {"Double", "NaN", "", true}, {"Double", "Infinity", "", true},
		{"Double", "-Infinity", "", true}, {"Double", "1e400", "", false}, {"Double", "nan", "", false}, {"Double", "0x10", "", false},
		{"DateTime", "2024-02-29T23:59:59.1234567Z", "", true}, {"DateTime", "2024-02-29T23:59:59Z", "", true}, {"DateTime", "2024-13-01T00:00:00Z", "", false},
		{"DateTime", "2024-01-01T00:00:00.12345678Z", "", false}, {"DateTime", "2024-01-01", "", false},
		{"Guid", "0f8fad5b-d9cb-469f-a165-70867728950e", "", true}, {"Guid", "0f8fad5b-d9cb-469f-a165-70867728950", "", false},
		{"Binary", "AAECAw==", "base64", true}, {"Binary", "AAECAw=", "base64", false}, {"Binary", "00ff", "hex", true}, {"Binary", "0ff", "hex", false},
		{"Boolean", "true", "", true}, {"Boolean", "yes", "", false}, {"String", "anything", "", true},
	}
	in, _ := json.Marshal(checks)
	var failures []string
	b.run("check", chromedp.Evaluate(fmt.Sprintf(`import('/-/edm.js').then(m => %s.filter(c => (m.check(c.typ, c.text, c.format) === '') !== c.ok).map(c => JSON.stringify(c)))`, in),
		&failures, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
	if len(failures) > 0 {
		t.Errorf("edm.check disagrees on: %s", strings.Join(failures, ", "))
	}
	var wire string
	b.run("toWire", chromedp.Evaluate(`import('/-/edm.js').then(m => m.toWire("p", "r", [
		{name: "I64", type: "Int64", text: "9007199254740993"}, {name: "D", type: "Double", text: ".5"}, {name: "D2", type: "Double", text: "5"},
		{name: "N", type: "Double", text: "NaN"}, {name: "H", type: "Binary", text: "00ff10", format: "hex"}, {name: "I", type: "Int32", text: "-0"},
		{name: "S", type: "String", text: 'a"b'}, {name: "B", type: "Boolean", text: "false"}]))`, &wire,
		func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
	want := `{"PartitionKey":"p","RowKey":"r","I64@odata.type":"Edm.Int64","I64":"9007199254740993","D@odata.type":"Edm.Double","D":0.5,"D2@odata.type":"Edm.Double","D2":5.0,` +
		`"N@odata.type":"Edm.Double","N":"NaN","H@odata.type":"Edm.Binary","H":"AP8Q","I":0,"S":"a\"b","B":false}`
	if wire != want {
		t.Errorf("toWire:\n got %s\nwant %s", wire, want)
	}
	var read string
	// text is what the editor shows, raw the JSON as the service sent it (what goes back
	// for a value left unchanged).
	wantRead := `{"pk":"p","rk":"r","timestamp":"t","etag":"e","props":[{"name":"D","type":"Double","text":"2.0","raw":"2"},{"name":"E","type":"Double","text":"1e308","raw":"1e308"},` +
		`{"name":"I","type":"Int32","text":"7","raw":"7"},{"name":"L","type":"Int64","text":"-9223372036854775808","raw":"\"-9223372036854775808\""},` +
		`{"name":"N","type":"Double","text":"-Infinity","raw":"\"-Infinity\""},{"name":"S","type":"String","text":"a\r\nb","raw":"\"a\\r\\nb\""}]}`
	b.run("fromWire", chromedp.Evaluate(`import('/-/edm.js').then(m => JSON.stringify(m.fromWire(m.parseJSON(
		'{"PartitionKey":"p","RowKey":"r","odata.etag":"e","Timestamp":"t","D@odata.type":"Edm.Double","D":2,"E":1e308,"I":7,"L@odata.type":"Edm.Int64","L":"-9223372036854775808","X":null,"N@odata.type":"Edm.Double","N":"-Infinity","S":"a\\r\\nb"}'))))`, &read,
		func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
	if read != wantRead {
		t.Errorf("fromWire:\n got %s\nwant %s", read, wantRead)
	}

	// Strings: which a text box holds, the escaped notation and back, and what is sent.
	var strs string
	b.run("strings", chromedp.Evaluate(`import('/-/edm.js').then(m => {
	  const out = [];
	  const all = ['plain', 'line1\nline2', 'a\r\nb', 'a\rb', 'tab\there', 'nul\u0000', 'del\u007f', 'nel\u0085', 'ls\u2028ps\u2029', 'back\\slash', '\ud800lone', 'pair\ud83d\ude00', '  sp  ', ''];
	  for (const s of all) {
	    const e = m.escapeString(s);
	    if (m.unescapeString(e) !== s) out.push('round trip ' + JSON.stringify(s) + ' via ' + e);
	    if (/[\n\r\u2028\u2029\u0000-\u001f]/.test(e)) out.push('escaped form of ' + JSON.stringify(s) + ' is not one plain line: ' + JSON.stringify(e));
	  }
	  const holds = all.filter(m.textHolds);
	  if (JSON.stringify(holds) !== JSON.stringify(['plain', 'line1\nline2', 'tab\there', 'ls\u2028ps\u2029', 'back\\slash', 'pair\ud83d\ude00', '  sp  ', ''])) out.push('textHolds: ' + JSON.stringify(holds));
	  // A textarea really changes what textHolds refuses, and keeps what it accepts.
	  const ta = document.createElement('textarea');
	  for (const s of all) { ta.value = s; if ((ta.value === s) !== m.textHolds(s) && !/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\ud800-\udfff]/.test(s)) out.push('textarea and textHolds disagree on ' + JSON.stringify(s)); }
	  for (const bad of ['\\x', 'end\\', '\\u12']) { try { m.unescapeString(bad); out.push('accepted ' + bad); } catch {} }
	  if (m.check('String', '\\q', 'escaped') === '') out.push('check accepts a bad escape');
	  if (m.check('String', 'a\\rb', 'escaped') !== '') out.push('check refuses a good escape');
	  const wire = m.toWire('p', 'r', [{ name: 'E', type: 'String', text: 'a\\r\\nb', format: 'escaped' }, { name: 'T', type: 'String', text: 'x\ny', format: 'text' },
	    { name: 'R', type: 'Double', text: '9', raw: '1e+300' }, { name: 'Q', type: 'String', text: 'ignored', raw: '"kept\\r"' }, { name: 'I', type: 'Int32', text: '0', raw: '7' }]);
	  if (wire !== '{"PartitionKey":"p","RowKey":"r","E":"a\\r\\nb","T":"x\\ny","R@odata.type":"Edm.Double","R":1e+300,"Q":"kept\\r","I":7}') out.push('toWire ' + wire);
	  return out.join('\n');
	})`, &strs, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
	if strs != "" {
		t.Errorf("edm.js strings:\n%s", strs)
	}
}

// ---- issue 42: edits that lose data, SAS with a stored policy, layout, retries --------

// signIn opens the console and signs in with the server's default account and key.
func (b *browser) signIn() {
	b.t.Helper()
	a := b.srv.Default()
	b.run("open", chromedp.Navigate(b.origin+"/-/"), chromedp.WaitVisible("#signin", chromedp.ByQuery))
	b.run("sign in", setValue("#in-account", a.Name), setValue("#in-key", a.Key), click("#signin-submit"), chromedp.WaitVisible("#table-list", chromedp.ByQuery))
}

// postEntity inserts an entity given as exact JSON (every value as written), with the
// account key.
func postEntity(t *testing.T, srv *server, table, body string) {
	t.Helper()
	r := srv.do(t, rawReq{Method: "POST", Path: "/" + devAccount + "/" + table, Body: []byte(body),
		Header: map[string]string{"Prefer": "return-no-content"}})
	requireStatus(t, r, 204, "insert "+body[:min(len(body), 80)])
}

// rawEntityAt reads an entity as raw JSON (full metadata) with a hand-signed request:
// the Go SDK refuses empty keys.
func rawEntityAt(t *testing.T, srv *server, table, pk, rk string) map[string]json.RawMessage {
	t.Helper()
	r := srv.do(t, rawReq{Method: "GET", Path: entityPath(devAccount, table, pk, rk), Header: map[string]string{"Accept": "application/json;odata=fullmetadata"}})
	requireStatus(t, r, 200, "get ("+pk+", "+rk+")")
	return rawObject(t, r.Body)
}

// sameProperties reports, one line each, the properties (system ones aside: the keys,
// Timestamp, odata.*) that differ between two raw entities, except those named in except.
func sameProperties(before, after map[string]json.RawMessage, except ...string) []string {
	skip := func(k string) bool {
		base, _, _ := strings.Cut(k, "@")
		return strings.HasPrefix(k, "odata.") || base == "Timestamp" || base == "PartitionKey" || base == "RowKey" || slices.Contains(except, base)
	}
	var diffs []string
	for k, v := range before {
		if !skip(k) && string(after[k]) != string(v) {
			diffs = append(diffs, fmt.Sprintf("%s: %s → %s", k, truncateString(string(v), 80), truncateString(string(after[k]), 80)))
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok && !skip(k) {
			diffs = append(diffs, fmt.Sprintf("%s: (absent) → %s", k, truncateString(string(v), 80)))
		}
	}
	slices.Sort(diffs)
	return diffs
}

// pressEnter presses Enter as a keyboard does: one keyDown carrying its text, then keyUp.
// (chromedp's KeyEvent sends the text as a separate char event, which a page cannot
// cancel from its keydown handler as it cancels a real key's keypress.)
func pressEnter(mods input.Modifier) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		ev := func(t input.KeyType) *input.DispatchKeyEventParams {
			return input.DispatchKeyEvent(t).WithKey("Enter").WithCode("Enter").WithWindowsVirtualKeyCode(13).WithNativeVirtualKeyCode(13).WithModifiers(mods)
		}
		if err := ev(input.KeyDown).WithText("\r").WithUnmodifiedText("\r").Do(ctx); err != nil {
			return err
		}
		return ev(input.KeyUp).Do(ctx)
	})
}

// markProp gives the value control of the editor's property name the id "target".
func markProp(name string) chromedp.Action {
	return js(fmt.Sprintf(`(() => { document.querySelector('#target')?.removeAttribute('id');
	  [...document.querySelectorAll('#editor tr.prop')].find(r => r.querySelector('.name').value === %q).querySelector('.value').id = 'target'; })()`, name))
}

// clickRowWith clicks the grid row whose text contains s.
func clickRowWith(s string) chromedp.Action {
	return chromedp.Tasks{
		wait(fmt.Sprintf(`[...document.querySelectorAll('#entity-grid tbody tr')].some(r => r.textContent.includes(%q))`, s)),
		js(fmt.Sprintf(`[...document.querySelectorAll('#entity-grid tbody tr')].find(r => r.textContent.includes(%q)).click()`, s)),
	}
}

// TestConsoleSelectEditsWholeEntity: an entity opened from a $select view is edited
// whole — a Replace keeps every property the view did not show — and a $select without
// the keys still edits, overwrites and deletes the entity shown, never the one whose keys
// are empty; the grid says when a view is partial, and the conflict view shows the keys.
func TestConsoleSelectEditsWholeEntity(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	c, name := newTable(t, svc)
	postEntity(t, srv, name, `{"PartitionKey":"p1","RowKey":"r1","Name":"orig","Age":42,"Big@odata.type":"Edm.Int64","Big":"9007199254740993",`+
		`"Score":0.1,"When@odata.type":"Edm.DateTime","When":"2024-02-29T23:59:59.1234567Z","Id@odata.type":"Edm.Guid","Id":"0f8fad5b-d9cb-469f-a165-70867728950e",`+
		`"Blob@odata.type":"Edm.Binary","Blob":"AAECAw==","Flag":true,"Note":"a note"}`)
	// The decoy: the entity whose keys are empty, which a keyless view used to edit.
	postEntity(t, srv, name, `{"PartitionKey":"","RowKey":"","Name":"decoy","Other":"x"}`)
	decoy := rawEntityAt(t, srv, name, "", "")
	checkDecoy := func(when string) {
		t.Helper()
		now := rawEntityAt(t, srv, name, "", "")
		if d := sameProperties(decoy, now); len(d) > 0 || string(now["odata.etag"]) != string(decoy["odata.etag"]) {
			t.Errorf("%s: the entity with empty keys was changed: %v", when, d)
		}
	}
	before := rawEntity(t, c, "p1", "r1")

	b := newBrowser(t, srv)
	b.signIn()
	b.run("open table", chromedp.Navigate(b.origin+"/-/#/tables/"+name), textHas("#q-page", "2 entities"))

	// Enter on a row opens the editor, and only that: the same key press saves nothing.
	var stillOpen bool
	b.run("enter on a row", js(`document.querySelector('#entity-grid tr[data-pk="p1"]').focus()`), pressEnter(0),
		chromedp.WaitVisible("#ed-replace", chromedp.ByQuery), chromedp.Sleep(500*time.Millisecond),
		chromedp.Evaluate(`document.querySelector('#dialog').open && !!document.querySelector('#editor')`, &stillOpen))
	if now := rawEntity(t, c, "p1", "r1"); !stillOpen || string(now["odata.etag"]) != string(before["odata.etag"]) {
		t.Errorf("Enter on a grid row: editor open %v, entity written %v", stillOpen, string(now["odata.etag"]) != string(before["odata.etag"]))
	}
	b.run("close", click("#ed-close"), wait(`!document.querySelector('#dialog').open`))

	// 1. $select with the keys: Replace after changing Name keeps the other eight.
	b.run("select three", setValue("#q-select", "PartitionKey,RowKey,Name"), click("#q-run"), textHas("#q-page", "2 entities"),
		wait(`!document.querySelector('#entity-grid thead').textContent.includes('Score')`))
	b.run("edit from partial view", click(`#entity-grid tr[data-pk="p1"]`), chromedp.WaitVisible("#ed-replace", chromedp.ByQuery),
		wait(`[...document.querySelectorAll('#editor .name')].some(n => n.value === 'Name')`),
		fillEditor([][4]string{{"Name", "String", "", "edited"}}), click("#ed-replace"), wait(`!document.querySelector('#dialog').open`))
	after := rawEntity(t, c, "p1", "r1")
	if d := sameProperties(before, after, "Name"); len(d) > 0 || string(after["Name"]) != `"edited"` {
		t.Errorf("Replace from a $select view: Name = %s; other properties changed: %v", after["Name"], d)
	}

	// 2. $select without the keys: the keys are fetched anyway, and Enter (Replace) edits p1/r1.
	b.run("select Name only", setValue("#q-select", "Name"), click("#q-run"), textHas("#q-page", "2 entities"))
	b.run("keyless edit", clickRowWith("edited"), chromedp.WaitVisible("#ed-replace", chromedp.ByQuery),
		wait(`[...document.querySelectorAll('#editor .name')].some(n => n.value === 'Name')`),
		fillEditor([][4]string{{"Name", "String", "", "keyless"}}), markProp("Name"), js(`document.querySelector('#target').focus()`), pressEnter(0),
		wait(`!document.querySelector('#dialog').open || !!document.querySelector('#conflict')`))
	var falseConflict bool
	b.run("no false conflict", chromedp.Evaluate(`!!document.querySelector('#conflict')`, &falseConflict))
	if falseConflict {
		t.Errorf("editing in a keyless $select view answered a conflict (412 against another entity)")
		b.run("close conflict", js(`document.querySelector('#dialog').close()`))
	}
	after = rawEntity(t, c, "p1", "r1")
	if d := sameProperties(before, after, "Name"); len(d) > 0 || string(after["Name"]) != `"keyless"` {
		t.Errorf("Replace from a keyless $select view: Name = %s; other properties changed: %v", after["Name"], d)
	}
	checkDecoy("after a keyless edit")

	// A conflict in a keyless view: the keys are shown, and "Overwrite with mine" writes p1/r1.
	b.run("keyless open for conflict", click("#q-run"), clickRowWith("keyless"), chromedp.WaitVisible("#ed-replace", chromedp.ByQuery),
		wait(`[...document.querySelectorAll('#editor .name')].some(n => n.value === 'Name')`))
	if _, err := c.UpdateEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p1", "RowKey": "r1", "Late": "write"}),
		&aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge}); err != nil {
		t.Fatal(err)
	}
	var conflictText string
	b.run("keyless conflict", fillEditor([][4]string{{"Name", "String", "", "mine"}}), click("#ed-replace"),
		chromedp.WaitVisible("#conflict", chromedp.ByQuery), chromedp.Text("#conflict", &conflictText, chromedp.ByQuery))
	if !strings.Contains(conflictText, "p1") || !strings.Contains(conflictText, "r1") {
		t.Errorf("the conflict view does not show the keys p1/r1:\n%s", conflictText)
	}
	b.run("overwrite with mine", click("#conflict-overwrite"), wait(`!document.querySelector('#dialog').open`))
	after = rawEntity(t, c, "p1", "r1")
	if string(after["Name"]) != `"mine"` || string(after["Big"]) != `"9007199254740993"` || string(after["Blob"]) != `"AAECAw=="` {
		t.Errorf("after overwriting from a keyless view: Name=%s Big=%s Blob=%s", after["Name"], after["Big"], after["Blob"])
	}
	checkDecoy("after overwriting from a keyless view")

	// The grid says the view is partial, and shows the keys it fetched.
	b.run("partial view shown", textHas("#q-partial", "$select"), chromedp.WaitVisible(`#entity-grid tr[data-pk="p1"][data-rk="r1"]`, chromedp.ByQuery))
	b.run("full view not partial", setValue("#q-select", ""), click("#q-run"), textHas("#entity-grid thead", "Score"),
		wait(`(document.querySelector('#q-partial')?.textContent || '') === ''`))

	// Delete from a keyless view deletes p1/r1.
	b.run("keyless delete", setValue("#q-select", "Name"), click("#q-run"), clickRowWith("mine"), chromedp.WaitVisible("#ed-delete", chromedp.ByQuery),
		click("#ed-delete"), chromedp.WaitVisible("#confirm-delete-entity", chromedp.ByQuery), click("#confirm-delete"),
		wait(`!document.querySelector('#dialog').open || !!document.querySelector('#conflict')`))
	if _, err := c.GetEntity(ctx(t), "p1", "r1", nil); statusOf(err) != 404 {
		t.Errorf("delete from a keyless view: p1/r1 still there (%v)", err)
	}
	checkDecoy("after deleting from a keyless view")
}

// TestConsoleExactValues: every value the editor shows goes back exactly as it was read
// when it is not touched — multi-line strings, carriage returns, control characters,
// whitespace, long strings, Int64 and Double text forms, DateTime ticks, GUIDs, Binary —
// and a multi-line or escaped string edited in the editor is written as edited.
func TestConsoleExactValues(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	c, name := newTable(t, svc)
	long := strings.Repeat("0123456789abcdef", 2000) + "\nend"
	props := map[string]string{
		"ML":      `"line1\nline2"`,
		"CRLF":    `"a\r\nb"`,
		"CR":      `"a\rb"`,
		"LeadNL":  `"\nstarts with a line break"`,
		"TrailNL": `"ends with a line break\n"`,
		"Spaces":  `"  padded  "`,
		"Ctl":     `"nul\u0000bell\u0007tab\tdel\u007fnel\u0085"`,
		"LS":      `"a\u2028b\u2029c"`,
		"Empty":   `""`,
		"Long":    strconv.Quote(long),
		"Emoji":   `"😀 é ✓"`,
		"I32":     `-2147483648`,
		"Bool":    `false`,
	}
	typed := map[string][2]string{
		"I64":   {"Int64", `"-9223372036854775808"`},
		"I64b":  {"Int64", `"9007199254740993"`},
		"DZero": {"Double", `-0.0`},
		"DNaN":  {"Double", `"NaN"`},
		"DInf":  {"Double", `"Infinity"`},
		"DNInf": {"Double", `"-Infinity"`},
		"DBig":  {"Double", `1e300`},
		"DTiny": {"Double", `5e-324`},
		"DTen":  {"Double", `0.1`},
		"DInt":  {"Double", `2.0`},
		"DT":    {"DateTime", `"2024-02-29T23:59:59.1234567Z"`},
		"DT0":   {"DateTime", `"1601-01-01T00:00:00Z"`},
		"G":     {"Guid", `"0F8FAD5B-D9CB-469F-A165-70867728950E"`},
		"Bin":   {"Binary", `"AP8QAQ=="`},
		"BinE":  {"Binary", `""`},
	}
	var sb strings.Builder
	sb.WriteString(`{"PartitionKey":"x","RowKey":"1"`)
	for k, v := range props {
		fmt.Fprintf(&sb, `,%q:%s`, k, v)
	}
	for k, v := range typed {
		fmt.Fprintf(&sb, `,"%s@odata.type":"Edm.%s",%q:%s`, k, v[0], k, v[1])
	}
	sb.WriteString("}")
	postEntity(t, srv, name, sb.String())
	before := rawEntity(t, c, "x", "1")
	if string(before["CR"]) != `"a\rb"` || string(before["ML"]) != `"line1\nline2"` {
		t.Fatalf("the service stored CR=%s ML=%s", before["CR"], before["ML"])
	}

	b := newBrowser(t, srv)
	b.signIn()
	row := `#entity-grid tr[data-pk="x"]`
	b.run("open table", chromedp.Navigate(b.origin+"/-/#/tables/"+name), chromedp.WaitVisible(row, chromedp.ByQuery))
	// The row is far wider than the grid: clicked where it is seen, at its start.
	openRow := chromedp.Tasks{chromedp.WaitVisible(row, chromedp.ByQuery), js(`document.querySelector('#entity-grid tr[data-pk="x"] td').click()`)}
	for _, mode := range []string{"replace", "merge"} {
		b.run("untouched "+mode, openRow, chromedp.WaitVisible("#ed-"+mode, chromedp.ByQuery), wait(`document.querySelectorAll('#editor tr.prop').length > 20`),
			click("#ed-"+mode), wait(`!document.querySelector('#dialog').open`))
		after := rawEntity(t, c, "x", "1")
		if d := sameProperties(before, after); len(d) > 0 {
			t.Errorf("an untouched %s changed:\n  %s", mode, strings.Join(d, "\n  "))
		}
		if string(after["odata.etag"]) == string(before["odata.etag"]) {
			t.Errorf("the %s was not written (same ETag)", mode)
		}
	}

	// What the editor cannot show in a text box it shows escaped, and says so.
	b.run("open", openRow, chromedp.WaitVisible("#ed-replace", chromedp.ByQuery), wait(`document.querySelectorAll('#editor tr.prop').length > 20`))
	var shown map[string]string
	b.run("how values are shown", chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll('#editor tr.prop')].map(r =>
	    [r.querySelector('.name').value, r.querySelector('.value').tagName + ':' + (r.querySelector('select.format')?.value || '') + ':' + r.querySelector('.value').value]))`, &shown))
	for k, want := range map[string]string{
		"ML": "TEXTAREA:text:line1\nline2", "TrailNL": "TEXTAREA:text:ends with a line break\n", "Spaces": "TEXTAREA:text:  padded  ",
		"CR": `INPUT:escaped:a\rb`, "CRLF": `INPUT:escaped:a\r\nb`, "Ctl": `INPUT:escaped:nul\u0000bell\u0007tab\tdel\u007fnel\u0085`,
	} {
		if shown[k] != want {
			t.Errorf("%s is shown as %q, want %q", k, shown[k], want)
		}
	}

	// Edit the multi-line string (a line added) and the escaped one; the rest stays.
	b.run("edit multi-line and escaped", fillEditor([][4]string{{"ML", "String", "", "line1\nline2\nline3"}}),
		markProp("CR"), js(`(() => { const el = document.querySelector('#target'); el.value = 'a\\rb\\r\\nc'; el.dispatchEvent(new Event('input', {bubbles: true})); })()`),
		click("#ed-replace"), wait(`!document.querySelector('#dialog').open`))
	after := rawEntity(t, c, "x", "1")
	if string(after["ML"]) != `"line1\nline2\nline3"` || string(after["CR"]) != `"a\rb\r\nc"` {
		t.Errorf("edited: ML=%s CR=%s", after["ML"], after["CR"])
	}
	if d := sameProperties(before, after, "ML", "CR"); len(d) > 0 {
		t.Errorf("editing two strings changed others:\n  %s", strings.Join(d, "\n  "))
	}

	// From the keyboard: Shift+Enter is a line break in a string, Enter saves.
	b.run("keyboard", openRow, chromedp.WaitVisible("#ed-replace", chromedp.ByQuery), wait(`document.querySelectorAll('#editor tr.prop').length > 20`),
		markProp("ML"), js(`(() => { const el = document.querySelector('#target'); el.focus(); el.setSelectionRange(el.value.length, el.value.length); })()`),
		pressEnter(input.ModifierShift), chromedp.KeyEvent("z"),
		wait(`document.querySelector('#dialog').open`), pressEnter(0), wait(`!document.querySelector('#dialog').open`))
	after = rawEntity(t, c, "x", "1")
	if string(after["ML"]) != `"line1\nline2\nline3\nz"` {
		t.Errorf("typed Shift+Enter, z, Enter: ML=%s", after["ML"])
	}
}

// TestConsoleSASWithPolicy: a SAS generated with a stored policy id leaves to the policy
// what the policy sets (the service refuses a field given in both), and the service
// accepts the URL; a policy the table does not have is refused in the page.
func TestConsoleSASWithPolicy(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	c, name := newTable(t, svc)
	if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "N": 1}), nil); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	if _, err := c.SetAccessPolicy(ctx(t), &aztables.SetAccessPolicyOptions{TableACL: []*aztables.SignedIdentifier{
		{ID: to.Ptr("readers"), AccessPolicy: &aztables.AccessPolicy{Permission: to.Ptr("r"), Expiry: &exp}},
		{ID: to.Ptr("permsonly"), AccessPolicy: &aztables.AccessPolicy{Permission: to.Ptr("ra")}},
	}}); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, srv)
	b.signIn()
	generate := func(policy string) string {
		t.Helper()
		var u string
		// Navigating to the URL the page is at does not reload it: clear what it shows.
		b.run("generate with "+policy, chromedp.Navigate(b.origin+"/-/#/tables/"+name+"/sas"), chromedp.WaitVisible("#sas-form", chromedp.ByQuery),
			js(`document.querySelector('#sas-out').value = ''`), setValue("#sas-policy", policy), click("#sas-make"),
			wait(`document.querySelector('#sas-out').value.includes('sig=')`),
			chromedp.Value("#sas-out", &u, chromedp.ByQuery))
		return u
	}
	// The policy sets the permissions and the expiry: the URL carries neither.
	u := generate("readers")
	if strings.Contains(u, "sp=") || strings.Contains(u, "se=") || !strings.Contains(u, "si=readers") {
		t.Errorf("SAS URL for a policy that sets sp and se: %s", u)
	}
	if page, err := sasTableClient(t, u, nil).NewListEntitiesPager(nil).NextPage(ctx(t)); err != nil || len(page.Entities) != 1 {
		t.Errorf("reading with the SAS generated for policy readers (%s): %v", u, err)
	}
	b.run("fields the policy sets", chromedp.Navigate(b.origin+"/-/#/tables/"+name+"/sas"), chromedp.WaitVisible("#sas-form", chromedp.ByQuery),
		setValue("#sas-policy", "readers"), wait(`document.querySelector('#sas-expiry').disabled && [...document.querySelectorAll('#sas-form input[name=perm]')].every(c => c.disabled)`),
		textHas("#sas-policy-note", "readers"))

	// The policy sets the permissions only: the URL carries the expiry, not sp, and may add.
	u = generate("permsonly")
	if strings.Contains(u, "sp=") || !strings.Contains(u, "se=") {
		t.Errorf("SAS URL for a policy that sets sp only: %s", u)
	}
	sc := sasTableClient(t, u, nil)
	if _, err := sc.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "added"}), nil); err != nil {
		t.Errorf("adding with the SAS generated for policy permsonly (%s): %v", u, err)
	}

	// A policy the table does not have: no URL, and a reason.
	b.run("unknown policy", chromedp.Navigate(b.origin+"/-/#/tables/"+name+"/sas"), chromedp.WaitVisible("#sas-form", chromedp.ByQuery),
		setValue("#sas-policy", "nope"), click("#sas-make"), textHas("#sas-status", "nope"),
		wait(`document.querySelector('#sas-out').value === ''`))
}

// layoutIssues is a script listing what overflows the viewport horizontally: the page
// itself, the header (taller than its 44 px, or wider than the window), and any card,
// open dialog or form wider than the window.
const layoutIssues = `(() => {
  const de = document.documentElement, w = de.clientWidth, issues = [];
  if (de.scrollWidth > w) issues.push('page ' + de.scrollWidth + ' px wide in ' + w);
  const hdr = document.querySelector('header.top');
  if (hdr.scrollWidth > hdr.clientWidth) issues.push('header content ' + hdr.scrollWidth + ' px in ' + hdr.clientWidth);
  for (const el of hdr.querySelectorAll('a, .brand, button, .who')) {
    const r = el.getBoundingClientRect();
    if (el.offsetParent && (r.height > 44 || r.right > w || r.top < 0)) issues.push('header item ' + (el.id || el.textContent.slice(0, 20)) + ' at ' + JSON.stringify([r.left, r.top, r.right, r.bottom]));
  }
  for (const el of document.querySelectorAll('.card, dialog[open], form, .tabs, .pager, h1')) {
    const r = el.getBoundingClientRect();
    if (el.offsetParent !== null || el.tagName === 'DIALOG') if (r.right > w + 0.5) issues.push((el.id || el.className || el.tagName) + ' ends at ' + Math.round(r.right) + ' px of ' + w);
  }
  return issues.join('\n');
})()`

// TestConsoleLayout800x600: at 800×600 no view overflows the window horizontally and the
// header stays one line, signed in with the key or with a table SAS (the longest header).
func TestConsoleLayout800x600(t *testing.T) {
	// An account of its own: its CORS rules are this test's (the postgres pass shares one
	// database between the servers of the run).
	srv := startOwnServer(t)
	acct := srv.Default()
	svc := newServiceClientFor(t, srv.Endpoint(acct.Name), acct.Name, acct.Key, nil)
	name := "t" + strings.Repeat("x", 50) + strings.ToLower(runID)
	c := svc.NewClient(name)
	if _, err := c.CreateTable(ctx(t), nil); err != nil {
		t.Fatal(err)
	}
	// A row in every table the views edit: CORS rules and stored access policies.
	if _, err := svc.SetProperties(ctx(t), aztables.ServiceProperties{Cors: []*aztables.CorsRule{{AllowedOrigins: to.Ptr("https://app.example,https://other.example"),
		AllowedMethods: to.Ptr("GET,PUT,POST"), AllowedHeaders: to.Ptr("x-ms-*"), ExposedHeaders: to.Ptr("x-ms-*"), MaxAgeInSeconds: to.Ptr(int32(600))}}}, nil); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	if _, err := c.SetAccessPolicy(ctx(t), &aztables.SetAccessPolicyOptions{TableACL: []*aztables.SignedIdentifier{
		{ID: to.Ptr("readers-with-a-long-policy-id"), AccessPolicy: &aztables.AccessPolicy{Permission: to.Ptr("raud"), Start: &exp, Expiry: &exp}}}}); err != nil {
		t.Fatal(err)
	}
	e := map[string]any{"PartitionKey": "partition-with-a-long-name-0001", "RowKey": "row-with-a-long-name-0001"}
	for i := range 12 {
		e[fmt.Sprintf("Property%02d", i)] = strings.Repeat("value ", 8)
	}
	if _, err := c.AddEntity(ctx(t), marshal(t, e), nil); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, srv)
	b.run("800x600", chromedp.EmulateViewport(800, 600))
	check := func(view string, actions ...chromedp.Action) {
		t.Helper()
		var issues string
		b.run(view, append(actions, chromedp.Sleep(200*time.Millisecond), chromedp.Evaluate(layoutIssues, &issues))...)
		if issues != "" {
			t.Errorf("%s at 800×600:\n%s", view, issues)
		}
	}
	check("sign-in", chromedp.Navigate(b.origin+"/-/"), chromedp.WaitVisible("#signin", chromedp.ByQuery))
	b.run("sign in", setValue("#in-account", acct.Name), setValue("#in-key", acct.Key), click("#signin-submit"), chromedp.WaitVisible("#table-list", chromedp.ByQuery))
	check("entities", chromedp.Navigate(b.origin+"/-/#/tables/"+name), textHas("#q-page", "1 entities"))
	check("editor", js(`document.querySelector('#entity-grid tbody tr td').click()`), chromedp.WaitVisible("#ed-replace", chromedp.ByQuery))
	b.run("close editor", js(`document.querySelector('#dialog').close()`))
	check("policies", chromedp.Navigate(b.origin+"/-/#/tables/"+name+"/policies"), chromedp.WaitVisible("#acl-rows tr", chromedp.ByQuery))
	check("sas", chromedp.Navigate(b.origin+"/-/#/tables/"+name+"/sas"), chromedp.WaitVisible("#sas-form", chromedp.ByQuery))
	check("cors", chromedp.Navigate(b.origin+"/-/#/cors"), chromedp.WaitVisible("#cors-rows tr", chromedp.ByQuery))
	check("watch", chromedp.Navigate(b.origin+"/-/#/watch"), chromedp.WaitVisible("#watch-legend", chromedp.ByQuery))
	sasURL, err := c.GetTableSASURL(aztables.SASPermissions{Read: true, Add: true, Update: true, Delete: true}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// aztables v1.4.1 joins the account and the table without a slash: keep its query only.
	_, query, _ := strings.Cut(sasURL, "?")
	sasURL = srv.Endpoint(acct.Name) + "/" + name + "?" + query
	b.run("sign in with SAS", click("#signout"), click("#tab-sas"), setValue("#in-sas", sasURL), click("#signin-submit"),
		textHas("#who", "table SAS for"))
	check("entities with a table SAS", textHas("#q-page", "1 entities"))
}

// TestConsoleFilterErrorInPlace: a $filter the service refuses clears the previous
// results (no stale rows under the error) and moves nothing on the page; a valid filter
// afterwards neither.
func TestConsoleFilterErrorInPlace(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	c, name := newTable(t, svc)
	for i := range 40 {
		if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": fmt.Sprintf("r%02d", i), "N": i}), nil); err != nil {
			t.Fatal(err)
		}
	}
	b := newBrowser(t, srv)
	b.signIn()
	const where = `JSON.stringify(['#q-page', '#q-status', '#grid', '#q-prev'].map(s => Math.round(document.querySelector(s).getBoundingClientRect().top))
	  .concat([Math.round(document.querySelector('#grid').getBoundingClientRect().height), document.documentElement.scrollHeight]))`
	var before, after, again string
	b.run("all rows", chromedp.Navigate(b.origin+"/-/#/tables/"+name), textHas("#q-page", "40 entities"), chromedp.Evaluate(where, &before))
	var rows int
	b.run("filter error", setValue("#q-filter", "N eq eq 7"), chromedp.SendKeys("#q-filter", kb.Enter, chromedp.ByQuery),
		textHas("#q-status", "InvalidInput"), textHas("#q-caret", "^"), chromedp.Evaluate(where, &after),
		chromedp.Evaluate(`document.querySelectorAll('#entity-grid tbody tr').length`, &rows))
	if rows != 0 {
		t.Errorf("after a refused filter, %d rows of the previous results are still shown", rows)
	}
	if after != before {
		t.Errorf("a refused filter moved the page: [page line, status, grid, pager top; grid height; page height] %s → %s", before, after)
	}
	b.run("valid filter", setValue("#q-filter", "N lt 3"), click("#q-run"), textHas("#q-page", "3 entities"),
		wait(`document.querySelector('#q-caret').textContent === ''`), chromedp.Evaluate(where, &again))
	if again != before {
		t.Errorf("the page moved from the first query to a valid one after an error: %s → %s", before, again)
	}
}

// TestConsoleWatchLegendStable: each operation keeps its colour (and line style) in Watch
// when others appear, and the operations shown stay distinguishable beyond ten.
func TestConsoleWatchLegendStable(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	c, name := newTable(t, svc)
	b := newBrowser(t, srv)
	b.signIn()
	if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "1"}), nil); err != nil {
		t.Fatal(err)
	}
	const legend = `JSON.stringify(Object.fromEntries([...document.querySelectorAll('#watch-legend > span')].map(s => {
	  const cs = getComputedStyle(s.querySelector('i'));
	  return [s.textContent.trim(), cs.backgroundColor + ' ' + cs.backgroundImage + ' ' + cs.borderTopStyle];
	})))`
	var first string
	b.run("watch", chromedp.Navigate(b.origin+"/-/#/watch"), textHas("#watch-legend", "InsertEntity"), textHas("#watch-legend", "CreateTable"),
		chromedp.Evaluate(legend, &first))
	// Eleven more operations, several sorting before the first ones.
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	e := marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "1", "X": 1})
	must(c.GetEntity(ctx(t), "p", "1", nil))
	must(c.NewListEntitiesPager(nil).NextPage(ctx(t)))
	must(c.UpdateEntity(ctx(t), e, &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeReplace}))
	must(c.UpdateEntity(ctx(t), e, &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge}))
	must(c.UpsertEntity(ctx(t), e, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace}))
	must(c.UpsertEntity(ctx(t), e, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeMerge}))
	must(c.SubmitTransaction(ctx(t), []aztables.TransactionAction{{ActionType: aztables.TransactionTypeInsertMerge, Entity: e}}, nil))
	must(c.DeleteEntity(ctx(t), "p", "1", nil))
	must(c.GetAccessPolicy(ctx(t), nil))
	must(c.SetAccessPolicy(ctx(t), nil))
	must(svc.GetProperties(ctx(t), nil))
	must(svc.CreateTable(ctx(t), name+"x", nil))
	must(svc.DeleteTable(ctx(t), name+"x", nil))
	var second string
	b.run("more operations", textHas("#watch-legend", "GetTableACL"), textHas("#watch-legend", "EntityGroupTransaction"), textHas("#watch-legend", "DeleteTable"),
		textHas("#watch-legend", "GetTableServiceProperties"), chromedp.Evaluate(legend, &second))
	var m1, m2 map[string]string
	_ = json.Unmarshal([]byte(first), &m1)
	_ = json.Unmarshal([]byte(second), &m2)
	if len(m2) <= 10 {
		t.Fatalf("only %d operations in the legend: %s", len(m2), second)
	}
	for op, style := range m1 {
		if m2[op] != style {
			t.Errorf("%s changed its colour when other operations appeared: %s → %s", op, style, m2[op])
		}
	}
	seen := map[string]string{}
	for op, style := range m2 {
		if other, dup := seen[style]; dup {
			t.Errorf("%s and %s are drawn alike (%s)", op, other, style)
		}
		seen[style] = op
	}
}

// TestConsoleConflictDialog: the conflict view shows the entity's keys, breaks no
// property name in the middle, and has a Cancel that goes back to the editor with the
// user's changes and writes nothing.
func TestConsoleConflictDialog(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	c, name := newTable(t, svc)
	long := "CustomerPreferredDeliveryAddressLine"
	if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "pk-conflict", "RowKey": "rk-conflict",
		long: "x", "Payload": strings.Repeat("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo", 8)}), nil); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, srv)
	b.signIn()
	b.run("open", chromedp.Navigate(b.origin+"/-/#/tables/"+name), chromedp.WaitVisible(`#entity-grid tr[data-pk="pk-conflict"]`, chromedp.ByQuery),
		js(`document.querySelector('#entity-grid tbody tr td').click()`), chromedp.WaitVisible("#ed-replace", chromedp.ByQuery))
	if _, err := c.UpdateEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "pk-conflict", "RowKey": "rk-conflict", "Late": "write"}),
		&aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge}); err != nil {
		t.Fatal(err)
	}
	var broken, text string
	b.run("conflict", fillEditor([][4]string{{long, "String", "", "mine"}}), click("#ed-replace"), chromedp.WaitVisible("#conflict", chromedp.ByQuery),
		chromedp.Text("#conflict", &text, chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll('#conflict tbody th')].filter(th => {
		  const r = document.createRange(); r.selectNodeContents(th);
		  const lines = new Set([...r.getClientRects()].map(x => Math.round(x.top)));
		  return lines.size > 1 || th.scrollWidth > th.clientWidth;
		}).map(th => th.textContent).join(', ')`, &broken))
	if broken != "" {
		t.Errorf("names broken over lines or cut in the conflict view: %s", broken)
	}
	if !strings.Contains(text, "pk-conflict") || !strings.Contains(text, "rk-conflict") {
		t.Errorf("the conflict view does not name the entity's keys:\n%s", text)
	}
	b.run("cancel", click("#conflict-cancel"), chromedp.WaitVisible("#editor", chromedp.ByQuery),
		wait(fmt.Sprintf(`[...document.querySelectorAll('#editor tr.prop')].some(r => r.querySelector('.name').value === %q && r.querySelector('.value').value === 'mine')`, long)))
	var e aztables.EDMEntity
	resp, err := c.GetEntity(ctx(t), "pk-conflict", "rk-conflict", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(resp.Value, &e)
	if e.Properties[long] != "x" || e.Properties["Late"] != "write" {
		t.Errorf("Cancel wrote something: %v", e.Properties)
	}
}

// TestConsoleRetries: 500 and 503 answers are retried as the SDKs retry them (3 retries,
// exponential back-off from 1 s), said in words while it happens; when every try fails,
// the error says the service is busy, not that it refused, and offers Retry.
func TestConsoleRetries(t *testing.T) {
	// The draws of --faults repeat with the seed: find one where the first query fails once
	// and then passes, the next fails four times (the first try and three retries), and
	// the one after (the user's Retry) passes.
	const spec = "query:503:50%"
	sp, err := faults.Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := []faults.Kind{faults.Busy, faults.None, faults.Busy, faults.Busy, faults.Busy, faults.Busy, faults.None}
	seed := uint64(0)
	for s := uint64(1); s < 1_000_000 && seed == 0; s++ {
		in := faults.New(sp, s)
		seed = s
		for _, k := range want {
			if in.Decide("QueryEntities").Kind != k {
				seed = 0
				break
			}
		}
	}
	if seed == 0 {
		t.Fatal("no seed gives the sequence wanted")
	}
	srv := startServer(t, withArgs("--faults", spec, "--faults-seed", strconv.FormatUint(seed, 10)))
	svc := newServiceClient(t, srv)
	c, name := newTable(t, svc)
	if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r"}), nil); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, srv)
	b.signIn()
	// Every text the query's status line shows, recorded as it changes (a retry's words
	// show for half a second to a second).
	var said []string
	b.run("retried once", js(`window.statuses = []; new MutationObserver(() => { const s = document.querySelector('#q-status');
		  if (s && window.statuses[window.statuses.length - 1] !== s.textContent) window.statuses.push(s.textContent); })
		  .observe(document.body, { subtree: true, childList: true, characterData: true })`),
		chromedp.Navigate(b.origin+"/-/#/tables/"+name), textHas("#q-page", "1 entities"), chromedp.Evaluate(`window.statuses`, &said))
	if !slices.ContainsFunc(said, func(s string) bool {
		return strings.Contains(s, "503 ServerBusy") && strings.Contains(s, "retry 1 of 3")
	}) {
		t.Errorf("while retrying, the status line said: %q", said)
	}
	var msg string
	b.run("every try fails", click("#q-run"), chromedp.WaitVisible("#q-status button.retry", chromedp.ByQuery), chromedp.Text("#q-status", &msg, chromedp.ByQuery))
	if strings.Contains(msg, "refused") || !strings.Contains(msg, "busy") || !strings.Contains(msg, "ServerBusy") || !strings.Contains(msg, "4 tries") {
		t.Errorf("after four 503s the page says: %q", msg)
	}
	b.run("Retry", click("#q-status button.retry"), textHas("#q-page", "1 entities"), wait(`!document.querySelector('#q-status button.retry')`))
}
