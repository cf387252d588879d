package server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
)

// Request bodies are the one place a client decides how much memory the server holds and for
// how long, so they are read under three bounds:
//
//   - Memory grows only as bytes arrive: a body is read into fixed-size chunks, never into a
//     buffer sized from the declared Content-Length.
//   - Every chunk is taken from a server-wide budget of body bytes (Options.MaxBodyMemory).
//     When the budget is spent the request is answered 503 ServerBusy with Retry-After,
//     which every SDK retries, instead of buffering without bound. Bodies declared larger
//     than smallBody (or of unknown length) may use only half of the budget, so uploads of
//     large batches, stalled or not, cannot starve the ordinary small writes.
//   - One client may hold at most half of the budget, and half of what large bodies may
//     hold, so that another client always finds at least as much: 31 uploads of one client
//     trickling 4 MiB bodies used to hold every byte large bodies may hold, and every other
//     write over 64 KiB, from anyone, was refused for the five minutes a body may take
//     (issue 42, item 25). A client is a remote address — an IPv6 one by its /64, which
//     one host usually has whole — not a connection (free to open, and the trickling
//     uploads had one each) and not an account (one account serves every client of an
//     application, and every holder of its SASs). Behind a proxy all clients share its
//     address, and so its half. The time a body may hold its bytes is bounded as before:
//     BodyTimeout for the whole body, which for a large body is a minimum rate stricter
//     than those of Kestrel (MinRequestBodyDataRate, 240 B/s after a 5 s grace), IIS
//     (minBytesPerSecond, 240 B/s) or Apache (mod_reqtimeout, MinRate=500 B/s): a 4 MiB body
//     must come at 14 KB/s; a client that sends faster than that is served, however slow.
//   - What a request keeps once its body is decoded counts too: the entities of a $batch
//     and its answer (hold), a bulk request's index of its operations and the groups it
//     has decoded for the engine (holdKept). The operations of a bulk request took 1.2 to
//     11.6 times their JSON's size in memory once decoded, and only the JSON was counted,
//     so --max-body-memory bounded a fraction of what it said (issue 42, item 27). A bulk
//     body now stays in the chunks it was read into (readBulkBody), and is decoded one
//     group at a time (bulk.go).
//   - Reading is timed: a client may pause at most Options.StallTimeout between bytes and
//     take at most Options.BodyTimeout for the whole body; past either it is answered 500
//     OperationTimedOut (the service's code for a timed-out request) and its connection is
//     closed. During shutdown the pause allowed shrinks to shutdownStall.

const (
	// bodyChunk is the unit in which bodies are read and budgeted.
	bodyChunk = 32 << 10
	// smallBody is the largest declared Content-Length that may use the whole budget.
	smallBody = 64 << 10
	// shutdownStall is the pause allowed to a body being received once shutdown begins: an
	// upload that is still moving may finish within the grace period, a stalled one is cut.
	shutdownStall = time.Second
)

// chunkPool recycles body chunks, so uploads refused or cut off leave no garbage behind for
// the next ones to pile onto.
var chunkPool = sync.Pool{New: func() any { b := make([]byte, bodyChunk); return &b }}

// bodyBudget counts the request-body bytes held by all requests together, and by each
// client.
type bodyBudget struct {
	limit int64 // every body together
	large int64 // bodies declared larger than smallBody, or of unknown length, together
	used  atomic.Int64
	inBig atomic.Int64
	// clients is what each client holds, of all bodies and of large ones: at most half
	// of limit and of large. Clients are told apart by clientSlot, a hash of their
	// address; two that share a slot share its halves.
	clients []clientHold
}

// clientHold is what one client slot holds.
type clientHold struct{ all, big atomic.Int64 }

// clientSlots is how many clients the budget tells apart.
const clientSlots = 4096

func newBodyBudget(limit int64) *bodyBudget {
	return &bodyBudget{limit: limit, large: limit / 2, clients: make([]clientHold, clientSlots)}
}

// clientCap is the most one client may hold of small or of large bodies.
func (b *bodyBudget) clientCap(large bool) int64 {
	if large {
		return b.large / 2
	}
	return b.limit / 2
}

// acquire takes n bytes for a small or a large body of the client in slot c; false means
// the budget, or the client's share of it, is spent.
func (b *bodyBudget) acquire(n int64, large bool, c int) bool {
	ch := &b.clients[c]
	if !addUpTo(&ch.all, n, b.limit/2) {
		return false
	}
	if large && !addUpTo(&ch.big, n, b.large/2) {
		ch.all.Add(-n)
		return false
	}
	if large && !addUpTo(&b.inBig, n, b.large) {
		ch.all.Add(-n)
		ch.big.Add(-n)
		return false
	}
	if !addUpTo(&b.used, n, b.limit) {
		ch.all.Add(-n)
		if large {
			ch.big.Add(-n)
			b.inBig.Add(-n)
		}
		return false
	}
	return true
}

// addUpTo adds n to a unless that takes it past most; it reports whether it did.
func addUpTo(a *atomic.Int64, n, most int64) bool {
	for {
		u := a.Load()
		if u+n > most {
			return false
		}
		if a.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// acquireKept takes n bytes for what a request keeps beyond its body once the body has
// arrived (a bulk request's index and the groups it applies): as acquire, but not from
// the client's share of large bodies. That share bounds what one client's uploads hold
// while they arrive, at the client's pace, and a bulk body may take all of it; what is
// kept lives only while the server applies the request, at the server's pace. It still
// counts against the client's half of the budget and against what large bodies hold
// together, so other clients and small writes keep theirs.
func (b *bodyBudget) acquireKept(n int64, large bool, c int) bool {
	ch := &b.clients[c]
	if !addUpTo(&ch.all, n, b.limit/2) {
		return false
	}
	if large && !addUpTo(&b.inBig, n, b.large) {
		ch.all.Add(-n)
		return false
	}
	if !addUpTo(&b.used, n, b.limit) {
		ch.all.Add(-n)
		if large {
			b.inBig.Add(-n)
		}
		return false
	}
	return true
}

func (b *bodyBudget) releaseKept(n int64, large bool, c int) {
	b.used.Add(-n)
	b.clients[c].all.Add(-n)
	if large {
		b.inBig.Add(-n)
	}
}

func (b *bodyBudget) release(n int64, large bool, c int) {
	b.used.Add(-n)
	b.clients[c].all.Add(-n)
	if large {
		b.inBig.Add(-n)
		b.clients[c].big.Add(-n)
	}
}

// clientSlot is the budget slot of the client at remoteAddr (host:port): its IP address,
// or an IPv6 address's first 64 bits, hashed (FNV-1a) into clientSlots. The hash is fixed,
// so a client keeps its slot across connections.
func clientSlot(remoteAddr string) int {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	h := uint64(14695981039346656037)
	mix := func(c byte) { h = (h ^ uint64(c)) * 1099511628211 }
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() && !a.Is4In6() {
		b := a.As16()
		for _, c := range b[:8] {
			mix(c)
		}
	} else {
		for i := range len(host) {
			mix(host[i])
		}
	}
	return int(h % clientSlots)
}

// bodyRead is one body being received; the server keeps it in a set so that shutdown can
// tighten its deadlines.
type bodyRead struct {
	rc *http.ResponseController

	mu       sync.Mutex
	stall    time.Duration
	deadline time.Time // the whole body must have arrived by then
	progress time.Time // when the last bytes arrived
	cut      bool      // shutdown tightened the limits
}

// arm sets the connection's read deadline for the next read: the stall allowance from the
// last progress, but never past the body's deadline.
// moved notes that bytes arrived: the next pause is timed from now.
func (b *bodyRead) moved() {
	b.mu.Lock()
	b.progress = time.Now()
	b.mu.Unlock()
}

func (b *bodyRead) arm() {
	b.mu.Lock()
	d := b.progress.Add(b.stall)
	if d.After(b.deadline) {
		d = b.deadline
	}
	b.mu.Unlock()
	_ = b.rc.SetReadDeadline(d)
}

// tighten applies the shutdown limits: the body must keep moving (shutdownStall) and be
// complete by the end of the grace period.
func (b *bodyRead) tighten(graceEnd time.Time) {
	b.mu.Lock()
	b.cut = true
	b.stall = min(b.stall, shutdownStall)
	if graceEnd.Before(b.deadline) {
		b.deadline = graceEnd
	}
	b.mu.Unlock()
	b.arm()
}

func (b *bodyRead) wasCut() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cut
}

// startBody registers a body read; the caller must call endBody.
func (s *Server) startBody(rq *request) *bodyRead {
	now := time.Now()
	b := &bodyRead{rc: rq.rc, stall: s.limits.StallTimeout, deadline: now.Add(s.limits.BodyTimeout), progress: now}
	s.bodiesMu.Lock()
	s.bodies[b] = struct{}{}
	graceEnd, closing := s.graceEnd, s.closing.Load()
	s.bodiesMu.Unlock()
	if closing {
		b.tighten(graceEnd)
	}
	return b
}

func (s *Server) endBody(b *bodyRead) {
	s.bodiesMu.Lock()
	delete(s.bodies, b)
	s.bodiesMu.Unlock()
}

// tightenBodies applies the shutdown limits to every body being received, and to those that
// start later.
func (s *Server) tightenBodies(graceEnd time.Time) {
	s.bodiesMu.Lock()
	s.graceEnd = graceEnd
	s.closing.Store(true)
	bodies := make([]*bodyRead, 0, len(s.bodies))
	for b := range s.bodies {
		bodies = append(bodies, b)
	}
	s.bodiesMu.Unlock()
	for _, b := range bodies {
		b.tighten(graceEnd)
	}
}

// batchBodyPool recycles the contiguous bodies readBatchBody hands out, up to
// maxPooledBody. A 100-entity batch of 1 KiB entities is about 160 KiB; allocating it
// afresh for each request was a quarter of the bytes a batch allocates, and the collector's
// work grows with them.
var batchBodyPool sync.Pool // of *[]byte

// maxPooledBody is the largest body readBatchBody recycles, so the pool never pins the
// rare multi-megabyte ones.
const maxPooledBody = 1 << 20

// readBody reads the request body, at most limit bytes (a larger one is 413), under the
// memory budget and the read timeouts described at the top of this file. The budget it
// takes is held until the request ends (see releaseBody).
func (s *Server) readBody(rq *request, limit int64) ([]byte, error) {
	return s.readBodyTo(rq, limit, bodyCopy)
}

// readBatchBody is readBody with the body in a recycled buffer, which goes back to the
// pool when the request ends (releaseBody): the caller must not let anything that aliases
// the body outlive the handler.
func (s *Server) readBatchBody(rq *request, limit int64) ([]byte, error) {
	return s.readBodyTo(rq, limit, bodyPooled)
}

// readBulkBody is readBody for a bulk request, which keeps the body in the chunks it was
// read into: the scan and the decoding take it in pieces (edmjson.ScanBulkChunks,
// bulkIndex.Load), so it is held once, where readBody holds it twice for a moment (its
// chunks, then one contiguous copy), and is never copied whole. The chunks and their
// budget are the request's until dropBody (or its end).
func (s *Server) readBulkBody(rq *request, limit int64) ([][]byte, error) {
	if _, err := s.readBodyTo(rq, limit, bodyChunks); err != nil {
		return nil, err
	}
	chunks := make([][]byte, len(rq.chunks))
	for i, c := range rq.chunks {
		chunks[i] = (*c)[:min(bodyChunk, rq.bytesIn-int64(i)*bodyChunk)]
	}
	return chunks, nil
}

// dropBody gives up a body read by readBulkBody before the request ends: its chunks go
// back to their pool and its budget is returned. Nothing may use the body after.
func (s *Server) dropBody(rq *request) {
	if rq.chunks == nil {
		return
	}
	for _, c := range rq.chunks {
		chunkPool.Put(c)
	}
	rq.chunks = nil
	s.unhold(rq, rq.bodyKept)
	rq.bodyKept = 0
}

// How readBodyTo hands the body over.
const (
	bodyCopy   = iota // one contiguous copy
	bodyPooled        // one contiguous copy, in a recycled buffer (readBatchBody)
	bodyChunks        // the chunks it was read into, in rq.chunks (readBulkBody)
)

func (s *Server) readBodyTo(rq *request, limit int64, mode int) ([]byte, error) {
	r := rq.r
	if r.ContentLength > limit {
		// A client that asked to be told to go on (Expect: 100-continue) has not sent the
		// body, and will not if it is refused first.
		if r.ContentLength <= limit+drainMax && !strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
			br := s.startBody(rq)
			var scratch [4 << 10]byte
			s.drain(rq, br, scratch[:])
			s.endBody(br)
		}
		return nil, s.bodyFailed(rq, azerr.New(azerr.RequestBodyTooLarge))
	}
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		rq.bodyDone = true
		return []byte{}, nil
	}
	rq.bodyLarge = r.ContentLength < 0 || r.ContentLength > smallBody
	br := s.startBody(rq)
	defer s.endBody(br)

	var first [1]*[]byte // most bodies fit one chunk
	chunks := first[:0]
	defer func() {
		if mode == bodyChunks && rq.bodyDone {
			rq.chunks, rq.bodyKept = chunks, int64(len(chunks))*bodyChunk
			return
		}
		for _, c := range chunks {
			chunkPool.Put(c)
		}
	}()
	var total int64 // bytes read
	defer func() { rq.bytesIn = total }()
	var probe [1]byte
	for {
		c := probe[:]
		switch {
		case total == limit && total%bodyChunk == 0:
			// The body may not go on: what comes now can only end it, or take it over
			// the limit, and needs no chunk (one would take a client that may hold just
			// the limit past its share).
		case total == int64(len(chunks))*bodyChunk:
			if e := s.hold(rq, bodyChunk); e != nil {
				return nil, s.bodyFailed(rq, e)
			}
			chunks = append(chunks, chunkPool.Get().(*[]byte))
			fallthrough
		default:
			c = (*chunks[len(chunks)-1])[total%bodyChunk:]
		}
		br.arm()
		n, err := r.Body.Read(c)
		total += int64(n)
		if n > 0 {
			br.moved()
		}
		if total > limit {
			var scratch [4 << 10]byte
			s.drain(rq, br, scratch[:])
			return nil, s.bodyFailed(rq, azerr.New(azerr.RequestBodyTooLarge))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, s.bodyFailed(rq, bodyReadError(err, br.wasCut()))
		}
	}
	rq.bodyDone = true
	// The body is complete: no read deadline may stay armed, or it would cancel the request's
	// context while the handler works (net/http, which serves the connections h1 hands it,
	// watches the idle connection from here on).
	_ = rq.rc.SetReadDeadline(time.Time{})
	if mode == bodyChunks {
		return nil, nil
	}

	// One contiguous copy for the decoders; the chunks go back to the pool.
	if e := s.hold(rq, total); e != nil {
		return nil, s.bodyFailed(rq, e)
	}
	var body []byte
	if mode == bodyPooled && total <= maxPooledBody {
		bp, _ := batchBodyPool.Get().(*[]byte)
		if bp == nil || int64(cap(*bp)) < total {
			// Sized up to the next 64 KiB, so a slightly larger batch reuses it too.
			b := make([]byte, 0, (total+(64<<10)-1)&^(64<<10-1))
			bp = &b
		}
		body, rq.pooledBody = (*bp)[:total], bp
	} else {
		body = make([]byte, total)
	}
	for i, c := range chunks {
		copy(body[int64(i)*bodyChunk:], *c)
	}
	s.unhold(rq, int64(len(chunks))*bodyChunk)
	return body, nil
}

// bodyReadError classifies a failed body read.
func bodyReadError(err error, cut bool) *azerr.Error {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) && cut:
		return azerr.Newf(azerr.ServerBusy, "The server is shutting down and the request body stopped arriving. Please retry your request.")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return azerr.Newf(azerr.OperationTimedOut, "The request body was not received within the permitted time.")
	}
	return azerr.Newf(azerr.InvalidInput, "The request body could not be read.")
}

// drainMax is how much of a body over its limit the server still reads (and discards)
// before it answers 413. Many clients (Python's http.client, .NET's, curl without
// Expect: 100-continue) send the whole body before they read the answer, and a server that
// stops reading and closes the connection under them resets it: they report a broken pipe
// or a reset connection instead of RequestBodyTooLarge. A body up to drainMax past its
// limit is read to its end, under the same timeouts as any body, so its client reads the
// 413; a larger one is cut off.
const drainMax = 4 << 20

// drain reads and discards the rest of rq's body, up to drainMax bytes, into buf, under
// br's timeouts.
func (s *Server) drain(rq *request, br *bodyRead, buf []byte) {
	var n int64
	for n < drainMax {
		br.arm()
		k, err := rq.r.Body.Read(buf[:min(int64(len(buf)), drainMax-n)])
		n += int64(k)
		if k > 0 {
			br.moved()
		}
		if err != nil {
			return
		}
	}
}

// bodyFailed marks the connection for closing after a body that was not read to its end:
// what remains of it on the wire is not worth waiting for.
func (s *Server) bodyFailed(rq *request, e *azerr.Error) *azerr.Error {
	rq.w.Header()["Connection"] = []string{"close"}
	return e
}

// hold takes n bytes of the body budget for the request. It answers 503 ServerBusy when
// others hold the rest (the request may be retried), and 413 RequestBodyTooLarge when the
// request would hold more than one client may, which it could never get.
func (s *Server) hold(rq *request, n int64) *azerr.Error {
	if rq.client == 0 {
		rq.client = int32(clientSlot(rq.r.RemoteAddr)) + 1
	}
	if s.budget.acquire(n, rq.bodyLarge, int(rq.client-1)) {
		rq.bodyHeld += n
		return nil
	}
	if most := s.budget.clientCap(rq.bodyLarge); rq.bodyHeld+n > most {
		return azerr.New(azerr.RequestBodyTooLarge).WithDetail(fmt.Sprintf(
			"The request would hold %s of memory, more than one client may hold (%s of --max-body-memory %s); send a smaller request.",
			sizeText(rq.bodyHeld+n), sizeText(most), sizeText(s.limits.MaxBodyMemory)))
	}
	return azerr.New(azerr.ServerBusy)
}

// decodedSize is what a decoded entity takes in memory: its keys, its property slice and
// each property's name and value, every string and byte slice with the slack of a small
// allocation. The operations of bulk requests and $batch are held (hold) at this size as
// they are decoded.
func decodedSize(e *entity.Entity) int64 {
	const slack = 8
	n := int64(len(e.PartitionKey)+len(e.RowKey)+2*slack) + int64(cap(e.Props))*int64(unsafe.Sizeof(entity.Property{}))
	for i := range e.Props {
		p := &e.Props[i]
		n += int64(len(p.Name) + len(p.Value.Str) + cap(p.Value.Bytes) + 3*slack)
	}
	return n
}

// holdKept takes n bytes of the body budget for what the request keeps beyond its body
// once the body has arrived (acquireKept), with hold's answers: 503 ServerBusy when
// others hold the rest, 413 RequestBodyTooLarge when the request would hold more than
// one client may.
func (s *Server) holdKept(rq *request, n int64) *azerr.Error {
	if rq.client == 0 {
		rq.client = int32(clientSlot(rq.r.RemoteAddr)) + 1
	}
	if s.budget.acquireKept(n, rq.bodyLarge, int(rq.client-1)) {
		rq.keptHeld += n
		return nil
	}
	if most := s.budget.limit / 2; rq.bodyHeld+rq.keptHeld+n > most {
		return azerr.New(azerr.RequestBodyTooLarge).WithDetail(fmt.Sprintf(
			"The request would hold %s of memory, more than one client may hold (%s of --max-body-memory %s); send a smaller request.",
			sizeText(rq.bodyHeld+rq.keptHeld+n), sizeText(most), sizeText(s.limits.MaxBodyMemory)))
	}
	return azerr.New(azerr.ServerBusy)
}

func (s *Server) unholdKept(rq *request, n int64) {
	s.budget.releaseKept(n, rq.bodyLarge, int(rq.client-1))
	rq.keptHeld -= n
}

func (s *Server) unhold(rq *request, n int64) {
	s.budget.release(n, rq.bodyLarge, int(rq.client-1))
	rq.bodyHeld -= n
}

// sizeText renders a byte count for a message: "3.2 MiB", "512 KiB".
func sizeText(n int64) string {
	switch {
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// releaseBody returns what the request still holds of the body budget; ServeHTTP calls it
// when the request ends, since the body lives as long as its handler.
func (s *Server) releaseBody(rq *request) {
	if rq.pooledBody != nil {
		batchBodyPool.Put(rq.pooledBody)
		rq.pooledBody = nil
	}
	for _, c := range rq.chunks {
		chunkPool.Put(c)
	}
	rq.chunks = nil
	if rq.bodyHeld > 0 {
		s.unhold(rq, rq.bodyHeld)
	}
	if rq.keptHeld > 0 {
		s.unholdKept(rq, rq.keptHeld)
	}
}
