package transfer

import (
	"os"
	"path/filepath"
	"testing"
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
