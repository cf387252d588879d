// Package progress reports a long run to a person: a progress bar redrawn in place on a
// terminal, plain periodic lines otherwise (a log, a pipe, CI), nothing but errors with
// Quiet, and one summary line at the end (entities, bytes, errors, time).
//
// The bar is redrawn at most ten times a second, whatever the rate of updates: counting
// is a few atomic adds, drawing happens on a ticker. Plain lines hold no control
// characters at all.
package progress

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is how progress is shown.
type Mode int

const (
	// Bar redraws one line in place (a terminal).
	Bar Mode = iota
	// Lines prints a line every Interval (not a terminal).
	Lines
	// Quiet prints errors only, and no summary.
	Quiet
)

// Options configure a Reporter.
type Options struct {
	Mode Mode
	// Verb names the work in the summary: "exported", "imported", "copied".
	Verb string
	// Width is the terminal's width for the bar (0: 80).
	Width int
	// Interval is the pause between plain lines (0: 5 s) or bar redraws (0: 100 ms).
	Interval time.Duration
	// Now is the clock (nil: time.Now), for tests.
	Now func() time.Time
}

// Reporter counts and shows progress; its counting methods are safe for concurrent use.
// It implements transfer.Observer.
type Reporter struct {
	w     io.Writer
	o     Options
	start time.Time

	entities, bytes, errors, retries, expired atomic.Int64
	total                                     atomic.Int64 // 0: unknown

	mu      sync.Mutex // serialises writes to w
	drawn   bool       // a bar is on the screen (to be cleared before a message)
	stop    chan struct{}
	stopped chan struct{}
}

// New starts a reporter writing to w.
func New(w io.Writer, o Options) *Reporter {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Width <= 0 {
		o.Width = 80
	}
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
		if o.Mode == Bar {
			o.Interval = 100 * time.Millisecond
		}
	}
	r := &Reporter{w: w, o: o, start: o.Now(), stop: make(chan struct{}), stopped: make(chan struct{})}
	go r.loop()
	return r
}

// SetTotal sets the number of entities expected, for the percentage and ETA.
func (r *Reporter) SetTotal(n int64) { r.total.Store(n) }

// Done counts entities done and their bytes.
func (r *Reporter) Done(entities, bytes int) {
	r.entities.Add(int64(entities))
	r.bytes.Add(int64(bytes))
}

// Failed counts an error and prints it on its own line (even with Quiet).
func (r *Reporter) Failed(err error) {
	r.errors.Add(1)
	r.Printf("error: %v", err)
}

// Stopped counts the error that ended the run, which the command reports itself, so
// that the summary of a run an error stopped does not say "0 errors".
func (r *Reporter) Stopped(err error) {
	if err != nil {
		r.errors.Add(1)
	}
}

// Retried counts a retried call.
func (r *Reporter) Retried(error) { r.retries.Add(1) }

// Expired counts entities not written because they had expired (an elastic table's
// time-to-live) by the time they would have been.
func (r *Reporter) Expired(entities int) { r.expired.Add(int64(entities)) }

// Printf prints a message on its own line, clearing the bar first.
func (r *Reporter) Printf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if r.o.Mode != Bar {
		msg = strings.Map(noControl, msg)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.drawn {
		io.WriteString(r.w, "\r\x1b[K")
		r.drawn = false
	}
	io.WriteString(r.w, msg+"\n")
}

// Errors is the number of errors counted.
func (r *Reporter) Errors() int64 { return r.errors.Load() }

func (r *Reporter) loop() {
	defer close(r.stopped)
	if r.o.Mode == Quiet {
		<-r.stop
		return
	}
	t := time.NewTicker(r.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.draw()
		}
	}
}

func (r *Reporter) draw() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.o.Mode == Bar {
		io.WriteString(r.w, "\r"+r.barLine()+"\x1b[K")
		r.drawn = true
		return
	}
	io.WriteString(r.w, r.plainLine()+"\n")
}

// Finish stops the display and prints the summary (unless Quiet).
func (r *Reporter) Finish() {
	close(r.stop)
	<-r.stopped
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.drawn {
		io.WriteString(r.w, "\r\x1b[K")
		r.drawn = false
	}
	if r.o.Mode != Quiet {
		io.WriteString(r.w, r.Summary()+"\n")
	}
}

// Summary is the closing line: entities, bytes, errors, retries, time and rate.
func (r *Reporter) Summary() string {
	el := r.o.Now().Sub(r.start)
	n := r.entities.Load()
	s := fmt.Sprintf("%s %s entities (%s) in %s, %s/s; %d errors", r.o.Verb, Count(n), Bytes(r.bytes.Load()), el.Round(time.Millisecond), Count(rate(n, el)), r.errors.Load())
	if k := r.retries.Load(); k > 0 {
		s += fmt.Sprintf(", %d retries", k)
	}
	if k := r.expired.Load(); k > 0 {
		s += fmt.Sprintf(", %s expired (not written)", Count(k))
	}
	return s
}

func rate(n int64, el time.Duration) int64 {
	if el <= 0 {
		return 0
	}
	return int64(float64(n) / el.Seconds())
}

// plainLine is a periodic line: counts, rate, elapsed and, with a total, percent and ETA.
func (r *Reporter) plainLine() string {
	n, el := r.entities.Load(), r.o.Now().Sub(r.start)
	s := fmt.Sprintf("%s entities", Count(n))
	if t := r.total.Load(); t > 0 {
		s = fmt.Sprintf("%s/%s entities (%d%%)", Count(n), Count(t), percent(n, t))
	}
	s += fmt.Sprintf(", %s/s, elapsed %s", Count(rate(n, el)), Clock(el))
	if eta, ok := r.eta(n, el); ok {
		s += ", ETA " + Clock(eta)
	}
	if e := r.errors.Load(); e > 0 {
		s += fmt.Sprintf(", %d errors", e)
	}
	return s
}

// barLine is the bar: with a total, [#####-----] and a percentage, then the plain
// line's figures; fitted to the width.
func (r *Reporter) barLine() string {
	n, el := r.entities.Load(), r.o.Now().Sub(r.start)
	info := fmt.Sprintf(" %s entities  %s/s  %s", Count(n), Count(rate(n, el)), Clock(el))
	if eta, ok := r.eta(n, el); ok {
		info += "  ETA " + Clock(eta)
	}
	t := r.total.Load()
	if t <= 0 {
		return fit(info[1:], r.o.Width-1)
	}
	pct := percent(n, t)
	width := r.o.Width - 1 - len(info) - 7
	if width < 10 {
		return fit(fmt.Sprintf("%3d%%", pct)+info, r.o.Width-1)
	}
	fill := int(int64(width) * min(n, t) / t)
	return fmt.Sprintf("[%s%s] %3d%%", strings.Repeat("#", fill), strings.Repeat("-", width-fill), pct) + info
}

func (r *Reporter) eta(n int64, el time.Duration) (time.Duration, bool) {
	t := r.total.Load()
	if t <= 0 || n <= 0 || n >= t {
		return 0, false
	}
	return time.Duration(float64(el) * float64(t-n) / float64(n)), true
}

func percent(n, t int64) int64 { return min(100, n*100/t) }

func fit(s string, w int) string {
	if len(s) > w && w > 0 {
		return s[:w]
	}
	return s
}

func noControl(r rune) rune {
	if r < 0x20 || r == 0x7f {
		return ' '
	}
	return r
}

// Count writes n with thousands separators: 1,234,567.
func Count(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Bytes writes a size in B, KiB, MiB or GiB.
func Bytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}

// Clock writes a duration as m:ss or h:mm:ss.
func Clock(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
