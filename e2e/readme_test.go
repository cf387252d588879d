package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readmeSnippets returns the fenced code blocks of the README's "Connecting" section by
// language tag, so the snippets users copy are the ones this test runs.
func readmeSnippets(t *testing.T, root string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "\n## Connecting")
	if start < 0 {
		t.Fatal(`README has no "## Connecting" section`)
	}
	section := text[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	out := map[string]string{}
	for rest := section; ; {
		i := strings.Index(rest, "\n```")
		if i < 0 {
			break
		}
		rest = rest[i+4:]
		lang, body, _ := strings.Cut(rest, "\n")
		j := strings.Index(body, "\n```")
		if j < 0 {
			t.Fatal("README: unterminated code block in Connecting")
		}
		if lang != "" {
			out[lang] = body[:j+1]
		}
		rest = body[j+4:]
	}
	return out
}

// TestReadmeConnectSnippets runs the README's Go, JavaScript, Python and Azure CLI snippets
// against a live server: each must list a table created for the test.
func TestReadmeConnectSnippets(t *testing.T) {
	root := compatRepoRoot(t)
	snips := readmeSnippets(t, root)
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	name := tableName(t)
	if _, err := svc.CreateTable(ctx(t), name, nil); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "CONN="+compatConnectionString(srv), "AZURE_CORE_COLLECT_TELEMETRY=no")

	check := func(t *testing.T, lang string) string {
		t.Helper()
		s, ok := snips[lang]
		if !ok {
			t.Fatalf("README Connecting has no %s block", lang)
		}
		return s
	}
	runSnippet := func(t *testing.T, dir, tool string, args ...string) {
		t.Helper()
		c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(c, tool, args...)
		cmd.Dir = dir
		cmd.Env = append(env, "AZURE_CONFIG_DIR="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", tool, args, err, out)
		}
		if !strings.Contains(string(out), name) {
			t.Fatalf("the snippet's output does not list table %s:\n%s", name, out)
		}
	}

	t.Run("Go", func(t *testing.T) {
		dir, err := os.MkdirTemp(root, "_readme_go")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		prog := check(t, "go") // a whole program
		if !strings.HasPrefix(prog, "package main") {
			prog = "package main\n\nimport (\n\t\"context\"\n\t\"fmt\"\n\t\"log\"\n\t\"os\"\n\n\t\"github.com/Azure/azure-sdk-for-go/sdk/data/aztables\"\n)\n\nfunc main() {\n" + prog + "}\n"
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(prog), 0o644); err != nil {
			t.Fatal(err)
		}
		runSnippet(t, root, "go", "run", "./"+filepath.Base(dir))
	})
	t.Run("JavaScript", func(t *testing.T) {
		node, err := exec.LookPath("node")
		if err != nil {
			compatUnavailable(t, "node is not installed")
		}
		dir := filepath.Join(root, "compat", "js")
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "@azure", "data-tables")); err != nil {
			compatUnavailable(t, "compat/js/node_modules is missing (cd compat/js && npm ci)")
		}
		f, err := os.CreateTemp(dir, "_readme_*.mjs")
		if err != nil {
			t.Fatal(err)
		}
		defer os.Remove(f.Name())
		if _, err := f.WriteString(check(t, "js")); err != nil {
			t.Fatal(err)
		}
		f.Close()
		runSnippet(t, dir, node, filepath.Base(f.Name()))
	})
	t.Run("Python", func(t *testing.T) {
		if err := exec.Command(debianPython, "-c", "import azure.data.tables").Run(); err != nil {
			compatUnavailable(t, "%s cannot import azure.data.tables (apt-get install python3-azure)", debianPython)
		}
		f := filepath.Join(t.TempDir(), "readme.py")
		if err := os.WriteFile(f, []byte(check(t, "python")), 0o644); err != nil {
			t.Fatal(err)
		}
		runSnippet(t, root, debianPython, f)
	})
	t.Run("AzureCLI", func(t *testing.T) {
		if _, err := exec.LookPath("az"); err != nil {
			compatUnavailable(t, "az is not installed (apt-get install azure-cli)")
		}
		runSnippet(t, root, "bash", "-c", check(t, "sh"))
	})
}

// TestMarkdownFences checks every Markdown page of the repository for a code block that is
// never closed, or that holds a section heading: rendered, such a block swallows the text
// after it (the README once hid "Read consistency" and "Bulk writes" inside a Python block
// that lacked its closing fence).
func TestMarkdownFences(t *testing.T) {
	root := compatRepoRoot(t)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, p := range fenceProblems(string(b)) {
			t.Errorf("%s: %s", rel, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fenceProblems lists a page's unclosed code blocks and the section headings inside code
// blocks, by line. A fence is a line of three or more backticks, indented or not (a block
// inside a list item); a block closes at a fence of at least its opener's length with no
// info string, as CommonMark says.
func fenceProblems(text string) []string {
	var problems []string
	open, opener := 0, 0 // the open block's first line and fence length; 0 outside
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		n := len(trimmed) - len(strings.TrimLeft(trimmed, "`"))
		switch {
		case open == 0 && n >= 3:
			open, opener = i+1, n
		case open != 0 && n >= opener && strings.TrimSpace(trimmed[n:]) == "":
			open = 0
		case open != 0 && (strings.HasPrefix(line, "## ") || strings.HasPrefix(line, "### ")):
			problems = append(problems, fmt.Sprintf("line %d: the heading %q is inside the code block opened at line %d", i+1, line, open))
		}
	}
	if open != 0 {
		problems = append(problems, fmt.Sprintf("the code block opened at line %d is never closed", open))
	}
	return problems
}
