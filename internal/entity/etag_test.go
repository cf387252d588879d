package entity

import (
	"errors"
	"strings"
	"testing"
)

// TestParseETag is the If-Match grammar, case by case: a value that is not one weak
// entity-tag (strong tags included) is malformed (400); every well-formed weak tag is a
// precondition that matches only when it names the version in the service's own spelling.
func TestParseETag(t *testing.T) {
	const ts = "2021-04-06T21:03:31.9231271Z"
	v, err := ParseDateTime(ts)
	if err != nil {
		t.Fatal(err)
	}
	enc := strings.ReplaceAll(ts, ":", "%3A")
	lower := strings.ReplaceAll(ts, ":", "%3a")
	const (
		match  = "match"  // names v
		never  = "never"  // well formed, can never match (412)
		reject = "reject" // malformed (400)
	)
	cases := []struct{ in, want string }{
		// What the server hands out, and the spellings clients echo it in.
		{`W/"datetime'` + enc + `'"`, match},
		{`W/"datetime'` + ts + `'"`, match},    // ':' decoded by the client
		{`W/"datetime'` + lower + `'"`, match}, // lower-case percent-encoding
		{`W/"datetime'2021-04-06T21%3A03:31.9231271Z'"`, match},
		{` W/"datetime'` + enc + `'" `, match},     // optional whitespace around
		{"\tW/\"datetime'" + enc + "'\"\t", match}, // tabs too
		{`W/ "datetime'` + enc + `'"`, match},      // whitespace after W/ (.NET reads it)
		// Lower-case w/: .NET's EntityTagHeaderValue reads it as the same weak tag.
		{`w/"datetime'` + enc + `'"`, match},
		{`w/"datetime'` + ts + `'"`, match},

		// Well formed, never ours: a failed precondition.
		{`w/"wrong"`, never},
		{`W/"wrong"`, never},
		{`W/""`, never},
		{`W/"a b"`, never},
		{`W/"a,b"`, never},  // a comma inside the quotes is part of the tag
		{`W/"a\"b"`, never}, // quoted-pair, as .NET reads it
		{`W/"datetime'2021-04-06T21%3A03%3A31.923127Z'"`, never},         // 6 digits: not our spelling
		{`W/"datetime'2021-04-06T21%3A03%3A31.92312710Z'"`, never},       // 8 digits
		{`W/"datetime'2021-04-06T23%3A03%3A31.9231271+02%3A00'"`, never}, // same instant, other form
		{`W/"datetime'2021-04-06t21%3A03%3A31.9231271z'"`, never},        // case of T and Z
		{`W/"DATETIME'` + enc + `'"`, never},
		{`W/"datetime'` + enc + `"`, never}, // no closing quote in the tag
		{`W/"datetime'yesterday'"`, never},
		{`W/"datetime'2021-04-06T21%3B03%3A31.9231271Z'"`, never},

		// Not one weak entity-tag: 400.
		{`"datetime'` + enc + `'"`, reject}, // strong: the service takes weak tags only
		{`"wrong"`, reject},
		{`"*"`, reject},
		{` "wrong" `, reject},
		{``, reject},
		{`W/`, reject},
		{`w/`, reject},
		{`W`, reject},
		{`"`, reject},
		{`W/"unterminated`, reject},
		{`W/"a\"`, reject}, // the escaped quote leaves it unterminated
		{`datetime'` + enc + `'`, reject},
		{`W/datetime'` + enc + `'`, reject},
		{`W\"x"`, reject},
		{`X/"x"`, reject},
		{`W/"a" junk`, reject},
		{`"a""b"`, reject},
		{`"a", "b"`, reject}, // a list: the service wants exactly one
		{`W/"datetime'` + enc + `'", W/"x"`, reject},
		{`*`, reject}, // "*" is If-Match's, handled before ParseETag
		{`*, W/"x"`, reject},
	}
	for _, c := range cases {
		got, ok, err := ParseETag(c.in)
		var res string
		switch {
		case errors.Is(err, ErrBadETag):
			res = reject
		case err != nil:
			t.Errorf("ParseETag(%q): unexpected error %v", c.in, err)
			continue
		case ok && got == v:
			res = match
		case ok:
			t.Errorf("ParseETag(%q) names version %d, want %d", c.in, got, v)
			continue
		default:
			res = never
		}
		if res != c.want {
			t.Errorf("ParseETag(%q) = %s, want %s", c.in, res, c.want)
		}
	}
}

// FuzzParseETag: ParseETag never panics, an ETag it accepts as naming a version names the
// one whose ETag it re-parses to, and every ETag the server writes parses back.
func FuzzParseETag(f *testing.F) {
	for _, s := range []string{`W/"datetime'2021-04-06T21%3A03%3A31.9231271Z'"`, `w/"x"`, `"x"`, `*`, ``,
		`W/ "a\"b"`, `"a", "b"`, `W/"datetime'2021-04-06T21:03:31.9231271Z'"`} {
		f.Add(s)
	}
	f.Add(ETag(0))
	f.Fuzz(func(t *testing.T, s string) {
		v, ok, err := ParseETag(s)
		if err != nil && !errors.Is(err, ErrBadETag) {
			t.Fatalf("ParseETag(%q): %v", s, err)
		}
		if ok {
			if err != nil {
				t.Fatalf("ParseETag(%q): ok with an error", s)
			}
			w, ok2, err2 := ParseETag(ETag(v))
			if !ok2 || err2 != nil || w != v {
				t.Fatalf("ETag(%d) = %q does not parse back: %d %v %v", v, ETag(v), w, ok2, err2)
			}
		}
	})
}
