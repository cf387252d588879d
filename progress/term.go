package progress

import (
	"os"

	"golang.org/x/term"
)

// ForFile starts a reporter on f (stderr, normally): a bar when f is a terminal (as wide
// as the terminal), plain lines otherwise, Quiet when asked.
func ForFile(f *os.File, quiet bool, verb string) *Reporter {
	o := Options{Mode: Lines, Verb: verb}
	switch {
	case quiet:
		o.Mode = Quiet
	case term.IsTerminal(int(f.Fd())):
		o.Mode = Bar
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 20 {
			o.Width = w
		}
	}
	return New(f, o)
}
