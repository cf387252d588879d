package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The figures of the data tools, Cerulean to Cerulean on this machine: entities/s of
// import, export and copy of 1,000,000 entities, and the copy's peak RSS, which stays
// flat whatever the table's size (streaming). Opt-in: CERULEAN_TEST_MILLION=1 (a few
// minutes; not in ./scripts/test).
func TestTransferMillion(t *testing.T) {
	if os.Getenv("CERULEAN_TEST_MILLION") == "" {
		t.Skip("set CERULEAN_TEST_MILLION=1 to copy 1,000,000 entities and report rates and RSS")
	}
	const n = 1_000_000
	src, dst := startOwnServer(t), startOwnServer(t)
	dir := t.TempDir()
	file := writeNumbered(t, dir, n, 1000)
	timed := func(what string, count int, args ...string) {
		t.Helper()
		cmd := exec.Command(binaryPath, args...)
		cmd.Env = filterEnv(os.Environ())
		cmd.Dir = dir
		began := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		el := time.Since(began)
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		t.Logf("%-8s %d entities in %v: %.0f entities/s, peak RSS %d MiB", what, count, el.Round(time.Millisecond), float64(count)/el.Seconds(), ru.Maxrss/1024)
	}
	timed("import", n, "import", "--to", connString(src), "--table", "Million", "--in", file, "--quiet")
	timed("export", n, "export", "--from", connString(src), "--table", "Million", "--out", filepath.Join(dir, "out.jsonl"), "--quiet")
	timed("copy", n, "copy", "--from", connString(src), "--to", connString(dst), "--table", "Million", "--quiet")
	if got := sdkCount(t, newServiceClient(t, dst).NewClient("Million")); got != n {
		t.Errorf("copied %d of %d", got, n)
	}
	// The same copy of a table a tenth the size, for the RSS it would have if memory grew
	// with the table.
	tenth := writeNumbered(t, t.TempDir(), n/10, 1000)
	timed("import", n/10, "import", "--to", connString(src), "--table", "Tenth", "--in", tenth, "--quiet")
	timed("copy", n/10, "copy", "--from", connString(src), "--to", connString(dst), "--table", "Tenth", "--quiet")
}
