package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"testing"
)

// TestCompatJS runs the JavaScript SDK compatibility suite (compat/js, @azure/data-tables
// with Node's test runner) against a cerulean server started by the harness, so it runs on
// whichever engine CERULEAN_TEST_ENGINE_ARGS selects.
//
// It needs `node` and the suite's npm packages (`cd compat/js && npm ci`). Without them it
// skips, except under CI=true, where a missing client is a failure.
func TestCompatJS(t *testing.T) { compatJS(t, false, false) }

// TestHTTPSCompatJS runs the same suite over HTTPS (--tls-self-signed), the certificate
// trusted the way Node users trust one: NODE_EXTRA_CA_CERTS; the change feed helper's
// suite too, since its long polls are its own requests.
func TestHTTPSCompatJS(t *testing.T) { compatJS(t, true, false) }

// TestCompatJSChanges runs the suite of the change feed helper (compat/js/changes.mjs,
// changes.test.mjs) on its own, so that it runs alone in seconds; TestCompatJS leaves it
// out.
func TestCompatJSChanges(t *testing.T) { compatJS(t, false, true) }

// jsChangesSuite is the file of compat/js that TestCompatJSChanges runs on its own.
const jsChangesSuite = "changes.test.mjs"

// compatJS runs jsChangesSuite, or with changes false every other *.test.mjs of compat/js
// (over HTTPS, every one).
func compatJS(t *testing.T, https, changes bool) {
	root := compatRepoRoot(t)
	suiteDir := filepath.Join(root, "compat", "js")
	unavailable := func(format string, args ...any) { t.Helper(); compatUnavailable(t, format, args...) }
	node, err := exec.LookPath("node")
	if err != nil {
		unavailable("node is not installed: %v", err)
	}
	sdk := filepath.Join(suiteDir, "node_modules", "@azure", "data-tables")
	if _, err := os.Stat(sdk); err != nil {
		unavailable("%s is missing (run: cd compat/js && npm ci --no-audit --no-fund): %v", sdk, err)
	}
	files, err := filepath.Glob(filepath.Join(suiteDir, "*.test.mjs"))
	files = slices.DeleteFunc(files, func(f string) bool { return !https && (filepath.Base(f) == jsChangesSuite) != changes })
	if err != nil || len(files) == 0 {
		t.Fatalf("no compat/js/*.test.mjs files found (err %v)", err)
	}
	sort.Strings(files)

	srv, env := compatServer(t, https, "NODE_EXTRA_CA_CERTS")
	cs := compatConnectionString(srv)
	if https {
		requireUntrusted(t, srv, suiteDir, node, "--input-type=module", "-e", `import { TableServiceClient } from "@azure/data-tables";
const c = TableServiceClient.fromConnectionString(process.env.CERULEAN_CONNECTION_STRING, { retryOptions: { maxRetries: 0 } });
for await (const t of c.listTables()) { console.log(t.name); }`)
	}

	// The files are passed explicitly: how `node --test <directory>` is read differs
	// between Node versions (a directory before 21, a glob pattern after).
	compatRun(t, root, cs, env, node, append([]string{"--test"}, files...)...)
}
