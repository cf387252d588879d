package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// killTool starts the tool with args and, once its checkpoint exists and its progress
// lines show at least at entities committed, sends sig (SIGKILL: no clean stop at all;
// SIGHUP: a closed terminal). It returns the run's stderr; a SIGHUP'd run must stop
// cleanly (status 1, a resume command), a SIGKILL'd one just dies.
func killTool(t *testing.T, args []string, checkpoint string, at int, sig syscall.Signal) string {
	t.Helper()
	cmd := exec.Command(binaryPath, args...)
	cmd.Env = filterEnv(os.Environ())
	cmd.Dir = t.TempDir()
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
		_, err := os.Stat(checkpoint)
		if err == nil && progressCount(stderr.String()) >= at {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the run ended before %d entities (%v): %s", at, err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no progress to %d: %q", at, stderr.String())
		}
	}
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	err := <-exited
	out := stderr.String()
	if sig == syscall.SIGHUP {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(out, "--resume") {
			t.Fatalf("SIGHUP: %v, want a clean stop (status 1, the resume command); stderr:\n%s", err, out)
		}
	} else if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != sig {
		t.Fatalf("%v: the run ended with %v, not the signal; stderr:\n%s", sig, err, out)
	}
	return out
}

// noSecrets fails when anything the tools printed holds the account key or a SAS
// signature's value.
func noSecrets(t testing.TB, what, out string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if k != "" && strings.Contains(out, k) {
			t.Errorf("%s prints the account key:\n%s", what, out)
		}
	}
	if m := sigValue.FindString(out); m != "" {
		t.Errorf("%s prints a SAS signature (%s):\n%s", what, m, out)
	}
}

// sigValue is a sig= parameter with a value other than REDACTED.
var sigValue = regexp.MustCompile(`sig(=|%3D)([^R&'"\s]|R[^E])[^&'"\s]*`)

// A copy or an import killed without a clean stop — kill -9 (as the OOM killer does) or
// SIGHUP (a closed terminal) — early, midway, late, and again while resuming, resumes
// with one --resume that completes with exactly the source's entities, every time: the
// checkpoint (saved once a second) lags what was written, and the entities past it that
// the first run wrote are recognised on the target instead of failing with
// EntityAlreadyExists (issue 42).
func TestTransferKillResume(t *testing.T) {
	const n = 60_000
	// Under nohup the test process starts with SIGHUP ignored, which its children inherit
	// and the tools rightly keep (transfer.Interrupts), so every SIGHUP case would see a
	// run that does not stop. Catching SIGHUP here gives the tools the default disposition
	// again, as a terminal's shell would (execve resets caught signals, not ignored ones).
	if signal.Ignored(syscall.SIGHUP) {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	}
	srv := startOwnServer(t)
	dir := t.TempDir()
	file := writeNumbered(t, dir, n, 50)
	if st, _, errOut := runTool(t, 5*time.Minute, nil, "import", "--to", connString(srv), "--table", "KillSrc", "--in", file, "--quiet"); st != 0 {
		t.Fatalf("import of the source: status %d: %s", st, errOut)
	}
	svc := newServiceClient(t, srv)
	key := srv.Default().Key

	type kill struct {
		sig syscall.Signal
		at  int
	}
	cases := []struct {
		name  string
		kills []kill // the first run's, then each resumed run's but the last
	}{
		{"kill-9 early", []kill{{syscall.SIGKILL, 1}}},
		{"kill-9 mid", []kill{{syscall.SIGKILL, n / 2}}},
		{"kill-9 late", []kill{{syscall.SIGKILL, n * 9 / 10}}},
		{"hup early", []kill{{syscall.SIGHUP, 1}}},
		{"hup mid", []kill{{syscall.SIGHUP, n / 2}}},
		{"hup late", []kill{{syscall.SIGHUP, n * 9 / 10}}},
		{"kill-9 repeated", []kill{{syscall.SIGKILL, n / 4}, {syscall.SIGKILL, n / 4}, {syscall.SIGHUP, n / 4}}},
	}
	for _, tool := range []string{"copy", "import"} {
		for i, c := range cases {
			t.Run(tool+" "+c.name, func(t *testing.T) {
				table := fmt.Sprintf("Kill%s%d", tool, i)
				checkpoint := filepath.Join(t.TempDir(), "run.checkpoint")
				args := []string{"import", "--to", connString(srv), "--table", table, "--in", file}
				if tool == "copy" {
					args = []string{"copy", "--from", connString(srv), "--table", "KillSrc", "--to", connString(srv), "--to-table", table}
				}
				args = append(args, "--checkpoint", checkpoint, "--progress-interval", "10ms")
				run := args
				for _, k := range c.kills {
					out := killTool(t, run, checkpoint, k.at, k.sig)
					noSecrets(t, "the killed run", out, key)
					run = append(args, "--resume")
				}
				partial := sdkCount(t, svc.NewClient(table))
				st, stdout, errOut := runTool(t, 5*time.Minute, nil, run...)
				if st != 0 {
					t.Fatalf("the resumed run (after %d of %d entities were written): status %d: %s", partial, n, st, errOut)
				}
				noSecrets(t, "the resumed run", stdout+errOut, key)
				if _, err := os.Stat(checkpoint); !os.IsNotExist(err) {
					t.Errorf("the finished run left its checkpoint: %v", err)
				}
				countNumbered(t, svc.NewClient(table), n)
				t.Logf("%d of %d entities written before the resume; %s", partial, n, lastLine(errOut))
			})
		}
	}
}

// An entity the target held before the job began — here the very entity the source
// has — is still a conflict in --mode insert, for the first run and for its resume: the
// resume never takes the target's entities for its own unless they were written since
// the job began.
func TestTransferResumeKeepsConflicts(t *testing.T) {
	srv := startOwnServer(t)
	svc := newServiceClient(t, srv)
	dir := t.TempDir()
	file := writeNumbered(t, dir, 3000, 3)
	tc, name := newTable(t, svc)
	// The same entity as record 1500 of the file, written before the job.
	fillEntities(t, tc, []string{`{"PartitionKey":"p0000","RowKey":"r000001500","N@odata.type":"Edm.Int64","N":"1500","Pad":"abcdefghijklmnopqrstuvwxyz0123456789"}`})
	time.Sleep(3 * time.Second) // older than the job's start, by more than the clock margin
	args := []string{"import", "--to", connString(srv), "--table", name, "--in", file, "--checkpoint", filepath.Join(dir, "c.checkpoint")}
	want := `PartitionKey "p0000", RowKey "r000001500": EntityAlreadyExists`
	st, _, errOut := runTool(t, time.Minute, nil, args...)
	if st != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("first run: status %d, stderr %q; want 1 and %q", st, errOut, want)
	}
	st, _, errOut = runTool(t, time.Minute, nil, append(args, "--resume")...)
	if st != 1 || !strings.Contains(errOut, want) || !strings.Contains(errOut, "before this job began") {
		t.Fatalf("resumed run: status %d, stderr %q; want 1 and %q, held before this job began", st, errOut, want)
	}
}
