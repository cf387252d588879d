package e2e

// TestDocs runs the manual: every fenced code block of README.md and docs/**/*.md, so that
// what users copy works as shown. It also fails on an unclosed fence, a heading inside a
// block, a relative link to a file that does not exist and an #anchor no heading (GitHub's
// slug, -1, -2 for repeats) or <a id>/<a name> gives; external links are not fetched.
//
//	go test ./e2e -run TestDocs                          every page
//	go test ./e2e -run 'TestDocs/docs-bulk.md'           one page (only its Go blocks are built)
//	go test ./e2e -run 'TestDocs/docs-bulk.md/line-120'  one block
//
// A block runs by its language: go (a whole program, built up front with every other Go
// block in one temporary module that requires this one through a replace: it may import
// client and the module's dependencies, not internal/), js (main.mjs beside a node_modules
// link to compat/js/node_modules), python (Debian's /usr/bin/python3 with python3-azure),
// sh and bash (bash -euo pipefail; az and curl available). Any other language must be
// marked. The HTML comments on the lines directly above a fence mark it; one comment may
// hold several directives separated by ';' (skip: and before: take the rest of it):
//
//	<!-- doctest: skip: REASON -->     not run; the reason is reported
//	<!-- doctest: output -->           the output of the block above; not run (json: must parse)
//	<!-- doctest: server: FLAGS -->    from this block on, the page server is a fresh one with FLAGS
//	                                   (with --dev-issuer: over HTTPS; see below)
//	<!-- doctest: own-server -->       the block starts its own cerulean (see below)
//	<!-- doctest: postgres -->         postgres:// URLs are the page's fresh database
//	<!-- doctest: files: PATH... -->   repository files copied into the working directory first
//	<!-- doctest: env: NAME=VALUE... --> extra environment ($CONN, $ADDR expand)
//	<!-- doctest: exit: N -->          the block must exit with status N
//	<!-- doctest: before: SHELL -->    hidden setup, run with bash first
//
// Each page has a working directory and a server (started with --debug-addr) of its own;
// pages run in parallel, a page's blocks in order, each within 3 minutes, and whatever a
// block leaves running is ended after it. In a block, 127.0.0.1:10002 is the page server's
// address, 127.0.0.1:6060 its debug address, UseDevelopmentStorage=true its connection
// string; the environment has CONN (that connection string), ACCOUNT_KEY, ADDR, a PATH
// that finds the cerulean under test, AZURE_CONFIG_DIR (the page's own),
// AZURE_CORE_COLLECT_TELEMETRY=no, and the page server as the default of cerulean's
// commands: CERULEAN_TABLE_ENDPOINT (`cerulean table`), CERULEAN_BENCH_CONNECTION_STRING
// (`cerulean bench`) and CERULEAN_ADDR (so that a `cerulean serve` in a block not marked
// own-server fails at once: its address is taken). In an own-server block,
// 127.0.0.1:10002, 127.0.0.1:6060 and those three defaults are the block's own server's
// address, a free port for its debug address and its defaults instead (CONN, ADDR and
// UseDevelopmentStorage=true stay the page server's); the block must wait for its server
// itself. Outside own-server blocks, a page server started with --dev-issuer (HTTPS)
// gives its blocks CERULEAN_DATA (its data directory, cerulean token's default),
// SSL_CERT_FILE, NODE_EXTRA_CA_CERTS and REQUESTS_CA_BUNDLE (its certificate) and TOKEN
// (what cerulean token --role contributor printed). A postgres block without CERULEAN_TEST_POSTGRES_URL is skipped (failed
// under CI=true), as are blocks whose client (node, the Python SDK, az) is missing.
//
// The test logs a summary (also written to $CERULEAN_TEST_ARTIFACTS/docs-summary.txt):
// blocks run per language, output blocks, skipped blocks with their reasons, per page.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/pgtest"
)

// docBlockTimeout bounds one block (and each of its before: scripts).
const docBlockTimeout = 3 * time.Minute

func TestDocs(t *testing.T) {
	if os.Getenv("CERULEAN_TEST_ENGINE_ARGS") != "" {
		t.Skip("the manual runs in the first pass of scripts/test (CERULEAN_TEST_ENGINE_ARGS is set)")
	}
	repo := compatRepoRoot(t)
	var pages []string
	if _, err := os.Stat(filepath.Join(repo, "README.md")); err == nil {
		pages = append(pages, "README.md")
	}
	pages = append(pages, docMarkdownFiles(t, repo, "docs")...)
	summary := ""
	if dir := os.Getenv("CERULEAN_TEST_ARTIFACTS"); dir != "" {
		summary = filepath.Join(dir, "docs-summary.txt")
	}
	runDocs(t, repo, repo, pages, summary)
}

// TestDocsSelfTest runs the harness on its own pages (e2e/testdata/docs), which use every
// language and directive.
func TestDocsSelfTest(t *testing.T) {
	if os.Getenv("CERULEAN_TEST_ENGINE_ARGS") != "" {
		t.Skip("the manual runs in the first pass of scripts/test (CERULEAN_TEST_ENGINE_ARGS is set)")
	}
	repo := compatRepoRoot(t)
	root := filepath.Join(repo, "e2e", "testdata", "docs")
	runDocs(t, repo, root, docMarkdownFiles(t, root, "."), "")
}

// docMarkdownFiles lists the .md files under dir of root (slash paths relative to root).
func docMarkdownFiles(t *testing.T, root, dir string) []string {
	t.Helper()
	var out []string
	err := fs.WalkDir(os.DirFS(root), dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != dir && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) {
			return fs.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			out = append(out, p)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// docsRun is one run of the harness over a set of pages.
type docsRun struct {
	repo   string // the repository: files: paths, compat/js/node_modules, the Go module
	root   string // the pages' root: links resolve in it
	binDir string // holds `cerulean`, first on the blocks' PATH
	pages  []*docPagePlan
	env    []string // the environment every block starts from

	node        string // "" when not installed
	nodeModules string // compat/js/node_modules, "" when missing
	pythonErr   error  // why debianPython cannot run the SDK, nil when it can
	azErr       error

	goBuild time.Duration
	goProgs int
}

// docPagePlan is a page and how its blocks run.
type docPagePlan struct {
	page     *docPage
	name     string // the subtest's name: the path with '/' made '-'
	problems []docProblem
	external int // links not checked (http, https, mailto...)
	blocks   []*docBlockPlan
	db       string // the page's PostgreSQL database (name), "" when no block needs one
	dbURL    string // its URL; "" without CERULEAN_TEST_POSTGRES_URL
	selected bool   // the -run pattern selects the page
	sum      docPageSummary
}

// docSeg is one page server: the page's default one, or one a server: directive starts.
type docSeg struct {
	line      int // the block whose server: started it (0: the page's default)
	flags     []string
	accounts  []account // nil: the development account
	port      int
	debugPort int
	postgres  bool // on the page's database (postgres and server: on one block)
	srv       *server
}

func (s *docSeg) addr() string      { return fmt.Sprintf("127.0.0.1:%d", s.port) }
func (s *docSeg) debugAddr() string { return fmt.Sprintf("127.0.0.1:%d", s.debugPort) }
func (s *docSeg) account() account {
	if len(s.accounts) > 0 {
		return s.accounts[0]
	}
	return account{devAccount, devKey}
}

// docConnString is the connection string of account a at addr.
func docConnString(addr string, a account) string {
	return "DefaultEndpointsProtocol=http;AccountName=" + a.Name + ";AccountKey=" + a.Key +
		";TableEndpoint=http://" + addr + "/" + a.Name + ";"
}

// docBlockPlan is how one block runs.
type docBlockPlan struct {
	b   *docBlock
	seg *docSeg // the page server when the block runs
	// own-server: the block's own server's address and debug address.
	ownAddr, ownDebug string
	text              string   // the block with its substitutions
	before            []string // the before: scripts, substituted
	env               []string // the env: directive's NAME=VALUE, substituted
	goDir             string   // go: the program's directory (and binary) in the module
	goBin             string   // go: the built program
	goErr             string   // go: why it did not build
}

func (bp *docBlockPlan) runs() bool {
	return bp.b.Dir.Skip == "" && !bp.b.Dir.Output && docRunnable[bp.b.Lang] && len(bp.b.Problems) == 0
}

// docPageSummary is what ran of a page.
type docPageSummary struct {
	ran     bool
	took    time.Duration
	run     map[string]int // blocks run, by language
	failed  []string       // "line N (lang)"
	output  int
	skipped []string // "line N (lang): reason"
}

var nonAlnum = regexp.MustCompile(`[^A-Za-z0-9]+`)

var pgURLPattern = regexp.MustCompile(`postgres(?:ql)?://[^\s'"` + "`" + `;)<>\\]+`)

// runDocs runs the pages (slash paths relative to root).
func runDocs(t *testing.T, repo, root string, files []string, summaryFile string) {
	began := time.Now()
	r := &docsRun{repo: repo, root: root}
	r.binDir = t.TempDir()
	bin, err := filepath.Abs(binaryPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(r.binDir, "cerulean")); err != nil {
		t.Fatal(err)
	}
	r.env = docBaseEnv(r.binDir)

	// Parse every page, then check links (anchors of any page are known by then).
	byPath := map[string]*docPage{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		p := parseDocPage(f, string(b))
		byPath[f] = p
		r.pages = append(r.pages, &docPagePlan{page: p, name: strings.ReplaceAll(f, "/", "-")})
	}
	anchors := func(file string) (map[string]bool, error) {
		if p, ok := byPath[file]; ok {
			return p.Anchors, nil
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			return nil, err
		}
		p := parseDocPage(file, string(b))
		byPath[file] = p
		return p.Anchors, nil
	}
	rootFS := os.DirFS(root)
	pageFilter := docPageFilter()
	for _, pp := range r.pages {
		pp.problems = append(pp.problems, pp.page.Problems...)
		lp, ext := checkDocLinks(pp.page, rootFS, anchors)
		pp.problems, pp.external = append(pp.problems, lp...), ext
		pp.selected = pageFilter(pp.name)
		r.plan(t, pp)
	}
	r.findTools(t)
	r.buildGo(t)
	t.Cleanup(func() { r.summarize(t, time.Since(began), summaryFile) })
	for _, pp := range r.pages {
		t.Run(pp.name, func(t *testing.T) { r.runPage(t, pp) })
	}
}

// docBaseEnv is the test's environment without the CERULEAN_ variables of the developer's
// shell (but CERULEAN_TEST_*), with binDir first on PATH and the Azure CLI kept quiet.
func docBaseEnv(binDir string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CERULEAN_") && !strings.HasPrefix(kv, "CERULEAN_TEST_") {
			continue
		}
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			kv = "PATH=" + binDir + string(os.PathListSeparator) + v
		}
		env = append(env, kv)
	}
	return append(env, "AZURE_CORE_COLLECT_TELEMETRY=no")
}

// docPageFilter returns whether the -run pattern can select a page (its second element
// matches the page's name), so that only the selected pages' Go programs are built.
func docPageFilter() func(string) bool {
	all := func(string) bool { return true }
	f := flag.Lookup("test.run")
	if f == nil {
		return all
	}
	elems := splitRunPattern(f.Value.String())
	if len(elems) < 2 {
		return all
	}
	re, err := regexp.Compile(elems[1])
	if err != nil {
		return all
	}
	return re.MatchString
}

// splitRunPattern splits a -run pattern on the '/' outside brackets and parentheses, as
// the testing package does.
func splitRunPattern(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[', '(':
			depth++
		case ']', ')':
			depth--
		case '\\':
			i++
		case '/':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// plan decides each block's server, addresses and substituted text. Every address is
// chosen now, before any server starts, so that the Go programs, built up front, can
// name them.
func (r *docsRun) plan(t *testing.T, pp *docPagePlan) {
	seg := &docSeg{port: docPort(t), debugPort: docPort(t)}
	for _, b := range pp.page.Blocks {
		if b.Dir.Postgres && pp.db == "" {
			pp.db = fmt.Sprintf("doctest_%s_%d", runID, docDBs.Add(1))
			if primary := os.Getenv("CERULEAN_TEST_POSTGRES_URL"); primary != "" {
				u, err := pgtest.DatabaseURL(primary, pp.db)
				if err != nil {
					t.Fatalf("CERULEAN_TEST_POSTGRES_URL: %v", err)
				}
				pp.dbURL = u
			}
		}
	}
	pgSubst := func(s string) string {
		if pp.dbURL == "" {
			return s
		}
		return pgURLPattern.ReplaceAllLiteralString(s, pp.dbURL)
	}
	for _, b := range pp.page.Blocks {
		if b.Dir.HasServer {
			seg = &docSeg{line: b.Line, port: docPort(t), debugPort: docPort(t)}
			for i := 0; i < len(b.Dir.Server); i++ {
				f := b.Dir.Server[i]
				var v string
				if f == "--accounts" && i+1 < len(b.Dir.Server) {
					v, i = b.Dir.Server[i+1], i+1
				} else if x, ok := strings.CutPrefix(f, "--accounts="); ok {
					v = x
				} else {
					seg.flags = append(seg.flags, f)
					continue
				}
				for _, pair := range strings.Split(v, ";") {
					name, key, _ := strings.Cut(pair, ":")
					seg.accounts = append(seg.accounts, account{name, key})
				}
			}
			if b.Dir.Postgres {
				seg.postgres = true
				hasURL := false
				for i, f := range seg.flags {
					if pgURLPattern.MatchString(f) {
						hasURL = true
						seg.flags[i] = pgSubst(f)
					}
				}
				if !hasURL {
					seg.flags = append(seg.flags, "--engine", "postgres", "--postgres-url", pp.dbURL)
				}
			}
			repl := strings.NewReplacer("127.0.0.1:10002", seg.addr(), "127.0.0.1:6060", seg.debugAddr(),
				"UseDevelopmentStorage=true", docConnString(seg.addr(), seg.account()))
			for i, f := range seg.flags {
				seg.flags[i] = repl.Replace(f)
			}
		}
		bp := &docBlockPlan{b: b, seg: seg}
		pp.blocks = append(pp.blocks, bp)
		// UseDevelopmentStorage=true is the page server's in every block, an own-server one
		// too: there it names the server the block's own one may copy from, say.
		addr, debug, conn := seg.addr(), seg.debugAddr(), docConnString(seg.addr(), seg.account())
		if b.Dir.OwnServer {
			bp.ownAddr = fmt.Sprintf("127.0.0.1:%d", docPort(t))
			bp.ownDebug = fmt.Sprintf("127.0.0.1:%d", docPort(t))
			addr, debug = bp.ownAddr, bp.ownDebug
		}
		repl := strings.NewReplacer("127.0.0.1:10002", addr, "127.0.0.1:6060", debug, "UseDevelopmentStorage=true", conn)
		subst := func(s string) string {
			s = repl.Replace(s)
			if b.Dir.Postgres {
				s = pgSubst(s)
			}
			return s
		}
		bp.text = subst(b.Text)
		for _, s := range b.Dir.Before {
			bp.before = append(bp.before, subst(s))
		}
		for _, s := range b.Dir.Env {
			bp.env = append(bp.env, subst(s))
		}
		if b.Lang == "go" && bp.runs() {
			bp.goDir = fmt.Sprintf("%s_l%d", nonAlnum.ReplaceAllString(pp.page.Path, "_"), b.Line)
		}
	}
}

// docDBs numbers the databases of the run's pages.
var docDBs atomic.Int64

// docPorts are the ports docPort gave out, with the listeners that hold them until
// docReleasePorts.
var docPorts = struct {
	sync.Mutex
	used map[int]bool
	held map[int]net.Listener
}{used: map[int]bool{}, held: map[int]net.Listener{}}

// docPort returns a port below the system's ephemeral range (so that no connection's local
// port takes it meanwhile) that it never gave out before, and holds it, listening, until
// docReleasePorts, just before a server is started on it, or the test's end: the addresses
// of servers started later are chosen before the Go programs that name them are built, and
// other runs of the harness at the same time (other worktrees) find the port taken.
func docPort(t *testing.T) int {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	const first = 12000
	if low < first+1000 {
		p, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	docPorts.Lock()
	defer docPorts.Unlock()
	for range 1000 {
		p := first + rand.IntN(low-first)
		if docPorts.used[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		docPorts.used[p], docPorts.held[p] = true, l
		t.Cleanup(func() { docReleasePorts(p) })
		return p
	}
	t.Fatal("no free port below the ephemeral range")
	return 0
}

// docReleasePorts stops holding ports docPort gave out.
func docReleasePorts(ports ...int) {
	docPorts.Lock()
	defer docPorts.Unlock()
	for _, p := range ports {
		if l := docPorts.held[p]; l != nil {
			l.Close()
			delete(docPorts.held, p)
		}
	}
}

// findTools looks for what the pages' blocks need: node and the JavaScript SDK, Debian's
// Python with the Python SDK, the Azure CLI.
func (r *docsRun) findTools(t *testing.T) {
	need := map[string]bool{}
	for _, pp := range r.pages {
		for _, bp := range pp.blocks {
			if pp.selected && bp.runs() {
				need[bp.b.Lang] = true
				if (bp.b.Lang == "sh" || bp.b.Lang == "bash") && docUsesAz(bp.text+strings.Join(bp.before, "\n")) {
					need["az"] = true
				}
			}
		}
	}
	if need["js"] {
		r.node, _ = exec.LookPath("node")
		nm := filepath.Join(r.repo, "compat", "js", "node_modules")
		if _, err := os.Stat(filepath.Join(nm, "@azure", "data-tables")); err == nil {
			r.nodeModules = nm
		}
	}
	if need["python"] {
		if out, err := exec.Command(debianPython, "-c", "import azure.data.tables").CombinedOutput(); err != nil {
			r.pythonErr = fmt.Errorf("%s cannot import azure.data.tables (apt-get install python3-azure): %v %s", debianPython, err, bytes.TrimSpace(out))
		}
	}
	if need["az"] {
		if _, err := exec.LookPath("az"); err != nil {
			r.azErr = fmt.Errorf("az is not installed (apt-get install azure-cli)")
		}
	}
}

var azCommand = regexp.MustCompile(`(?m)(?:^|[\s;&|(` + "`" + `])az\s`)

func docUsesAz(script string) bool { return azCommand.MatchString(script) }

// buildGo builds every selected Go block, each its own main package in one temporary
// module that requires the repository's module through a replace, in one go build (more
// only when a block does not even load: the others are then built again without it).
func (r *docsRun) buildGo(t *testing.T) {
	var progs []*docBlockPlan
	var pageOf = map[*docBlockPlan]*docPagePlan{}
	for _, pp := range r.pages {
		for _, bp := range pp.blocks {
			if bp.goDir != "" && pp.selected {
				progs = append(progs, bp)
				pageOf[bp] = pp
			}
		}
	}
	if len(progs) == 0 {
		return
	}
	began := time.Now()
	defer func() { r.goBuild, r.goProgs = time.Since(began), len(progs) }()
	mod := t.TempDir()
	gomod, err := os.ReadFile(filepath.Join(r.repo, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var head strings.Builder
	head.WriteString("module doctest\n\n")
	for _, line := range strings.Split(string(gomod), "\n") {
		if strings.HasPrefix(line, "go ") || strings.HasPrefix(line, "toolchain ") {
			head.WriteString(line + "\n")
		}
	}
	fmt.Fprintf(&head, "\nrequire github.com/ceruleandb/cerulean v0.0.0\n\nreplace github.com/ceruleandb/cerulean => %s\n", r.repo)
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte(head.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if sum, err := os.ReadFile(filepath.Join(r.repo, "go.sum")); err == nil {
		if err := os.WriteFile(filepath.Join(mod, "go.sum"), sum, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	byDir := map[string]*docBlockPlan{}
	for _, bp := range progs {
		byDir[bp.goDir] = bp
		if err := os.Mkdir(filepath.Join(mod, bp.goDir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mod, bp.goDir, "main.go"), []byte(bp.text), 0o644); err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^package main\b`).MatchString(bp.text) {
			bp.goErr = "a go block must be a whole program (package main, its imports, func main); mark a fragment <!-- doctest: skip: REASON -->"
		}
	}
	bin := filepath.Join(mod, "bin")
	errLine := regexp.MustCompile(`^\s*(?:\./)?([A-Za-z0-9_]+)/main\.go:(\d+)(?::(\d+))?: (.*)$`)
	for attempt := 0; ; attempt++ {
		var pending []*docBlockPlan
		for _, bp := range progs {
			if bp.goBin == "" && bp.goErr == "" {
				pending = append(pending, bp)
			}
		}
		if len(pending) == 0 {
			return
		}
		// Without a symbol table and DWARF (-s -w) each program links in about half the time.
		args := []string{"build", "-ldflags=-s -w", "-o", bin + string(filepath.Separator)}
		if attempt == 0 && len(pending) == len(progs) {
			args = append(args, "./...")
		} else {
			for _, bp := range pending {
				args = append(args, "./"+bp.goDir)
			}
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, buildErr := cmd.CombinedOutput()
		// Map each error to its block and the page's line.
		errs := map[string][]string{}
		var other []string
		var last string
		for _, line := range strings.Split(string(out), "\n") {
			if m := errLine.FindStringSubmatch(line); m != nil && byDir[m[1]] != nil {
				bp := byDir[m[1]]
				n, _ := strconv.Atoi(m[2])
				pos := fmt.Sprintf("%s:%d", pageOf[bp].page.Path, bp.b.Line+n)
				if m[3] != "" {
					c, _ := strconv.Atoi(m[3])
					pos += fmt.Sprintf(":%d", c+bp.b.Indent)
				}
				errs[m[1]] = append(errs[m[1]], pos+": "+m[4])
				last = m[1]
				continue
			}
			if strings.HasPrefix(line, "\t") && last != "" {
				errs[last] = append(errs[last], line)
				continue
			}
			last = ""
			if strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "# ") && !strings.HasPrefix(line, "go: downloading") {
				other = append(other, line)
			}
		}
		progress := false
		for _, bp := range pending {
			if _, err := os.Stat(filepath.Join(bin, bp.goDir)); err == nil && len(errs[bp.goDir]) == 0 {
				bp.goBin, progress = filepath.Join(bin, bp.goDir), true
			} else if e := errs[bp.goDir]; len(e) > 0 {
				bp.goErr, progress = strings.Join(e, "\n"), true
			}
		}
		if buildErr == nil && len(other) > 0 {
			t.Logf("go build of the pages' programs: %s", strings.Join(other, "\n"))
		}
		if !progress {
			msg := fmt.Sprintf("go %s (in the pages' temporary module %s) failed: %v\n%s", strings.Join(args, " "), mod, buildErr, out)
			t.Error(msg)
			for _, bp := range pending {
				bp.goErr = msg
			}
			return
		}
	}
}

// runPage runs one page's blocks, in order.
func (r *docsRun) runPage(t *testing.T, pp *docPagePlan) {
	t.Parallel()
	began := time.Now()
	sum := &pp.sum
	sum.ran, sum.run = true, map[string]int{}
	defer func() { sum.took = time.Since(began) }()
	for _, p := range pp.problems {
		t.Errorf("%s:%d: %s", pp.page.Path, p.Line, p.Msg)
	}
	if len(pp.problems) > 0 {
		sum.failed = append(sum.failed, fmt.Sprintf("%d markdown problems (fences, links, directives)", len(pp.problems)))
	}
	work := t.TempDir()
	azDir := t.TempDir()
	if r.nodeModules != "" {
		if err := os.Symlink(r.nodeModules, filepath.Join(work, "node_modules")); err != nil {
			t.Fatal(err)
		}
	}
	var active *docSeg
	dbMade := false
	firstFail := 0
	for _, bp := range pp.blocks {
		b := bp.b
		// Whatever the block needs is started here, on the page's goroutine: the database,
		// then the page server (a new one after a server: directive).
		pgMissing := os.Getenv("CERULEAN_TEST_POSTGRES_URL") == ""
		if bp.runs() && !r.unavailable(bp) && !((b.Dir.Postgres || bp.seg.postgres) && pgMissing) {
			if (b.Dir.Postgres || bp.seg.postgres) && !dbMade {
				pgtest.CreateDatabase(t, pp.db)
				dbMade = true
			}
			if active != bp.seg && active != nil && active.srv != nil {
				active.srv.terminate(stopTimeout)
			}
			active = bp.seg
			if bp.seg.srv == nil {
				docReleasePorts(bp.seg.port, bp.seg.debugPort)
				opts := []serverOption{withPort(bp.seg.port), withArgs("--debug-addr", bp.seg.debugAddr())}
				if len(bp.seg.accounts) > 0 {
					opts = append(opts, withAccounts(bp.seg.accounts...))
				}
				if bp.seg.line > 0 {
					t.Logf("%s:%d: doctest: server: a fresh page server with %q", pp.page.Path, bp.seg.line, bp.seg.flags)
				}
				flags := bp.seg.flags
				if slices.Contains(flags, "--dev-issuer") {
					// HTTPS, which --dev-issuer turns on: the harness must know to wait so.
					opts = append(opts, withDevIssuer())
					flags = slices.DeleteFunc(slices.Clone(flags), func(f string) bool { return f == "--dev-issuer" })
				}
				bp.seg.srv = startServer(t, append(opts, withArgs(flags...))...)
			}
		}
		lang := b.Lang
		if lang == "" {
			lang = "plain"
		}
		ok := t.Run(fmt.Sprintf("line-%d-%s", b.Line, lang), func(t *testing.T) {
			r.runBlock(t, pp, bp, work, azDir, firstFail)
		})
		if !ok {
			sum.failed = append(sum.failed, fmt.Sprintf("line %d (%s)", b.Line, lang))
			if firstFail == 0 {
				firstFail = b.Line
			}
		}
	}
}

// unavailable reports whether a block cannot run for want of a tool.
func (r *docsRun) unavailable(bp *docBlockPlan) bool {
	return r.missingTool(bp) != ""
}

func (r *docsRun) missingTool(bp *docBlockPlan) string {
	switch bp.b.Lang {
	case "js":
		if r.node == "" {
			return "node is not installed"
		}
		if r.nodeModules == "" {
			return "compat/js/node_modules is missing (cd compat/js && npm ci --no-audit --no-fund)"
		}
	case "python":
		if r.pythonErr != nil {
			return r.pythonErr.Error()
		}
	case "sh", "bash":
		if r.azErr != nil && docUsesAz(bp.text+strings.Join(bp.before, "\n")) {
			return r.azErr.Error()
		}
	}
	return ""
}

// runBlock is one block's subtest.
func (r *docsRun) runBlock(t *testing.T, pp *docPagePlan, bp *docBlockPlan, work, azDir string, firstFail int) {
	b, sum := bp.b, &pp.sum
	at := fmt.Sprintf("%s:%d", pp.page.Path, b.Line)
	lang := b.Lang
	if lang == "" {
		lang = "plain"
	}
	skip := func(reason string) {
		t.Helper()
		sum.skipped = append(sum.skipped, fmt.Sprintf("line %d (%s): %s", b.Line, lang, reason))
		compatUnavailable(t, "%s: %s", at, reason)
	}
	if len(b.Problems) > 0 {
		t.Fatalf("%s:%d: %s", pp.page.Path, b.DirLine, strings.Join(b.Problems, "\n\t"))
	}
	switch {
	case b.Dir.Skip != "":
		sum.skipped = append(sum.skipped, fmt.Sprintf("line %d (%s): %s", b.Line, lang, b.Dir.Skip))
		t.Skipf("%s: doctest: skip: %s", at, b.Dir.Skip)
	case b.Dir.Output:
		sum.output++
		if lang == "json" || lang == "jsonl" || lang == "ndjson" {
			if err := docCheckJSON(b.Text); err != nil {
				t.Fatalf("%s: this json output block is not JSON: %v", at, err)
			}
		}
		return
	case !docRunnable[b.Lang]:
		hint := ""
		if want, ok := docLangHint[b.Lang]; ok {
			hint = fmt.Sprintf(" To run it, write ```%s.", want)
		}
		t.Fatalf("%s: a %s block is not run, so it must be marked: put <!-- doctest: output --> (the output of the block above) or <!-- doctest: skip: REASON --> on the line directly above its fence.%s Runnable: go, js, python, sh, bash.",
			at, map[bool]string{true: "plain (no language)", false: "```" + b.Lang}[b.Lang == ""], hint)
	}
	if m := r.missingTool(bp); m != "" {
		skip(m)
	}
	if (b.Dir.Postgres || bp.seg.postgres) && os.Getenv("CERULEAN_TEST_POSTGRES_URL") == "" {
		skip("needs PostgreSQL: CERULEAN_TEST_POSTGRES_URL is not set (scripts/test starts PostgreSQL and sets it)")
	}
	if bp.seg.srv == nil {
		t.Fatalf("%s: the page server did not start", at)
	}
	if b.Lang == "go" && bp.goBin == "" {
		t.Fatalf("%s: this go block does not build:\n%s", at, bp.goErr)
	}

	// The environment: the page server's, or the block's own server's addresses.
	seg := bp.seg
	env := slices.Clone(r.env)
	acct := seg.account()
	env = append(env, "CONN="+docConnString(seg.addr(), acct), "ACCOUNT_KEY="+acct.Key, "ADDR="+seg.addr(),
		"AZURE_CONFIG_DIR="+azDir)
	// The defaults of cerulean's commands (serve's address, the server table and bench
	// talk to) are the default server's: the block's own, or the page server. Outside an
	// own-server block, a `cerulean serve` so finds its address taken and fails at once.
	if b.Dir.OwnServer {
		env = append(env, "CERULEAN_ADDR="+bp.ownAddr, "CERULEAN_TABLE_ENDPOINT=http://"+bp.ownAddr+"/"+devAccount,
			"CERULEAN_BENCH_CONNECTION_STRING="+docConnString(bp.ownAddr, account{devAccount, devKey}))
	} else {
		env = append(env, "CERULEAN_ADDR="+seg.addr(), "CERULEAN_TABLE_ENDPOINT=http://"+seg.addr()+"/"+acct.Name,
			"CERULEAN_BENCH_CONNECTION_STRING="+docConnString(seg.addr(), acct))
		if acct.Name != devAccount {
			env = append(env, "CERULEAN_TABLE_ACCOUNT="+acct.Name, "CERULEAN_TABLE_KEY="+acct.Key)
		}
	}
	if !b.Dir.OwnServer && slices.Contains(seg.flags, "--dev-issuer") {
		// The development issuer's page server: its data directory is cerulean token's,
		// its certificate trusted as docs/operations.md#https says, and TOKEN is a
		// Contributor's token, as TOKEN=$(cerulean token --role contributor) sets it.
		ca := seg.srv.CAFile
		env = append(env, "CERULEAN_DATA="+seg.srv.DataDir, "SSL_CERT_FILE="+ca, "NODE_EXTRA_CA_CERTS="+ca, "REQUESTS_CA_BUNDLE="+ca)
		res := docExec(work, env, "bash", "-c", "cerulean token --role contributor")
		if res.err != nil || res.code != 0 {
			t.Fatalf("%s: cerulean token for the --dev-issuer page server: %s\n%s", at, res.status(), res.out)
		}
		env = append(env, "TOKEN="+strings.TrimSpace(res.out))
	}
	lookup := func(name string) string {
		for i := len(env) - 1; i >= 0; i-- {
			if v, ok := strings.CutPrefix(env[i], name+"="); ok {
				return v
			}
		}
		return "$" + name
	}
	for _, kv := range bp.env {
		env = append(env, os.Expand(kv, lookup))
	}

	for _, f := range b.Dir.Files {
		if err := docCopy(filepath.Join(r.repo, filepath.FromSlash(f)), filepath.Join(work, path.Base(f))); err != nil {
			t.Fatalf("%s: doctest: files: %v", at, err)
		}
	}
	if b.Dir.OwnServer {
		docReleasePorts(docAddrPort(bp.ownAddr), docAddrPort(bp.ownDebug))
	}
	for _, s := range bp.before {
		res := docExec(work, env, "bash", "-euo", "pipefail", "-c", s)
		if res.err != nil || res.code != 0 {
			t.Fatalf("%s: doctest: before: %q %s\n--- its output ---\n%s", at, s, res.status(), res.out)
		}
	}
	var name string
	var args []string
	switch b.Lang {
	case "go":
		name = bp.goBin
	case "js":
		if err := os.WriteFile(filepath.Join(work, "main.mjs"), []byte(bp.text), 0o644); err != nil {
			t.Fatal(err)
		}
		name, args = r.node, []string{"main.mjs"}
	case "python":
		if err := os.WriteFile(filepath.Join(work, "main.py"), []byte(bp.text), 0o644); err != nil {
			t.Fatal(err)
		}
		name, args = debianPython, []string{"main.py"}
	default:
		name, args = "bash", []string{"-euo", "pipefail", "-c", bp.text}
	}
	sum.run[b.Lang]++
	res := docExec(work, env, name, args...)
	want := 0
	if b.Dir.HasExit {
		want = b.Dir.Exit
	}
	if res.err == nil && !res.timedOut && res.code == want {
		return
	}
	var msg strings.Builder
	fmt.Fprintf(&msg, "%s: this %s block %s", at, lang, res.status())
	if res.err == nil && !res.timedOut {
		fmt.Fprintf(&msg, ", want %d", want)
		if want == 0 {
			msg.WriteString(" (if the block shows an error on purpose, mark it <!-- doctest: exit: N -->)")
		}
	}
	if !b.Dir.OwnServer && (res.timedOut && strings.Contains(res.out, "cerulean serving") ||
		strings.Contains(res.out, seg.addr()) && strings.Contains(res.out, "address already in use")) {
		msg.WriteString("\n(a block that starts `cerulean serve` must be marked <!-- doctest: own-server --> and wait for its server)")
	}
	if res.code == 128+int(syscall.SIGTERM) && regexp.MustCompile(`\bkill\b[^\n]*%`).MatchString(bp.text) {
		msg.WriteString("\n(in bash -c, which has no job control, `kill %1` signals the whole process group, the block's shell too: use `kill $!` or a saved pid)")
	}
	if strings.Contains(res.out, "go.mod file not found") || strings.Contains(res.out, "./scripts/") && strings.Contains(res.out, "No such file") {
		msg.WriteString("\n(blocks run in a temporary directory of the page, not in the repository)")
	}
	if firstFail != 0 {
		fmt.Fprintf(&msg, "\n(an earlier block of this page failed, at line %d: this may follow from it)", firstFail)
	}
	servers := fmt.Sprintf("page server %s (debug %s", seg.addr(), seg.debugAddr())
	if seg.line > 0 {
		servers += fmt.Sprintf(", the server: of line %d, flags %s", seg.line, strings.Join(seg.flags, " "))
	}
	servers += ")"
	if b.Dir.OwnServer {
		servers += fmt.Sprintf("; own server %s (debug %s)", bp.ownAddr, bp.ownDebug)
	}
	fmt.Fprintf(&msg, "\n--- the block as run, by page line; %s ---\n", servers)
	for i, line := range strings.Split(strings.TrimSuffix(bp.text, "\n"), "\n") {
		fmt.Fprintf(&msg, "%5d | %s\n", b.Line+1+i, line)
	}
	fmt.Fprintf(&msg, "--- its output (stdout and stderr) ---\n%s", res.out)
	t.Fatal(msg.String())
}

func docAddrPort(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// docCheckJSON checks that an output block is one JSON document or JSON Lines.
func docCheckJSON(text string) error {
	dec := json.NewDecoder(strings.NewReader(text))
	var v any
	errDoc := dec.Decode(&v)
	if errDoc == nil {
		if _, err := dec.Token(); err == io.EOF {
			return nil
		}
	}
	for i, line := range strings.Split(text, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			if errDoc == nil {
				errDoc = errors.New("more than one value")
			}
			return fmt.Errorf("neither one JSON document (%v) nor JSON Lines (its line %d: %v)", errDoc, i+1, err)
		}
	}
	return nil
}

// docCopy copies a repository file or directory.
func docCopy(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, info.Mode().Perm())
	})
}

// docResult is how a block's process ended.
type docResult struct {
	code     int
	timedOut bool
	err      error // it could not be started
	out      string
}

func (r docResult) status() string {
	switch {
	case r.err != nil:
		return fmt.Sprintf("could not start: %v", r.err)
	case r.timedOut:
		return fmt.Sprintf("was killed after %v (the doctest timeout)", docBlockTimeout)
	case r.code < 0:
		return "was killed by a signal"
	}
	return fmt.Sprintf("exited with status %d", r.code)
}

// docExec runs a block's program in its own process group, its output (stdout and stderr
// together) into a file, and when it has exited ends what it left behind: the process
// group is sent SIGTERM, then SIGKILL after a few seconds.
func docExec(dir string, env []string, name string, args ...string) docResult {
	f, err := os.CreateTemp("", "cerulean-doctest-out-")
	if err != nil {
		return docResult{err: err}
	}
	defer os.Remove(f.Name())
	defer f.Close()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return docResult{err: err}
	}
	pgid := cmd.Process.Pid
	var timedOut atomic.Bool
	timer := time.AfterFunc(docBlockTimeout, func() {
		timedOut.Store(true)
		syscall.Kill(-pgid, syscall.SIGKILL)
	})
	err = cmd.Wait()
	timer.Stop()
	docEndGroup(pgid)
	res := docResult{timedOut: timedOut.Load()}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		res.code = exitErr.ExitCode()
	default:
		res.err = err
	}
	res.out = docTail(f.Name(), 64<<10)
	return res
}

// docEndGroup ends the processes left in a process group: SIGTERM, then SIGKILL to
// those still running after a few seconds.
func docEndGroup(pgid int) {
	if syscall.Kill(-pgid, syscall.SIGTERM) != nil {
		return // none left
	}
	deadline := time.Now().Add(5 * time.Second)
	for docGroupRunning(pgid) {
		if time.Now().After(deadline) {
			syscall.Kill(-pgid, syscall.SIGKILL)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// docGroupRunning reports whether a process of the group is still running. Exited ones
// may stay zombies: their parent gone, they belong to a pid 1 that need not reap them
// (as in some containers), and kill(-pgid, 0) still finds them.
func docGroupRunning(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold anything, so read after its ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" && f[0] != "X" {
			return true
		}
	}
	return false
}

// docTail reads at most n bytes from the end of a file.
func docTail(file string, n int64) string {
	f, err := os.Open(file)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	prefix := ""
	if st.Size() > n {
		f.Seek(st.Size()-n, io.SeekStart)
		prefix = fmt.Sprintf("... (%d bytes omitted) ...\n", st.Size()-n)
	}
	b, _ := io.ReadAll(bufio.NewReader(f))
	return prefix + string(b)
}

// summarize logs what ran (and writes it to file, if not "").
func (r *docsRun) summarize(t *testing.T, took time.Duration, file string) {
	var b strings.Builder
	total := map[string]int{}
	var pages, output, skipped, failed int
	var langs []string
	for _, pp := range r.pages {
		if !pp.sum.ran {
			continue
		}
		pages++
		output += pp.sum.output
		skipped += len(pp.sum.skipped)
		failed += len(pp.sum.failed)
		for l, n := range pp.sum.run {
			if total[l] == 0 {
				langs = append(langs, l)
			}
			total[l] += n
		}
	}
	slices.Sort(langs)
	counts := func(m map[string]int, keys []string) string {
		var parts []string
		n := 0
		for _, k := range keys {
			if m[k] > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
				n += m[k]
			}
		}
		if n == 0 {
			return "0"
		}
		return fmt.Sprintf("%d (%s)", n, strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "doctest summary: %d pages in %v (go build of %d programs: %v); blocks run %s, output %d, skipped %d, failed %d\n",
		pages, took.Round(100*time.Millisecond), r.goProgs, r.goBuild.Round(100*time.Millisecond), counts(total, langs), output, skipped, failed)
	for _, pp := range r.pages {
		s := pp.sum
		if !s.ran {
			continue
		}
		fmt.Fprintf(&b, "%s (%v): run %s, output %d, skipped %d", pp.page.Path, s.took.Round(100*time.Millisecond), counts(s.run, langs), s.output, len(s.skipped))
		if pp.external > 0 {
			fmt.Fprintf(&b, ", external links %d (not fetched)", pp.external)
		}
		if len(s.failed) > 0 {
			fmt.Fprintf(&b, ", FAILED %d: %s", len(s.failed), strings.Join(s.failed, ", "))
		}
		b.WriteString("\n")
		for _, sk := range s.skipped {
			fmt.Fprintf(&b, "    skipped %s\n", sk)
		}
	}
	t.Log("\n" + b.String())
	if file != "" {
		if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
			t.Errorf("doctest summary: %v", err)
		}
	}
}
