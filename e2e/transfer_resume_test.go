package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// writeNumbered writes a JSON Lines file of n entities over parts partitions, each with
// its number N, and returns its path.
func writeNumbered(t testing.TB, dir string, n, parts int) string {
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("numbered-%d.jsonl", n))
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := 0; i < n; i++ {
		fmt.Fprintf(w, `{"PartitionKey":"p%04d","RowKey":"r%09d","N@odata.type":"Edm.Int64","N":"%d","Pad":"%s"}`+"\n", i%parts, i, i, "abcdefghijklmnopqrstuvwxyz0123456789")
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return path
}

// countNumbered lists a table of writeNumbered entities through the SDK and fails
// unless it holds each of 0..n-1 exactly once, under its own key.
func countNumbered(t testing.TB, tc *aztables.Client, n int) {
	t.Helper()
	seen := make([]bool, n)
	sel := "RowKey,N"
	p := tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Select: &sel})
	got, bad := 0, 0
	for p.More() {
		page, err := p.NextPage(ctx(t))
		if err != nil {
			t.Fatalf("ListEntities: %v", err)
		}
		for _, raw := range page.Entities {
			var e struct {
				RowKey string
				N      string
			}
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatalf("entity %s: %v", raw, err)
			}
			i, err := strconv.Atoi(e.N)
			if err != nil || i < 0 || i >= n || seen[i] || e.RowKey != fmt.Sprintf("r%09d", i) {
				if bad++; bad < 5 {
					t.Errorf("unexpected entity %s", raw)
				}
				continue
			}
			seen[i] = true
			got++
		}
	}
	if got != n {
		t.Errorf("%d of %d entities, %d unexpected", got, n, bad)
	}
}

// Interrupting a 200,000-entity copy with SIGINT once its progress shows, then running
// the command it prints (the same with --resume), gives every entity exactly once; the
// interrupted run exits 1 after writing its checkpoint, the resumed one 0 and removes it.
func TestTransferCopyInterruptResume(t *testing.T) {
	const n = 200_000
	src, dst := startOwnServer(t), startOwnServer(t)
	dir := t.TempDir()
	file := writeNumbered(t, dir, n, 64)
	began := time.Now()
	if st, _, errOut := runTool(t, 5*time.Minute, nil, "import", "--to", connString(src), "--table", "Big", "--in", file, "--mode", "insert"); st != 0 {
		t.Fatalf("import: status %d: %s", st, errOut)
	} else {
		t.Logf("import of %d entities: %v (%.0f entities/s); %s", n, time.Since(began), n/time.Since(began).Seconds(), lastLine(errOut))
	}

	checkpoint := filepath.Join(dir, "copy.checkpoint")
	args := []string{"copy", "--from", connString(src), "--to", connString(dst), "--table", "Big", "--checkpoint", checkpoint, "--progress-interval", "100ms"}
	cmd := exec.Command(binaryPath, args...)
	cmd.Env = filterEnv(os.Environ())
	cmd.Dir = dir
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt once the progress lines show a quarter of the table copied: batches of
	// many partitions are then in flight.
	deadline := time.Now().Add(2 * time.Minute)
	for progressCount(stderr.String()) < n/4 {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no progress line: %q", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("interrupted copy: %v, want exit status 1; stderr:\n%s", err, stderr.String())
	}
	out := stderr.String()
	if !strings.Contains(out, "--resume") || !strings.Contains(out, checkpoint) {
		t.Fatalf("the interrupted copy does not say how to resume:\n%s", out)
	}
	cp, err := os.ReadFile(checkpoint)
	if err != nil {
		t.Fatalf("no checkpoint after the interrupt: %v", err)
	}
	partial := sdkCount(t, newServiceClient(t, dst).NewClient("Big"))
	if partial == 0 || partial >= n {
		t.Fatalf("the interrupted copy wrote %d of %d entities: the interrupt came too late or too early", partial, n)
	}
	t.Logf("interrupted after %d entities; checkpoint %s", partial, cp)

	if st, _, errOut := runTool(t, 5*time.Minute, nil, append(args, "--resume")...); st != 0 {
		t.Fatalf("resumed copy: status %d: %s", st, errOut)
	}
	if _, err := os.Stat(checkpoint); !os.IsNotExist(err) {
		t.Errorf("the finished copy left its checkpoint: %v", err)
	}
	countNumbered(t, newServiceClient(t, dst).NewClient("Big"), n)

	// A second --resume has nothing to resume: a clear error, status 1.
	if st, _, errOut := runTool(t, time.Minute, nil, append(args, "--resume")...); st != 1 || !strings.Contains(errOut, "no checkpoint") {
		t.Errorf("resume without a checkpoint: status %d, %q", st, errOut)
	}
}

var progressLine = regexp.MustCompile(`^([\d,]+)(/[\d,]+ entities \(\d+%\)| entities), `)

// progressCount is the entity count of the last complete plain progress line
// ("12,345 entities, …").
func progressCount(s string) int {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 2; i >= 0; i-- {
		if m := progressLine.FindStringSubmatch(lines[i]); m != nil {
			c, _ := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
			return c
		}
	}
	return 0
}

// sdkCount counts a table's entities through the SDK.
func sdkCount(t testing.TB, tc *aztables.Client) int {
	t.Helper()
	sel := "RowKey"
	p := tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Select: &sel})
	n := 0
	for p.More() {
		page, err := p.NextPage(ctx(t))
		if err != nil {
			t.Fatalf("ListEntities: %v", err)
		}
		n += len(page.Entities)
	}
	return n
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// lockedBuffer is a bytes.Buffer a child process writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// interruptOnce runs the tool with args until its progress lines show at least at
// entities, sends SIGINT, and checks it exits 1 naming the way to resume.
func interruptOnce(t *testing.T, args []string, at int) {
	t.Helper()
	cmd := exec.Command(binaryPath, args...)
	cmd.Env = filterEnv(os.Environ())
	cmd.Dir = t.TempDir()
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); progressCount(stderr.String()) < at; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no progress to %d: %q", at, stderr.String())
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "--resume") {
		t.Fatalf("interrupted run: %v, want exit status 1 and a resume command; stderr:\n%s", err, stderr.String())
	}
}

// An interrupted insert import resumes without failing on the entities the first run
// wrote (those in flight at the interrupt are re-sent as upserts), and ends with every
// entity exactly once; an interrupted JSON Lines export resumes into a file identical
// to an uninterrupted export.
func TestTransferImportExportResume(t *testing.T) {
	const n = 100_000
	srv := startOwnServer(t)
	dir := t.TempDir()
	file := writeNumbered(t, dir, n, 32)
	imp := []string{"import", "--to", connString(srv), "--table", "Resumed", "--in", file, "--mode", "insert", "--progress-interval", "20ms", "--workers", "2"}
	interruptOnce(t, imp, n/5)
	if _, err := os.Stat(file + ".checkpoint"); err != nil {
		t.Fatalf("no checkpoint beside the input: %v", err)
	}
	if st, _, errOut := runTool(t, 2*time.Minute, nil, append(imp, "--resume")...); st != 0 {
		t.Fatalf("resumed import: status %d: %s", st, errOut)
	}
	countNumbered(t, newServiceClient(t, srv).NewClient("Resumed"), n)

	whole := filepath.Join(dir, "whole.jsonl")
	if st, _, errOut := runTool(t, 2*time.Minute, nil, "export", "--from", connString(srv), "--table", "Resumed", "--out", whole, "--quiet"); st != 0 {
		t.Fatalf("export: status %d: %s", st, errOut)
	}
	part := filepath.Join(dir, "part.jsonl")
	exp := []string{"export", "--from", connString(srv), "--table", "Resumed", "--out", part, "--progress-interval", "20ms"}
	interruptOnce(t, exp, n/5)
	if st, _, errOut := runTool(t, 2*time.Minute, nil, append(exp, "--resume")...); st != 0 {
		t.Fatalf("resumed export: status %d: %s", st, errOut)
	}
	a, _ := os.ReadFile(whole)
	b, _ := os.ReadFile(part)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Errorf("the resumed export (%d bytes) differs from the whole one (%d bytes)", len(b), len(a))
	}
}
