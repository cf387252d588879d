package e2e

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runCLI runs the binary with args and returns its exit status and output.
// runTool runs the binary with args, stdin, and a deadline, and returns its exit
// status and output.
func runTool(t *testing.T, d time.Duration, stdin []byte, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(c, binaryPath, args...)
	cmd.Env = filterEnv(os.Environ())
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errb.String()
	} else if err != nil {
		t.Fatalf("cerulean %q: %v", args, err)
	}
	return 0, out.String(), errb.String()
}

func runCLI(t *testing.T, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	return runTool(t, 30*time.Second, nil, args...)
}

// `cerulean help`, -h and --help print the command list; `cerulean help CMD` and `cerulean
// CMD -h` print that command's usage first (its first line names the command) and not the
// list, on stdout with status 0; version and --version print the build; mistakes exit 2
// with a usage on stderr: the command's, or the list for an unknown command.
func TestCommandLineHelp(t *testing.T) {
	const commandList = "cerulean help [command]" // a line of the command list
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		status, out, errOut := runCLI(t, args...)
		if status != 0 || !strings.HasPrefix(out, "Usage:\n") || !strings.Contains(out, commandList) || errOut != "" {
			t.Errorf("cerulean %s: status %d, stdout %q, stderr %q; want the command list", strings.Join(args, " "), status, out, errOut)
		}
	}
	for _, c := range []struct {
		args  []string
		first string // the first line starts so
		flag  string // a flag of the command whose help this is
	}{
		{[]string{"serve", "-h"}, "Usage of cerulean serve", "-max-body-memory"},
		{[]string{"serve", "--help"}, "Usage of cerulean serve", "-slow-request"},
		{[]string{"help", "serve"}, "Usage of cerulean serve", "-addr"},
		{[]string{"bench", "-h"}, "Usage: cerulean bench", "-workers"},
		{[]string{"bench", "--help"}, "Usage: cerulean bench", "-workers"},
		{[]string{"help", "bench"}, "Usage: cerulean bench", "-hot-partition"},
		{[]string{"table", "-h"}, "Usage of cerulean table", "cerulean table create NAME"},
		{[]string{"help", "table"}, "Usage of cerulean table", "-ttl-property"},
		{[]string{"export", "-h"}, "Usage of cerulean export", "-select"},
		{[]string{"help", "import"}, "Usage of cerulean import", "-skip-bad"},
		{[]string{"copy", "--help"}, "Usage of cerulean copy", "-to-table"},
		{[]string{"version", "-h"}, "Usage of cerulean version", "cerulean version"},
		{[]string{"help", "version"}, "Usage of cerulean version", "cerulean version"},
	} {
		status, out, errOut := runCLI(t, c.args...)
		if status != 0 || !strings.HasPrefix(out, c.first) || strings.Contains(out, commandList) || !strings.Contains(out, c.flag) || errOut != "" {
			t.Errorf("cerulean %s: status %d, stdout %d bytes (starts %q: %v, command list %v, %s %v), stderr %q",
				strings.Join(c.args, " "), status, len(out), c.first, strings.HasPrefix(out, c.first), strings.Contains(out, commandList), c.flag, strings.Contains(out, c.flag), errOut)
		}
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		status, out, _ := runCLI(t, args...)
		if status != 0 || !strings.HasPrefix(out, "cerulean github.com/ceruleandb/cerulean ") ||
			!strings.Contains(out, "revision ") || !strings.Contains(out, "go1.") {
			t.Errorf("cerulean %s: status %d, output %q", args[0], status, out)
		}
	}
	for _, args := range [][]string{{"--bogus"}, {"serve", "--bogus"}, {"bench", "--bogus"}, {"frobnicate"},
		{"help", "frobnicate"}, {"serve", "extra"}, {"version", "extra"}, {"serve", "--max-body-memory", "lots"},
		{"serve", "--elastic-tables", "bad_name*"}, {"serve", "--expiry-interval", "0s"}, {"table"}, {"table", "show"},
		{"serve", "--faults", "insert:418"}, {"serve", "--partition-target", "0"}, {"serve", "--faults-seed", "-1"}} {
		status, out, errOut := runCLI(t, args...)
		if status != 2 || out != "" || !strings.Contains(errOut, "Usage") {
			t.Errorf("cerulean %s: status %d, stdout %q, stderr %q; want 2 with the usage on stderr", strings.Join(args, " "), status, out, errOut)
		}
	}
}

// A busy --addr fails before the data directory is created.
func TestBusyAddrCreatesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	data := filepath.Join(t.TempDir(), "data")
	status, _, errOut := runCLI(t, "serve", "--addr", ln.Addr().String(), "--data", data)
	if status != 1 || !strings.Contains(errOut, "address already in use") {
		t.Errorf("busy address: status %d, stderr %q", status, errOut)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("the data directory was created for a server that could not listen (%v)", err)
	}
	// So does a busy diagnostics address (--debug-addr), before anything is created.
	status, _, errOut = runCLI(t, "serve", "--addr", "127.0.0.1:0", "--debug-addr", ln.Addr().String(), "--data", data)
	if status != 1 || !strings.Contains(errOut, "debug address") || !strings.Contains(errOut, "address already in use") {
		t.Errorf("busy debug address: status %d, stderr %q", status, errOut)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("the data directory was created for a server whose debug address was busy (%v)", err)
	}
}

// A second server on the same data directory says another process holds it.
func TestDataDirInUse(t *testing.T) {
	if strings.Contains(os.Getenv("CERULEAN_TEST_ENGINE_ARGS"), "postgres") {
		t.Skip("the data directory is the pebble engine's")
	}
	srv := startServer(t)
	status, _, errOut := runCLI(t, "serve", "--addr", "127.0.0.1:0", "--data", srv.DataDir)
	if status != 1 || !strings.Contains(errOut, "in use by another process") || !strings.Contains(errOut, srv.DataDir) {
		t.Errorf("second server on %s: status %d, stderr %q; want a message that another process holds the directory", srv.DataDir, status, errOut)
	}
}
