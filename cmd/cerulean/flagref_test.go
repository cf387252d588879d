package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var updateFlagReference = flag.Bool("update", false, "rewrite the flag reference of docs/configuration.md from serveFlags()")

const (
	flagsBegin = "<!-- flags:begin -->\n"
	flagsEnd   = "<!-- flags:end -->"
)

// TestFlagReference: the flag table of docs/configuration.md is what flagReference renders
// from serveFlags(), so the manual names every flag of cerulean serve with its environment
// variable, default and meaning as --help shows them. -update rewrites it.
func TestFlagReference(t *testing.T) {
	// Defaults come from the environment: render them as they are with none set.
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "CERULEAN_") {
			t.Setenv(name, "") // restored when the test ends
			os.Unsetenv(name)
		}
	}
	fs, _, err := serveFlags()
	if err != nil {
		t.Fatal(err)
	}
	want, err := flagReference(fs)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "docs", "configuration.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	i := strings.Index(page, flagsBegin)
	j := strings.Index(page, flagsEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q line followed by a %q line to hold the flag reference", path, strings.TrimSpace(flagsBegin), flagsEnd)
	}
	got := page[i+len(flagsBegin) : j]
	if got == want {
		return
	}
	if *updateFlagReference {
		if err := os.WriteFile(path, []byte(page[:i+len(flagsBegin)]+want+page[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the flag reference of %s", path)
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	n := 0
	for n < len(gl) && n < len(wl) && gl[n] == wl[n] {
		n++
	}
	line := func(l []string) string {
		if n < len(l) {
			return l[n]
		}
		return "(the end)"
	}
	t.Fatalf("the flag reference of docs/configuration.md is not what serveFlags() defines; run\n"+
		"\tgo test ./cmd/cerulean -run TestFlagReference -update\n"+
		"to rewrite it (or go generate ./cmd/cerulean). First difference, line %d of the table:\n page: %s\n want: %s",
		n+1, line(gl), line(wl))
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[string]string{"0s": "0", "1s": "1s", "30s": "30s", "5m0s": "5m", "1m30s": "1m30s", "2h0m0s": "2h", "1h0m30s": "1h0m30s", "500ms": "500ms"} {
		p, err := time.ParseDuration(d)
		if err != nil {
			t.Fatal(err)
		}
		if got := shortDuration(p); got != want {
			t.Errorf("shortDuration(%s) = %s, want %s", d, got, want)
		}
	}
}
