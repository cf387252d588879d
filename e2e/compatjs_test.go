package e2e

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// compatJSTimeout bounds one run of the JavaScript compatibility suite.
const compatJSTimeout = 5 * time.Minute

// TestCompatJS runs the JavaScript SDK compatibility suite (compat/js, @azure/data-tables
// with Node's test runner) against a cerulean server started by the harness, so it runs on
// whichever engine CERULEAN_TEST_ENGINE_ARGS selects.
//
// It needs `node` and the suite's npm packages (`cd compat/js && npm ci`). Without them it
// skips, except under CI=true, where a missing client is a failure.
func TestCompatJS(t *testing.T) {
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
	if err != nil || len(files) == 0 {
		t.Fatalf("no compat/js/*.test.mjs files found (err %v)", err)
	}
	sort.Strings(files)

	srv := startServer(t)
	cs := compatConnectionString(srv)

	ctx, cancel := context.WithTimeout(context.Background(), compatJSTimeout)
	defer cancel()
	// The files are passed explicitly: how `node --test <directory>` is read differs
	// between Node versions (a directory before 21, a glob pattern after).
	args := append([]string{"--test"}, files...)
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CERULEAN_CONNECTION_STRING="+cs, "NO_COLOR=1")
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	// node --test runs each file in a child process; if the run is killed on timeout, do
	// not wait forever for a grandchild that still holds the output pipe.
	cmd.WaitDelay = 10 * time.Second

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			t.Log(sc.Text())
		}
		_, _ = io.Copy(io.Discard, pr) // drain after an over-long line
	}()

	t.Logf("running %s %s (cwd %s)", node, strings.Join(args, " "), root)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		pw.Close()
		wg.Wait()
		t.Fatalf("starting node: %v", err)
	}
	runErr := cmd.Wait()
	pw.Close()
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("node --test did not finish within %v", compatJSTimeout)
	}
	if runErr != nil {
		t.Fatalf("node --test failed after %v: %v (the failing tests are in the log above)", time.Since(start).Round(time.Millisecond), runErr)
	}
	t.Logf("node --test passed in %v", time.Since(start).Round(time.Millisecond))
}
