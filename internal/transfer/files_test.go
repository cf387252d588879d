package transfer

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// CountLines counts entity lines: not blank lines, not a table's settings lines, and a
// last line without its newline.
func TestCountLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.jsonl")
	doc := `{"odata.table":"ev","odata.settings":{"Elastic":true}}` + "\n" +
		`{"PartitionKey":"p","RowKey":"odata.settings"}` + "\n  \n\n" +
		`{"odata.settings":{"Elastic":false}}` + "\n" +
		`{"PartitionKey":"p","RowKey":"2","S":"\"odata.settings\":"}`
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := CountLines(path); err != nil || n != 2 {
		t.Errorf("CountLines: %d, %v; want 2", n, err)
	}
}

// A checkpoint goes beside a regular file (its symbolic links resolved), and never
// beside anything else: /dev/null, a link to it, a directory.
func TestDefaultCheckpoint(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "data.jsonl")
	os.WriteFile(file, nil, 0o644)
	link := filepath.Join(dir, "link.jsonl")
	os.Symlink(file, link)
	null := filepath.Join(dir, "null")
	os.Symlink(os.DevNull, null)
	real, _ := filepath.EvalSymlinks(file)
	for in, want := range map[string]string{file: real + ".checkpoint", link: real + ".checkpoint", os.DevNull: "", null: "", dir: "", "-": ""} {
		got := DefaultCheckpoint("import", "job", in)
		if want == "" {
			if filepath.Dir(got) != "." {
				t.Errorf("DefaultCheckpoint beside %s = %s, want one in the current directory", in, got)
			}
		} else if got != want {
			t.Errorf("DefaultCheckpoint beside %s = %s, want %s", in, got, want)
		}
	}
}

// TestInterruptsTwice: a signal that comes again after a stop and after release (as
// timeout(1) sends one to the command and to its process group) does not kill the
// command: it ends with its own status. The signals go to a child process, this test
// binary run again, so that a failure kills that child and not the test.
func TestInterruptsTwice(t *testing.T) {
	if os.Getenv("CERULEAN_TEST_INTERRUPTS_CHILD") == "1" {
		_, stop, release := Interrupts(context.Background())
		_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
		select {
		case <-stop:
		case <-time.After(10 * time.Second):
			os.Exit(3)
		}
		release()
		_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
		time.Sleep(200 * time.Millisecond)
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestInterruptsTwice$")
	cmd.Env = append(os.Environ(), "CERULEAN_TEST_INTERRUPTS_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the child after a stop, release and a second SIGINT: %v (want exit status 0)\n%s", err, out)
	}
}
