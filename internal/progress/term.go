package progress

import (
	"os"
	"time"

	"golang.org/x/term"
)

// ForFile starts a reporter on f (stderr, normally): a bar when f is a terminal (as wide
// as the terminal), plain lines every interval otherwise (0: 5 s), Quiet when asked.
func ForFile(f *os.File, quiet bool, verb string, interval time.Duration) *Reporter {
	o := Options{Mode: Lines, Verb: verb, Interval: interval}
	switch {
	case quiet:
		o.Mode = Quiet
	case term.IsTerminal(int(f.Fd())):
		o.Mode, o.Interval = Bar, 0
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 20 {
			o.Width = w
		}
	}
	return New(f, o)
}
