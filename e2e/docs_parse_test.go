package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"
)

// Unit tests of TestDocs' reading of Markdown (docs_markdown_test.go) and of its runner's
// parts that need no server.

func problemText(ps []docProblem) string {
	var out []string
	for _, p := range ps {
		out = append(out, strconv.Itoa(p.Line)+": "+p.Msg)
	}
	return strings.Join(out, "\n")
}

func TestDocsMarkdownFences(t *testing.T) {
	page := parseDocPage("p.md", "# T\n"+
		"\n"+
		"```go\n"+ // 3
		"package main\n"+
		"```\n"+
		"\n"+
		"1. A list item:\n"+
		"\n"+
		"   ```sh\n"+ // 9: indented, in a list
		"   echo one\n"+
		"     echo two\n"+
		"   ```\n"+
		"\n"+
		"~~~~ python extra words\n"+ // 14: tildes, an info string with more words
		"```\n"+ // not a closing fence: other character
		"~~~\n"+ // too short to close
		"~~~~~\n"+ // closes
		"````\n"+ // 18: four backticks
		"```\n"+ // too short
		"````` \n"+ // closes (trailing blank allowed)
		"``` not `a fence` ```\n"+ // an info string with backticks: text
		"```\n"+ // 22: empty info string
		"x\n"+
		"```\n")
	if len(page.Problems) > 0 {
		t.Fatalf("problems: %s", problemText(page.Problems))
	}
	type want struct {
		line   int
		lang   string
		text   string
		indent int
	}
	wants := []want{
		{3, "go", "package main\n", 0},
		{9, "sh", "echo one\n  echo two\n", 3},
		{14, "python", "```\n~~~\n", 0},
		{18, "", "```\n", 0},
		{22, "", "x\n", 0},
	}
	if len(page.Blocks) != len(wants) {
		t.Fatalf("%d blocks, want %d", len(page.Blocks), len(wants))
	}
	for i, w := range wants {
		b := page.Blocks[i]
		if b.Line != w.line || b.Lang != w.lang || b.Text != w.text || b.Indent != w.indent {
			t.Errorf("block %d: line %d lang %q indent %d text %q; want line %d lang %q indent %d text %q",
				i, b.Line, b.Lang, b.Indent, b.Text, w.line, w.lang, w.indent, w.text)
		}
	}
}

// TestDocsMarkdownUnclosed: the README once hid "Read consistency" and "Bulk writes"
// inside a Python block that lacked its closing fence.
func TestDocsMarkdownUnclosed(t *testing.T) {
	page := parseDocPage("README.md", "## Session tokens\n"+
		"\n"+
		"```python\n"+ // 3
		"client = TableClient.from_connection_string(conn, \"orders\")\n"+
		"\n"+
		"### Read consistency\n"+ // 6
		"\n"+
		"Text.\n"+
		"\n"+
		"```sh\n"+ // 10: read as the python block's closing fence? No: it has an info string
		"echo x\n"+
		"```\n"+ // 12: closes the python block
		"\n"+
		"## Bulk writes\n"+ // 14: outside again
		"\n"+
		"```sh\n"+ // 16: never closed
		"echo y\n")
	got := problemText(page.Problems)
	for _, w := range []string{
		`6: the heading "### Read consistency" is inside the code block opened at line 3`,
		"16: the code block opened here is never closed",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("problems lack %q:\n%s", w, got)
		}
	}
	if len(page.Blocks) != 1 || page.Blocks[0].Line != 3 {
		t.Errorf("blocks %v, want only the python block at line 3 (an unclosed block is not run)", page.Blocks)
	}
	if !page.Anchors["bulk-writes"] || page.Anchors["read-consistency"] {
		t.Errorf("anchors %v: want bulk-writes and not read-consistency (inside a block)", page.Anchors)
	}
}

func TestDocsMarkdownDirectives(t *testing.T) {
	page := parseDocPage("p.md", "text\n"+
		"<!-- doctest: skip: needs a real Azure account; and a credit card -->\n"+ // 2
		"```sh\n"+
		"az login\n"+
		"```\n"+
		"<!-- doctest: postgres; server: --engine postgres --elastic-tables 'sess*' --postgres-url postgres://x/y -->\n"+ // 6
		"<!-- another comment is allowed between -->\n"+
		"<!-- doctest: env: A=1 \"B=two words\" C=$CONN; exit: 2 ; files: compat/js/bulk.mjs a/b.txt -->\n"+
		"<!-- doctest: before: cerulean table create a; cerulean table create b -->\n"+
		"<!-- doctest: before: echo second -->\n"+
		"```sh\n"+ // 11
		"exit 2\n"+
		"```\n"+
		"<!-- doctest: own-server -->\n"+
		"```sh\n"+ // 15
		"```\n"+
		"<!-- doctest: output -->\n"+
		"```json\n"+ // 18
		"{}\n"+
		"```\n")
	if len(page.Problems) > 0 {
		t.Fatalf("problems: %s", problemText(page.Problems))
	}
	b := page.Blocks
	if len(b) != 4 {
		t.Fatalf("%d blocks, want 4", len(b))
	}
	if b[0].Dir.Skip != "needs a real Azure account; and a credit card" || b[0].DirLine != 2 {
		t.Errorf("skip %q at line %d", b[0].Dir.Skip, b[0].DirLine)
	}
	d := b[1].Dir
	if !d.Postgres || !d.HasServer || !slices.Equal(d.Server, []string{"--engine", "postgres", "--elastic-tables", "sess*", "--postgres-url", "postgres://x/y"}) {
		t.Errorf("postgres %v server %v %q", d.Postgres, d.HasServer, d.Server)
	}
	if !slices.Equal(d.Env, []string{"A=1", "B=two words", "C=$CONN"}) || !d.HasExit || d.Exit != 2 {
		t.Errorf("env %q exit %v %d", d.Env, d.HasExit, d.Exit)
	}
	if !slices.Equal(d.Files, []string{"compat/js/bulk.mjs", "a/b.txt"}) {
		t.Errorf("files %q", d.Files)
	}
	if !slices.Equal(d.Before, []string{"cerulean table create a; cerulean table create b", "echo second"}) {
		t.Errorf("before %q", d.Before)
	}
	if b[1].DirLine != 6 || b[1].Line != 11 {
		t.Errorf("directives at %d, block at %d", b[1].DirLine, b[1].Line)
	}
	if !b[2].Dir.OwnServer || !b[3].Dir.Output {
		t.Errorf("own-server %v, output %v", b[2].Dir.OwnServer, b[3].Dir.Output)
	}

	for _, c := range []struct{ comment, want string }{
		{"skip", "skip needs a REASON"},
		{"skip:", "skip needs a REASON"},
		{"output; skip: x", "skip and output together"},
		{"output; exit: 1", "exit on a block that is not run"},
		{"exit: -1", "not an exit status"},
		{"exit: 1; exit: 2", "exit given twice"},
		{"env: NOVALUE", `"NOVALUE" is not NAME=VALUE`},
		{"server: 'unclosed", "unclosed '"},
		{"outptu", `unknown directive "outptu"`},
		{"output: yes", "output takes no argument"},
		{"Skip: x", "cannot read"},
	} {
		p := parseDocPage("p.md", "<!-- doctest: "+c.comment+" -->\n```sh\n```\n")
		if len(p.Blocks) != 1 || !strings.Contains(strings.Join(p.Blocks[0].Problems, "\n"), c.want) {
			var got []string
			if len(p.Blocks) == 1 {
				got = p.Blocks[0].Problems
			}
			t.Errorf("%q: problems %q, want one with %q", c.comment, got, c.want)
		}
	}

	// A directive separated from its block, one on two lines, one at the end of the page.
	p := parseDocPage("p.md", "<!-- doctest: output -->\n\n```text\n```\n<!-- doctest: skip:\nreason -->\n```text\n```\n<!-- doctest: output -->\n")
	got := problemText(p.Problems)
	for _, w := range []string{"1: " + docStrayComment, "5: a doctest comment must be one line", "9: " + docStrayComment} {
		if !strings.Contains(got, w) {
			t.Errorf("problems lack %q:\n%s", w, got)
		}
	}
}

func TestDocsMarkdownSlugs(t *testing.T) {
	for _, c := range []struct{ heading, slug string }{
		{"Bulk writes", "bulk-writes"},
		{"Data tools: export, import, copy", "data-tools-export-import-copy"},
		{"The `--elastic-tables` flag", "the---elastic-tables-flag"},
		{"HTTPS (TLS)", "https-tls"},
		{"§15.8 Table settings", "158-table-settings"},
		{"What's *new* in **v2**", "whats-new-in-v2"},
		{"A [link](other.md#x) here", "a-link-here"},
		{"snake_case_name", "snake_case_name"},
		{"Élan — ünïcode", "élan--ünïcode"},
		{"C# and .NET", "c-and-net"},
		{"  Trailing hashes ##", "trailing-hashes"},
	} {
		p := parseDocPage("p.md", "## "+c.heading+"\n")
		if !p.Anchors[c.slug] || len(p.Anchors) != 1 {
			t.Errorf("%q: anchors %v, want %q", c.heading, p.Anchors, c.slug)
		}
	}
	p := parseDocPage("p.md", "# Title\n## Examples\n### Examples\n#### Examples\nSetext\n======\n\n"+
		"<a id=\"custom\"></a>\n<a name='old-name'></a>\n```\n## Not a heading\n<a id=\"in-code\">\n```\n#not-a-heading\n")
	want := []string{"custom", "examples", "examples-1", "examples-2", "old-name", "setext", "title"}
	var got []string
	for a := range p.Anchors {
		got = append(got, a)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("anchors %q, want %q", got, want)
	}
}

func TestDocsMarkdownLinks(t *testing.T) {
	text := "# Page\n" +
		"See [bulk](bulk.md#bulk-writes), [missing](nope.md), ![img](console/shot.png \"title\").\n" + // 2
		"`[in code](code.md)` and ``[also `code`](code.md)`` and [web](https://example.com/x) <https://auto.example>.\n" + // 3
		"```\n[in a block](block.md)\n```\n" + // 4-6
		"[anchor here](#page) [bad anchor](#pgae) [bad](bulk.md#bulk-write) [go](../client/x.go#L10)\n" + // 7
		"[up](../../etc/passwd) [mail](mailto:a@b.c) [root](/docs/bulk.md) [spaced](<bulk.md> 'a title')\n" + // 8
		"<img src=\"console/missing.png\"> [ref]: bulk.md#nowhere\n" + // 9
		"[ref2]: bulk.md#nowhere\n" + // 10
		"[parens](bulk.md#a-(b)) [esc](bulk%2Emd)\n" // 11
	p := parseDocPage("docs/page.md", text)
	fsys := fstest.MapFS{
		"docs/page.md":          {Data: []byte(text)},
		"docs/bulk.md":          {Data: []byte("## Bulk writes\n## A (b)\n")},
		"docs/console/shot.png": {Data: []byte("png")},
		"client/x.go":           {Data: []byte("package client")},
		"README.md":             {Data: []byte("# R")},
	}
	anchors := func(file string) (map[string]bool, error) {
		b, err := fsys.ReadFile(file)
		if err != nil {
			return nil, err
		}
		return parseDocPage(file, string(b)).Anchors, nil
	}
	problems, external := checkDocLinks(p, fsys, anchors)
	got := problemText(problems)
	wants := []string{
		`2: link "nope.md": docs/nope.md does not exist`,
		`7: link "#pgae": docs/page.md has no heading or <a id> with the anchor #pgae (did you mean #page?)`,
		`7: link "bulk.md#bulk-write": docs/bulk.md has no heading or <a id> with the anchor #bulk-write (did you mean #bulk-writes?)`,
		`8: link "../../etc/passwd": points outside the repository`,
		`9: link "console/missing.png": docs/console/missing.png does not exist`,
		`10: link "bulk.md#nowhere": docs/bulk.md has no heading or <a id> with the anchor #nowhere`,
		`11: link "bulk.md#a-(b)": docs/bulk.md has no heading or <a id> with the anchor #a-(b) (did you mean #a-b?)`,
	}
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("problems lack %q", w)
		}
	}
	if n := len(problems); n != len(wants) {
		t.Errorf("%d problems, want %d:\n%s", n, len(wants), got)
	}
	if external != 2 {
		t.Errorf("external links %d, want 2 (https, mailto; an autolink is not checked)", external)
	}
}

func TestDocsShellWords(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{`--elastic-tables 'sess*' --x "a b" c\ d`, []string{"--elastic-tables", "sess*", "--x", "a b", "c d"}},
		{`--accounts 'a:k==;b:k2'`, []string{"--accounts", "a:k==;b:k2"}},
		{`"q\"uote" ''`, []string{`q"uote`, ""}},
		{"", nil},
	} {
		got, err := shellWords(c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("shellWords(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestDocsCheckJSON(t *testing.T) {
	for _, ok := range []string{"{\"a\": 1}\n", "[1,\n 2]\n", "{\"a\":1}\n{\"b\":2}\n\n", "\"s\""} {
		if err := docCheckJSON(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"{\"a\": 1,}\n", "{\"a\":1}\n{\"b\":\n", "not json", "{\"a\": 1}\n..."} {
		if err := docCheckJSON(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestDocsExec: a block's exit status is reported and what it leaves running is ended.
func TestDocsExec(t *testing.T) {
	dir := t.TempDir()
	res := docExec(dir, os.Environ(), "bash", "-c", "sleep 300 & echo $! > pid; echo out; echo err >&2; exit 4")
	if res.err != nil || res.code != 4 || res.out != "out\nerr\n" {
		t.Fatalf("result %+v", res)
	}
	b, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(st), ") Z ") {
			break // gone, or a zombie
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the block's background process %d is still running", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if res := docExec(dir, os.Environ(), filepath.Join(dir, "nonexistent")); res.err == nil {
		t.Errorf("a missing program: %+v", res)
	}
}

// TestDocsGoBuildErrors: a Go block that does not compile, or does not load (an internal
// package), fails with the page's line; the others are built all the same.
func TestDocsGoBuildErrors(t *testing.T) {
	if os.Getenv("CERULEAN_TEST_ENGINE_ARGS") != "" {
		t.Skip("runs in the first pass of scripts/test (CERULEAN_TEST_ENGINE_ARGS is set)")
	}
	text := "# Go\n" +
		"```go\n" + // 2
		"package main\n" +
		"\n" +
		"func main() { println(undefinedName) }\n" + // 5
		"```\n" +
		"- item\n" +
		"  ```go\n" + // 8
		"  package main\n" +
		"\n" +
		"  import _ \"github.com/ceruleandb/cerulean/internal/server\"\n" + // 11
		"\n" +
		"  func main() {}\n" +
		"  ```\n" +
		"```go\n" + // 15
		"package main\n" +
		"\n" +
		"import \"fmt\"\n" +
		"\n" +
		"func main() { fmt.Println(\"ok\") }\n" +
		"```\n" +
		"```go\n" + // 22
		"fmt.Println(\"a fragment\")\n" +
		"```\n"
	r := &docsRun{repo: compatRepoRoot(t)}
	pp := &docPagePlan{page: parseDocPage("docs/go.md", text), selected: true}
	r.pages = []*docPagePlan{pp}
	r.plan(t, pp)
	r.buildGo(t)
	bs := pp.blocks
	if len(bs) != 4 {
		t.Fatalf("%d blocks", len(bs))
	}
	if !strings.Contains(bs[0].goErr, "docs/go.md:5:23: undefined: undefinedName") {
		t.Errorf("block 1: %q", bs[0].goErr)
	}
	if !strings.Contains(bs[1].goErr, "docs/go.md:11:") || !strings.Contains(bs[1].goErr, "internal package") {
		t.Errorf("block 2: %q", bs[1].goErr)
	}
	if bs[2].goBin == "" || bs[2].goErr != "" {
		t.Errorf("block 3 did not build: %q", bs[2].goErr)
	} else if out, err := docRunProgram(bs[2].goBin); err != nil || out != "ok\n" {
		t.Errorf("block 3 ran: %q %v", out, err)
	}
	if !strings.Contains(bs[3].goErr, "must be a whole program") {
		t.Errorf("block 4: %q", bs[3].goErr)
	}
}

func docRunProgram(name string) (string, error) {
	res := docExec(os.TempDir(), os.Environ(), name)
	return res.out, res.err
}
