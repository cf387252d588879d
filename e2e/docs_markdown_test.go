package e2e

// The Markdown side of TestDocs (docs_test.go): a page's fenced code blocks with the
// doctest directives above them, its anchors (heading slugs as GitHub makes them, and
// explicit <a id>/<a name>), its links, and what is wrong with its structure. Only what
// the manual uses is read: ATX and setext headings, fences of backticks or tildes (indented
// too, as in a list item), HTML comments, inline links and images, reference definitions
// and the href/src of HTML a/img tags.

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// docPage is one Markdown page.
type docPage struct {
	Path   string // slash-separated, relative to the docs root ("docs/bulk.md")
	Blocks []*docBlock
	// Anchors are the page's link targets: heading slugs and explicit ids.
	Anchors map[string]bool
	Links   []docLink
	// Problems are what is wrong with the page outside its blocks' directives: an
	// unclosed fence, a heading inside a block, a doctest comment on no block.
	Problems []docProblem
}

// docProblem is something wrong at a line of a page.
type docProblem struct {
	Line int
	Msg  string
}

// docBlock is one fenced code block.
type docBlock struct {
	Line    int    // the opening fence's line, 1-based
	Lang    string // the info string's first word, lower-cased ("" for none)
	Text    string // the content, the opener's indentation removed; each line ends in "\n"
	Indent  int    // the opener's indentation (removed from each content line)
	Dir     docDirectives
	DirLine int // the line of the first doctest comment above the block (0: none)
	// Problems are the block's directive errors: the block is not run while it has any.
	Problems []string
}

// docDirectives are the doctest comments' directives above one block.
type docDirectives struct {
	Skip      string // the reason; "" when not skipped
	Output    bool
	Server    []string // the page server's flags from this block on; nil when no server:
	HasServer bool
	OwnServer bool
	Postgres  bool
	Files     []string
	Env       []string // NAME=VALUE, in order
	Exit      int
	HasExit   bool
	Before    []string // bash scripts, in order
}

// docLink is a link target on a page.
type docLink struct {
	Line   int
	Target string
}

// docRunnable are the languages whose blocks TestDocs runs unless they are marked.
var docRunnable = map[string]bool{"go": true, "js": true, "python": true, "sh": true, "bash": true}

// docLangHint names the runnable language a block probably meant.
var docLangHint = map[string]string{"javascript": "js", "mjs": "js", "py": "python", "python3": "python",
	"shell": "sh", "console": "sh", "zsh": "sh", "golang": "go"}

var (
	atxHeading   = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextLine   = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	listOrQuote  = regexp.MustCompile(`^ {0,3}(?:[-+*>]|\d+[.)])(?:[ \t]|$)`)
	explicitID   = regexp.MustCompile(`(?i)<a\s+(?:[^>]*?\s)?(?:id|name)\s*=\s*["']([^"']+)["']`)
	htmlLinkAttr = regexp.MustCompile(`(?i)<(?:a|img)\s[^>]*?(?:href|src)\s*=\s*["']([^"']*)["']`)
	refDef       = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:[ \t]*(\S+)`)
	urlScheme    = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// parseDocPage parses a page's text.
func parseDocPage(pagePath, text string) *docPage {
	p := &docPage{Path: pagePath, Anchors: map[string]bool{}}
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	slugCount := map[string]int{}
	addHeading := func(s string) {
		slug := docSlug(s)
		if n := slugCount[slug]; n > 0 {
			p.Anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			p.Anchors[slug] = true
		}
		slugCount[slug]++
	}

	var (
		cur       *docBlock // the open block
		fenceCh   byte
		fenceLen  int
		content   strings.Builder
		inComment bool // inside a multi-line HTML comment
		// pending are the doctest comments seen since the last line that was not one.
		pending     []string
		pendingLine int
		prevText    string // the previous line when it is paragraph text (for setext headings)
	)
	for i, line := range lines {
		n := i + 1
		if cur != nil {
			if ch, l, _, info, ok := docFence(line); ok && ch == fenceCh && l >= fenceLen && info == "" {
				cur.Text = content.String()
				content.Reset()
				cur = nil
				continue
			}
			if strings.HasPrefix(line, "## ") || strings.HasPrefix(line, "### ") {
				p.Problems = append(p.Problems, docProblem{n, fmt.Sprintf("the heading %q is inside the code block opened at line %d (is that block's closing fence missing?)", line, cur.Line)})
			}
			content.WriteString(docDedent(line, cur.Indent))
			content.WriteByte('\n')
			continue
		}
		trimmed := strings.TrimSpace(line)
		if inComment {
			if strings.Contains(line, "-->") {
				inComment = false
			}
			continue
		}
		if ch, l, indent, info, ok := docFence(line); ok {
			b := &docBlock{Line: n, Indent: indent}
			if f := strings.Fields(info); len(f) > 0 {
				b.Lang = strings.ToLower(f[0])
			}
			if len(pending) > 0 {
				b.DirLine = pendingLine
				for _, c := range pending {
					b.Problems = append(b.Problems, parseDirectives(c, &b.Dir)...)
				}
				b.Problems = append(b.Problems, checkDirectives(b)...)
			}
			pending, pendingLine, prevText = nil, 0, ""
			p.Blocks = append(p.Blocks, b)
			cur, fenceCh, fenceLen = b, ch, l
			continue
		}
		if strings.HasPrefix(trimmed, "<!--") {
			body, closed := strings.CutSuffix(trimmed, "-->")
			body = strings.TrimSpace(strings.TrimPrefix(body, "<!--"))
			if d, ok := strings.CutPrefix(body, "doctest:"); ok {
				if !closed {
					p.Problems = append(p.Problems, docProblem{n, "a doctest comment must be one line, ending in -->"})
					inComment = !strings.Contains(line, "-->")
					continue
				}
				if len(pending) == 0 {
					pendingLine = n
				}
				pending = append(pending, d)
				continue
			}
			if !strings.Contains(trimmed, "-->") {
				inComment = true
			}
			if len(pending) > 0 {
				// Another comment between the directives and the fence is allowed.
				continue
			}
			prevText = ""
			continue
		}
		if len(pending) > 0 {
			p.Problems = append(p.Problems, docProblem{pendingLine, docStrayComment})
			pending, pendingLine = nil, 0
		}
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			addHeading(m[2])
			prevText = ""
		} else if setextLine.MatchString(line) && prevText != "" {
			addHeading(prevText)
			prevText = ""
		} else if trimmed == "" || listOrQuote.MatchString(line) || strings.HasPrefix(trimmed, "<") || strings.HasPrefix(trimmed, "|") {
			prevText = ""
		} else {
			prevText = trimmed
		}
		for _, m := range explicitID.FindAllStringSubmatch(line, -1) {
			p.Anchors[m[1]] = true
		}
		for _, target := range docLineLinks(line) {
			p.Links = append(p.Links, docLink{Line: n, Target: target})
		}
	}
	if cur != nil {
		cur.Text = content.String()
		p.Problems = append(p.Problems, docProblem{cur.Line, fmt.Sprintf("the code block opened here is never closed: it swallows the rest of the page (add its closing fence, %s)", strings.Repeat(string(fenceCh), fenceLen))})
		p.Blocks = p.Blocks[:len(p.Blocks)-1] // not a block: not run
	}
	if len(pending) > 0 {
		p.Problems = append(p.Problems, docProblem{pendingLine, docStrayComment})
	}
	return p
}

const docStrayComment = "this doctest comment is on no code block: put it on the line directly above the opening fence, with no blank line between"

// docFence reports whether line is a code fence: its character, length, indentation and
// info string. A backtick fence's info string holds no backtick (CommonMark).
func docFence(line string) (ch byte, n, indent int, info string, ok bool) {
	rest := strings.TrimLeft(line, " ")
	indent = len(line) - len(rest)
	if rest == "" || (rest[0] != '`' && rest[0] != '~') {
		return 0, 0, 0, "", false
	}
	ch = rest[0]
	for n < len(rest) && rest[n] == ch {
		n++
	}
	if n < 3 {
		return 0, 0, 0, "", false
	}
	info = rest[n:]
	if ch == '`' && strings.Contains(info, "`") {
		return 0, 0, 0, "", false
	}
	return ch, n, indent, strings.TrimSpace(info), true
}

// docDedent removes up to n leading spaces.
func docDedent(line string, n int) string {
	i := 0
	for i < n && i < len(line) && line[i] == ' ' {
		i++
	}
	return line[i:]
}

// docDirectiveNames lists the directives, for error messages.
const docDirectiveNames = "skip: REASON, output, server: FLAGS, own-server, postgres, files: PATH..., env: NAME=VALUE..., exit: N, before: SHELL"

// parseDirectives reads one doctest comment's text (after "doctest:") into d. Directives
// are separated by ';'; skip: and before: take the rest of the comment, ';' included, so
// they come last.
func parseDirectives(s string, d *docDirectives) (problems []string) {
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for {
		s = strings.TrimLeft(s, " \t;")
		if s == "" {
			return problems
		}
		i := 0
		for i < len(s) && (s[i] == '-' || (s[i] >= 'a' && s[i] <= 'z')) {
			i++
		}
		name := s[:i]
		rest := strings.TrimLeft(s[i:], " \t")
		var arg string
		hasArg := strings.HasPrefix(rest, ":")
		if hasArg {
			rest = rest[1:]
			if name == "skip" || name == "before" {
				arg, s = strings.TrimSpace(rest), ""
			} else {
				arg, s, _ = strings.Cut(rest, ";")
				arg = strings.TrimSpace(arg)
			}
		} else {
			if rest != "" && rest[0] != ';' {
				bad("doctest: cannot read %q: want directives separated by ';' (%s)", s, docDirectiveNames)
				return problems
			}
			s = rest
		}
		noArg := func() {
			if hasArg {
				bad("doctest: %s takes no argument (got %q)", name, arg)
			}
		}
		needArg := func(what string) bool {
			if arg == "" {
				bad("doctest: %s needs %s: `%s: %s`", name, what, name, what)
				return false
			}
			return true
		}
		once := func(seen bool) bool {
			if seen {
				bad("doctest: %s given twice", name)
			}
			return !seen
		}
		switch name {
		case "skip":
			if needArg("a REASON") && once(d.Skip != "") {
				d.Skip = arg
			}
		case "output":
			noArg()
			if once(d.Output) {
				d.Output = true
			}
		case "server":
			flags, err := shellWords(arg)
			if err != nil {
				bad("doctest: server: %v", err)
			} else if once(d.HasServer) {
				d.HasServer, d.Server = true, append([]string{}, flags...)
			}
		case "own-server":
			noArg()
			if once(d.OwnServer) {
				d.OwnServer = true
			}
		case "postgres":
			noArg()
			if once(d.Postgres) {
				d.Postgres = true
			}
		case "files":
			if needArg("PATH...") {
				d.Files = append(d.Files, strings.Fields(arg)...)
			}
		case "env":
			if !needArg("NAME=VALUE...") {
				break
			}
			words, err := shellWords(arg)
			if err != nil {
				bad("doctest: env: %v", err)
				break
			}
			for _, w := range words {
				if k, _, ok := strings.Cut(w, "="); !ok || k == "" {
					bad("doctest: env: %q is not NAME=VALUE", w)
					continue
				}
				d.Env = append(d.Env, w)
			}
		case "exit":
			if !needArg("N") {
				break
			}
			code, err := strconv.Atoi(arg)
			if err != nil || code < 0 || code > 255 {
				bad("doctest: exit: %q is not an exit status (0 to 255)", arg)
			} else if once(d.HasExit) {
				d.Exit, d.HasExit = code, true
			}
		case "before":
			if needArg("SHELL") {
				d.Before = append(d.Before, arg)
			}
		case "":
			bad("doctest: cannot read %q: want directives separated by ';' (%s)", s, docDirectiveNames)
			return problems
		default:
			bad("doctest: unknown directive %q (known: %s)", name, docDirectiveNames)
		}
	}
}

// checkDirectives reports directives that contradict each other or the block.
func checkDirectives(b *docBlock) []string {
	d := b.Dir
	var problems []string
	if d.Skip != "" && d.Output {
		problems = append(problems, "doctest: skip and output together: a block is one or the other")
	}
	if d.Skip != "" || d.Output {
		var run []string
		for _, x := range []struct {
			on   bool
			name string
		}{{d.OwnServer, "own-server"}, {d.Postgres && !d.HasServer, "postgres"}, {len(d.Files) > 0, "files"},
			{len(d.Env) > 0, "env"}, {d.HasExit, "exit"}, {len(d.Before) > 0, "before"}} {
			if x.on {
				run = append(run, x.name)
			}
		}
		if len(run) > 0 {
			problems = append(problems, fmt.Sprintf("doctest: %s on a block that is not run (skip/output): remove it", strings.Join(run, ", ")))
		}
	}
	return problems
}

// shellWords splits s as a shell splits a simple command's words: blanks separate them,
// single quotes and double quotes group, a backslash escapes (no expansion is done).
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unclosed ' in %q", s)
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`+"`", s[i+1]) >= 0 {
					i++
				}
				w.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unclosed \" in %q", s)
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			w.WriteByte(s[i])
			inWord = true
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

var (
	headingCode  = regexp.MustCompile("(`+)(.*?)(`+)")
	headingLink  = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	headingRef   = regexp.MustCompile(`!?\[([^\]]*)\]\[[^\]]*\]`)
	headingTag   = regexp.MustCompile(`<[^>]*>`)
	headingEmph  = regexp.MustCompile(`(^|[\s(])[_*]+|[_*]+($|[\s).,:;!?])`)
	headingStars = regexp.MustCompile(`\*+|~~`)
)

// docSlug is the anchor GitHub gives a heading: its rendered text lower-cased, every
// character but letters, digits, '-', '_' and spaces dropped, each space made a '-'.
// (GitHub then adds -1, -2... to repeats; parseDocPage does.)
func docSlug(heading string) string {
	// The rendered text: code spans keep their content verbatim; links and images their
	// text; tags, emphasis and backslashes go.
	var text strings.Builder
	rest := heading
	for {
		loc := headingCode.FindStringSubmatchIndex(rest)
		if loc == nil || rest[loc[2]:loc[3]] != rest[loc[6]:loc[7]] {
			text.WriteString(docSlugPlain(rest))
			break
		}
		text.WriteString(docSlugPlain(rest[:loc[0]]))
		text.WriteString(strings.TrimSpace(rest[loc[4]:loc[5]]))
		rest = rest[loc[1]:]
	}
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text.String())) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// docSlugPlain renders heading text outside code spans.
func docSlugPlain(s string) string {
	s = headingLink.ReplaceAllString(s, "$1")
	s = headingRef.ReplaceAllString(s, "$1")
	s = headingTag.ReplaceAllString(s, "")
	s = headingEmph.ReplaceAllString(s, "$1$2")
	s = headingStars.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, `\`, "")
}

// docLineLinks returns the link targets on one line of text outside code blocks: inline
// links and images, a reference definition, and the href/src of HTML a and img tags.
// Code spans are not text: links in them are not links.
func docLineLinks(line string) []string {
	var out []string
	if m := refDef.FindStringSubmatch(line); m != nil {
		out = append(out, strings.Trim(m[1], "<>"))
	}
	text := stripCodeSpans(line)
	for _, m := range htmlLinkAttr.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	for i := 0; ; {
		j := strings.Index(text[i:], "](")
		if j < 0 {
			break
		}
		start := i + j + 2
		target, end, ok := linkDestination(text[start:])
		if ok {
			out = append(out, target)
		}
		i = start + end
	}
	return out
}

// stripCodeSpans blanks the code spans of a line (a run of backticks to the next run of
// the same length); an unmatched run stays literal.
func stripCodeSpans(line string) string {
	var b strings.Builder
	for i := 0; i < len(line); {
		if line[i] != '`' {
			b.WriteByte(line[i])
			i++
			continue
		}
		n := 0
		for i+n < len(line) && line[i+n] == '`' {
			n++
		}
		// Find a closing run of exactly n backticks.
		closeAt := -1
		for k := i + n; k < len(line); {
			if line[k] != '`' {
				k++
				continue
			}
			m := 0
			for k+m < len(line) && line[k+m] == '`' {
				m++
			}
			if m == n {
				closeAt = k
				break
			}
			k += m
		}
		if closeAt < 0 {
			b.WriteString(line[i : i+n])
			i += n
			continue
		}
		b.WriteString(strings.Repeat(" ", closeAt+n-i))
		i = closeAt + n
	}
	return b.String()
}

// linkDestination reads a link's destination after "](": <...>, or up to a blank or the
// ')' that balances, then an optional title and ')'. It returns the destination and how
// much it read.
func linkDestination(s string) (dest string, n int, ok bool) {
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	if i < len(s) && s[i] == '<' {
		j := strings.IndexByte(s[i:], '>')
		if j < 0 {
			return "", i, false
		}
		dest, i = s[i+1:i+j], i+j+1
	} else {
		depth, start := 0, i
		for ; i < len(s); i++ {
			c := s[i]
			if c == '\\' && i+1 < len(s) {
				i++
				continue
			}
			if c == ' ' || c == '\t' {
				break
			}
			if c == '(' {
				depth++
			}
			if c == ')' {
				if depth == 0 {
					break
				}
				depth--
			}
		}
		dest = s[start:i]
	}
	// An optional title, then ')'.
	rest := strings.TrimLeft(s[i:], " \t")
	if rest != "" && (rest[0] == '"' || rest[0] == '\'' || rest[0] == '(') {
		closer := rest[0]
		if closer == '(' {
			closer = ')'
		}
		if j := strings.IndexByte(rest[1:], closer); j >= 0 {
			rest = strings.TrimLeft(rest[j+2:], " \t")
		}
	}
	if !strings.HasPrefix(rest, ")") {
		return "", i, false
	}
	return dest, len(s) - len(rest) + 1, true
}

// docAnchorsFunc returns the anchors of a Markdown file of the root (slash path).
type docAnchorsFunc func(file string) (map[string]bool, error)

// checkDocLinks checks a page's links against root: a relative target must name a file
// or directory in root; its #anchor, on a Markdown file (or the page itself), must be an
// anchor of that file. External links (a scheme, or //host) are counted, not fetched.
func checkDocLinks(p *docPage, root fs.FS, anchors docAnchorsFunc) (problems []docProblem, external int) {
	for _, l := range p.Links {
		bad := func(format string, args ...any) {
			problems = append(problems, docProblem{l.Line, fmt.Sprintf("link %q: %s", l.Target, fmt.Sprintf(format, args...))})
		}
		t := l.Target
		if t == "" {
			bad("empty target")
			continue
		}
		if urlScheme.MatchString(t) || strings.HasPrefix(t, "//") {
			external++
			continue
		}
		file, anchor, _ := strings.Cut(t, "#")
		if q := strings.IndexByte(file, '?'); q >= 0 {
			file = file[:q]
		}
		target := p.Path
		if file != "" {
			f, err := url.PathUnescape(file)
			if err != nil {
				bad("%v", err)
				continue
			}
			if strings.HasPrefix(f, "/") {
				target = path.Clean(strings.TrimPrefix(f, "/"))
			} else {
				target = path.Join(path.Dir(p.Path), f)
			}
			if target == ".." || strings.HasPrefix(target, "../") {
				bad("points outside the repository")
				continue
			}
			if _, err := fs.Stat(root, target); err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					bad("%s does not exist", target)
				} else {
					bad("%v", err)
				}
				continue
			}
		}
		if anchor == "" || !strings.HasSuffix(target, ".md") {
			continue
		}
		a, err := anchors(target)
		if err != nil {
			bad("%v", err)
			continue
		}
		if !a[anchor] {
			msg := fmt.Sprintf("%s has no heading or <a id> with the anchor #%s", target, anchor)
			if near := nearestAnchor(a, anchor); near != "" {
				msg += fmt.Sprintf(" (did you mean #%s?)", near)
			}
			bad("%s", msg)
		}
	}
	return problems, external
}

// nearestAnchor is the anchor closest to want by edit distance, if reasonably close.
func nearestAnchor(anchors map[string]bool, want string) string {
	best, bestD := "", len(want)/2+2
	keys := make([]string, 0, len(anchors))
	for a := range anchors {
		keys = append(keys, a)
	}
	slices.Sort(keys)
	for _, a := range keys {
		if d := editDistance(strings.ToLower(a), strings.ToLower(want)); d < bestD {
			best, bestD = a, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
