package e2e

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
)

// On a terminal the import draws a progress bar, redrawn in place (carriage return,
// erase to the end of the line) with a percentage and an ETA as the count grows, and ends
// with the summary line; piped, the same import prints plain lines and the summary with
// no control character at all.
func TestTransferProgress(t *testing.T) {
	const n = 60_000
	srv := startOwnServer(t)
	file := writeNumbered(t, t.TempDir(), n, 16)

	t.Run("terminal", func(t *testing.T) {
		cmd := exec.Command(binaryPath, "import", "--to", connString(srv), "--table", "Tty", "--in", file)
		cmd.Env = filterEnv(os.Environ())
		cmd.Dir = t.TempDir()
		ptmx, tty, err := pty.Open()
		if err != nil {
			t.Fatalf("pty: %v", err)
		}
		defer ptmx.Close()
		if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 100}); err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = tty
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		tty.Close()
		outc := make(chan []byte)
		go func() {
			b, _ := io.ReadAll(ptmx) // ends with EIO once the child closes the terminal
			outc <- b
		}()
		done := make(chan error)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("import: %v", err)
			}
		case <-time.After(2 * time.Minute):
			cmd.Process.Kill()
			t.Fatal("import did not finish")
		}
		// The terminal turns "\n" into "\r\n" (ONLCR); undo that to see the redraws.
		out := strings.ReplaceAll(string(<-outc), "\r\n", "\n")
		frames := strings.Split(out, "\r")
		bars := regexp.MustCompile(`^\[#*-*\] +(\d+)% ([\d,]+) entities +[\d,]+/s +\d+:\d\d(  ETA \d+:\d\d)?\x1b\[K$`)
		var counts []string
		for _, f := range frames {
			if m := bars.FindStringSubmatch(f); m != nil {
				counts = append(counts, m[2])
			}
		}
		if len(counts) < 2 || counts[0] == counts[len(counts)-1] {
			t.Errorf("the bar was not redrawn with a growing count (%d bars: %v); output:\n%q", len(counts), counts, out)
		}
		if !strings.Contains(out, "ETA ") {
			t.Errorf("the bar never shows an ETA:\n%q", out)
		}
		last := strings.TrimRight(frames[len(frames)-1], "\r\n")
		if !regexp.MustCompile(`^\x1b\[Kimported 60,000 entities \([\d.]+ MiB\) in [\d.]+m?s, [\d,]+/s; 0 errors$`).MatchString(strings.TrimLeft(last, "\n")) {
			t.Errorf("the output does not end with the summary: %q", last)
		}
		if stdout.Len() != 0 {
			t.Errorf("stdout: %q", stdout.String())
		}
	})

	t.Run("piped", func(t *testing.T) {
		st, stdout, stderr := runTool(t, 2*time.Minute, nil, "import", "--to", connString(srv), "--table", "Piped", "--in", file, "--progress-interval", "50ms")
		if st != 0 {
			t.Fatalf("import: status %d: %s", st, stderr)
		}
		for i, c := range []byte(stderr) {
			if c < 0x20 && c != '\n' || c == 0x7f {
				t.Fatalf("control character %#x at %d in piped output:\n%q", c, i, stderr)
			}
		}
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if len(lines) < 2 || !regexp.MustCompile(`^[\d,]+/60,000 entities \(\d+%\), [\d,]+/s, elapsed \d+:\d\d`).MatchString(lines[0]) {
			t.Errorf("no plain progress line:\n%s", stderr)
		}
		if !strings.HasPrefix(lines[len(lines)-1], "imported 60,000 entities") {
			t.Errorf("no summary:\n%s", stderr)
		}
		if stdout != "" {
			t.Errorf("stdout: %q", stdout)
		}
	})

	t.Run("quiet", func(t *testing.T) {
		st, stdout, stderr := runTool(t, 2*time.Minute, nil, "import", "--to", connString(srv), "--table", "Quiet", "--in", file, "--quiet")
		if st != 0 || stdout != "" || stderr != "" {
			t.Errorf("import --quiet: status %d, stdout %q, stderr %q", st, stdout, stderr)
		}
	})
}
