// Package accesslog writes the access log: one JSON line per answered request, saying who
// did what to which table and partition, how it ended and how long it took — the record an
// operator keeps, as opposed to the request log (server/requestlog.go), which is for
// debugging and samples.
//
// A Log is an observe.Observer. Each line is encoded on the request's goroutine into a
// pooled buffer and copied, whole and under a mutex, into one in-memory buffer, so lines
// never interleave; that buffer goes to the file when it fills and at most FlushDelay
// after a line was added, and on Reopen and Close. Memory is bounded by the buffer: when
// it is full, the request that fills it writes it out and the others wait — an access log
// that drops records under load is not one. A line the file refuses (disk full, I/O error)
// is lost and counted (Lost), and the failure logged.
//
// A line never holds a credential: nothing of the Authorization header or of the query
// string (a SAS signature travels there) is in observe.Request, and the server hands over
// every value a client chose (account, table, keys, client request id) redacted
// (auth.Redactor), so that a SAS a client percent-encoded into its path, or a key in a
// header, is not written either.
//
// Rotation is left to the usual tools: they rename the file and make the process call
// Reopen (SIGHUP in cerulean serve), which opens a new file at the same path.
package accesslog

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ceruleandb/cerulean/internal/edmjson"
	"github.com/ceruleandb/cerulean/internal/observe"
)

// Stdout is the path that names the process's standard output.
const Stdout = "-"

// DefaultFlushDelay is how long a line may wait in memory before it is written.
const DefaultFlushDelay = 100 * time.Millisecond

// bufSize is the in-memory buffer: lines are written when it would overflow.
const bufSize = 64 << 10

// Options tune a Log.
type Options struct {
	// FlushDelay is the longest a line waits in memory (DefaultFlushDelay if 0).
	FlushDelay time.Duration
	// Logger gets write and reopen failures (slog.Default() if nil).
	Logger *slog.Logger
}

// Log is an open access log. It is safe for concurrent use.
type Log struct {
	path  string
	delay time.Duration
	log   *slog.Logger

	mu      sync.Mutex
	f       *os.File // the file written; os.Stdout for Stdout
	buf     []byte   // lines not yet written
	nbuf    int      // how many
	timer   *time.Timer
	pending bool // timer armed for buf
	closed  bool
	failing bool // the last write failed (logged once per failure run)

	lost atomic.Int64
}

// Open opens (creating it if needed, appending if it exists) the access log at path, or
// standard output if path is Stdout.
func Open(path string, opts Options) (*Log, error) {
	l := &Log{path: path, delay: opts.FlushDelay, log: opts.Logger, buf: make([]byte, 0, bufSize)}
	if l.delay <= 0 {
		l.delay = DefaultFlushDelay
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	f, err := l.open()
	if err != nil {
		return nil, err
	}
	l.f = f
	l.timer = time.AfterFunc(time.Hour, l.timedFlush)
	l.timer.Stop()
	return l, nil
}

func (l *Log) open() (*os.File, error) {
	if l.path == Stdout {
		return os.Stdout, nil
	}
	// 0640: the lines name accounts, tables, keys and client addresses.
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("access log: %w", err)
	}
	return f, nil
}

// Path is the path the log was opened with.
func (l *Log) Path() string { return l.path }

// Lost is how many lines the file refused (write errors) since the log was opened.
func (l *Log) Lost() int64 { return l.lost.Load() }

// linePool recycles the buffers lines are encoded into.
var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// Observe writes r's line. It implements observe.Observer.
func (l *Log) Observe(r *observe.Request) {
	bp := linePool.Get().(*[]byte)
	line := AppendLine((*bp)[:0], r)
	l.mu.Lock()
	if !l.closed {
		if len(l.buf)+len(line) > cap(l.buf) {
			l.writeLocked()
		}
		if len(line) > cap(l.buf) { // a line longer than the buffer: straight through
			l.writeBytesLocked(line, 1)
		} else {
			l.buf = append(l.buf, line...)
			l.nbuf++
			if !l.pending {
				l.pending = true
				l.timer.Reset(l.delay)
			}
		}
	}
	l.mu.Unlock()
	if cap(line) <= 64<<10 {
		*bp = line
		linePool.Put(bp)
	}
}

// timedFlush writes what waited FlushDelay.
func (l *Log) timedFlush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = false
	if !l.closed {
		l.writeLocked()
	}
}

// writeLocked writes the buffered lines to the file.
func (l *Log) writeLocked() {
	if len(l.buf) == 0 {
		return
	}
	l.writeBytesLocked(l.buf, l.nbuf)
	l.buf, l.nbuf = l.buf[:0], 0
}

// writeBytesLocked writes p, which holds n lines, counting them lost if the file refuses.
func (l *Log) writeBytesLocked(p []byte, n int) {
	_, err := l.f.Write(p)
	if err != nil {
		// A partial write may leave a torn line; the next one starts on a line of its own.
		_, _ = l.f.Write([]byte{'\n'})
		l.lost.Add(int64(n))
		if !l.failing {
			l.failing = true
			l.log.Error("access log: write failed; lines are lost until it succeeds again", "path", l.path, "err", err)
		}
		return
	}
	if l.failing {
		l.failing = false
		l.log.Info("access log: writing again", "path", l.path, "lost_so_far", l.lost.Load())
	}
}

// Flush writes the buffered lines now.
func (l *Log) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.writeLocked()
	}
}

// Reopen writes the buffered lines, then opens the file at the log's path anew (creating
// it) and writes the following lines there: after a rotation tool renamed the file, the
// old one is complete and a new one begins. If the new file cannot be opened, the log
// keeps writing to the old one and Reopen says why. For Stdout, Reopen only flushes.
func (l *Log) Reopen() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("access log: closed")
	}
	l.writeLocked()
	if l.path == Stdout {
		return nil
	}
	f, err := l.open()
	if err != nil {
		return err
	}
	old := l.f
	l.f = f
	if err := old.Close(); err != nil {
		l.log.Warn("access log: closing the previous file", "path", l.path, "err", err)
	}
	return nil
}

// Close writes the buffered lines and closes the file (not standard output). Lines
// observed after Close are discarded.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.writeLocked()
	l.closed = true
	l.timer.Stop()
	if l.f == os.Stdout {
		return nil
	}
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("access log: %w", err)
	}
	return nil
}

// TimeLayout is the layout of a line's "time": RFC 3339 in UTC with microseconds.
const TimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// AppendLine appends r's line, newline included, to b. The fields, always all present
// and in this order:
//
//	time               when the request arrived (TimeLayout, UTC)
//	request_id         the x-ms-request-id answered
//	client_request_id  the client's x-ms-client-request-id ("" if none)
//	account            the account addressed ("" if not understood)
//	operation          the Storage Analytics operation name ("InsertEntity", …)
//	table              the table addressed ("" if none)
//	partition_key      the PartitionKey of a single-entity operation or a $batch, else ""
//	status             the HTTP status answered
//	error_code         the x-ms-error-code answered ("" if none)
//	latency_ms         from arrival to answer, in milliseconds (fractional)
//	bytes_in           the request body's size
//	bytes_out          the response body's size
//	client_ip          the peer's address without port (the TCP peer: a proxy's address
//	                   behind a proxy; X-Forwarded-For is not trusted)
//	auth               "SharedKey", "SharedKeyLite", "SAS", "Bearer", "Unknown" or ""
//
// and when they apply: principal (who a bearer token names: its object id, "oid via
// appid" when it acted through another application), throttled (the scale target that refused the request), fault
// (the fault injected) and plan (a Query Entities answer's plan, as x-cerulean-plan
// says: "keys", "index ByEmail: 1 point", …).
func AppendLine(b []byte, r *observe.Request) []byte {
	b = append(b, `{"time":"`...)
	b = appendTime(b, r.Start)
	b = append(b, `","request_id":`...)
	b = edmjson.AppendString(b, r.ID)
	b = append(b, `,"client_request_id":`...)
	b = edmjson.AppendString(b, r.ClientRequestID)
	b = append(b, `,"account":`...)
	b = edmjson.AppendString(b, r.Account)
	b = append(b, `,"operation":`...)
	b = edmjson.AppendString(b, r.Operation)
	b = append(b, `,"table":`...)
	b = edmjson.AppendString(b, r.Table)
	b = append(b, `,"partition_key":`...)
	b = edmjson.AppendString(b, r.PartitionKey)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, `,"error_code":`...)
	b = edmjson.AppendString(b, r.ErrorCode)
	b = append(b, `,"latency_ms":`...)
	b = strconv.AppendFloat(b, float64(r.Latency.Nanoseconds())/1e6, 'f', 3, 64)
	b = append(b, `,"bytes_in":`...)
	b = strconv.AppendInt(b, r.BytesIn, 10)
	b = append(b, `,"bytes_out":`...)
	b = strconv.AppendInt(b, r.BytesOut, 10)
	b = append(b, `,"client_ip":`...)
	b = edmjson.AppendString(b, clientIP(r.RemoteAddr))
	b = append(b, `,"auth":`...)
	b = edmjson.AppendString(b, r.AuthScheme)
	if r.Principal != "" { // a bearer token's
		b = append(b, `,"principal":`...)
		b = edmjson.AppendString(b, r.Principal)
	}
	if r.Throttled != "" { // --scale-targets refused it
		b = append(b, `,"throttled":`...)
		b = edmjson.AppendString(b, r.Throttled)
	}
	if r.Fault != "" { // --faults injected it
		b = append(b, `,"fault":`...)
		b = edmjson.AppendString(b, r.Fault)
	}
	if r.Plan != "" { // a query's plan
		b = append(b, `,"plan":`...)
		b = edmjson.AppendString(b, r.Plan)
	}
	b = append(b, "}\n"...)
	return b
}

// appendTime appends t in TimeLayout: what t.UTC().AppendFormat(b, TimeLayout) writes
// for years 0 to 9999, at a fraction of the cost.
func appendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, TimeLayout)
	}
	hour, min, sec := t.Clock()
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, min, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	b = append(b, '.')
	b = appendDigits(b, t.Nanosecond()/1000, 6)
	return append(b, 'Z')
}

// appendDigits appends v (non-negative) in exactly n decimal digits.
func appendDigits(b []byte, v, n int) []byte {
	start := len(b)
	for range n {
		b = append(b, '0')
	}
	for i := len(b) - 1; i >= start; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return b
}

// clientIP is the host of a host:port address (the address itself if it has no port).
func clientIP(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}
