package progress

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestLines(t *testing.T) {
	for _, c := range []struct {
		name        string
		total, done int64
		elapsed     time.Duration
		plain, bar  string
	}{
		{"no total", 0, 12345, 2 * time.Second, "12,345 entities, 6,172/s, elapsed 0:02", "12,345 entities  6,172/s  0:02"},
		{"with total", 100000, 25000, 10 * time.Second, "25,000/100,000 entities (25%), 2,500/s, elapsed 0:10, ETA 0:30",
			"]  25% 25,000 entities  2,500/s  0:10  ETA 0:30"},
		{"done", 10, 10, time.Hour + 2*time.Minute, "10/10 entities (100%), 0/s, elapsed 1:02:00", "] 100% 10 entities  0/s  1:02:00"},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := &clock{t: time.Unix(1000, 0)}
			r := New(&bytes.Buffer{}, Options{Mode: Quiet, Width: 100, Now: clk.now})
			r.SetTotal(c.total)
			r.Done(int(c.done), 10)
			clk.add(c.elapsed)
			if got := r.plainLine(); got != c.plain {
				t.Errorf("plain line %q, want %q", got, c.plain)
			}
			got := r.barLine()
			if c.total > 0 {
				// A bar filled in proportion, then the figures, exactly the width.
				inner := got[1:strings.IndexByte(got, ']')]
				fill := strings.Count(inner, "#")
				if got[0] != '[' || !strings.HasSuffix(got, c.bar) || len(got) != 99 || int64(fill) != int64(len(inner))*c.done/c.total || strings.Trim(inner, "#-") != "" {
					t.Errorf("bar %q (%d wide, %d of %d filled), want …%q 99 wide", got, len(got), fill, len(inner), c.bar)
				}
			} else if got != c.bar {
				t.Errorf("bar %q, want %q", got, c.bar)
			}
			r.Finish()
		})
	}
}

// Plain mode prints lines without control characters, errors on their own lines, and
// the summary last; the bar mode redraws in place and clears itself before a message.
func TestModes(t *testing.T) {
	var plain syncBuf
	r := New(&plain, Options{Mode: Lines, Verb: "copied", Interval: 5 * time.Millisecond})
	r.Done(100, 1<<20)
	time.Sleep(30 * time.Millisecond)
	r.Failed(errors.New("line 3:\tbad\x1b[31m"))
	r.Retried(nil)
	r.Finish()
	out := plain.String()
	for _, c := range out {
		if c < 0x20 && c != '\n' {
			t.Fatalf("control character %q in plain output %q", c, out)
		}
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if !strings.HasPrefix(lines[0], "100 entities, ") || !strings.Contains(out, "error: line 3:") ||
		!strings.HasPrefix(lines[len(lines)-1], "copied 100 entities (1.0 MiB) in ") || !strings.HasSuffix(lines[len(lines)-1], "; 1 errors, 1 retries") {
		t.Errorf("plain output:\n%s", out)
	}

	var bar syncBuf
	r = New(&bar, Options{Mode: Bar, Verb: "copied", Interval: 5 * time.Millisecond, Width: 60})
	r.Done(5, 5)
	time.Sleep(30 * time.Millisecond)
	r.Printf("a message")
	r.Finish()
	out = bar.String()
	if !strings.HasPrefix(out, "\r5 entities") || !strings.Contains(out, "\x1b[K\r\x1b[Ka message\n") || !strings.HasSuffix(out, "copied 5 entities (5 B) in "+out[strings.LastIndex(out, " in ")+4:]) {
		t.Errorf("bar output %q", out)
	}

	var quiet syncBuf
	r = New(&quiet, Options{Mode: Quiet, Interval: time.Millisecond})
	r.Done(5, 5)
	time.Sleep(10 * time.Millisecond)
	r.Finish()
	if quiet.String() != "" {
		t.Errorf("quiet output %q", quiet.String())
	}
}

func TestFormats(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := Count(n); got != want {
			t.Errorf("Count(%d) = %q", n, got)
		}
	}
	for n, want := range map[int64]string{5: "5 B", 2048: "2.0 KiB", 3 << 20: "3.0 MiB", 5 << 30: "5.00 GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q", n, got)
		}
	}
	for d, want := range map[time.Duration]string{0: "0:00", 61 * time.Second: "1:01", 3725 * time.Second: "1:02:05"} {
		if got := Clock(d); got != want {
			t.Errorf("Clock(%v) = %q", d, got)
		}
	}
}
