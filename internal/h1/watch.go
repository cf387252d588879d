package h1

import (
	"time"
)

// Watching for a client that goes away.
//
// net/http notices a client closing its connection during a request because, once the
// request's body has been read, a goroutine of its own waits to read from the connection;
// if the read fails, the request's context is cancelled, and the handler's work stops (a
// query page stops encoding, a bulk request starts no new writes, PostgreSQL statements
// are cancelled). It starts that goroutine for every request, which costs about as much as
// a point read's own work. Here one goroutine per server looks at the running requests
// every watchDelay, while any request is running, and starts a watcher only for a request
// it finds running at two looks in a row: one that has run for watchDelay or more. A
// request that ends sooner has nothing left to stop, and costs the watch two atomic stores
// (and, when its connection is not on the loop's list already, a mutex to put it there).
// Idle connections are never looked at: the watch's work follows the requests, not the
// connections.
//
// The watcher reads at most one byte, into connReader's saved byte, which the next read of
// the connection returns first: a client that sends its next request early (pipelining)
// loses nothing and is not taken for gone. It does not start while the body is unread or
// while bytes of the next request are already buffered.

// watchDelay is how often the running requests are looked at.
const watchDelay = 10 * time.Millisecond

// aLongTimeAgo is a read deadline in the past, which ends a pending read at once.
var aLongTimeAgo = time.Unix(1, 0)

// connReader is what the connection's bufio.Reader reads from: the connection, after the
// byte the watcher read, if it read one.
type connReader struct {
	c       *conn
	hasByte bool
	b       [1]byte
}

func (r *connReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.hasByte {
		p[0] = r.b[0]
		r.hasByte = false
		return 1, nil
	}
	return r.c.nc.Read(p)
}

// watchState is the watch of the current request, guarded by conn.wmu.
type watchState struct {
	watching bool          // a watcher is reading
	stopping bool          // its read is being cut short on purpose
	done     chan struct{} // closed when the watcher has stopped reading
}

// beginRequest marks a request running on c, for the watch: c joins the watch's list
// unless it is on it already (a keep-alive connection stays on it while its requests
// follow each other within a look or two).
func (c *conn) beginRequest() {
	c.seq++
	c.running.Store(c.seq)
	s := c.s
	if c.watched.CompareAndSwap(false, true) {
		s.watchMu.Lock()
		s.watchNew = append(s.watchNew, c)
		s.watchMu.Unlock()
	}
	if s.watchIdle.Load() {
		select {
		case s.watchWake <- struct{}{}:
		default:
		}
	}
}

// watchLoop looks at the running requests every watchDelay and starts a watcher for each
// one it saw running the time before; with no request running it waits for one. It looks
// only at the connections on its list (those with a request running, or that had one at
// the last look), never at the idle ones, so idle keep-alive connections cost it nothing.
func (s *Server) watchLoop() {
	tick := time.NewTicker(watchDelay)
	defer tick.Stop()
	var list []*conn // the loop's own: connections with c.watched set
	for {
		select {
		case <-s.done:
			return
		case <-tick.C:
		}
		s.watchMu.Lock()
		list = append(list, s.watchNew...)
		clear(s.watchNew)
		s.watchNew = s.watchNew[:0]
		s.watchMu.Unlock()
		s.watchTicks.Add(1)
		kept := list[:0]
		for _, c := range list {
			s.watchLooks.Add(1)
			r := c.running.Load()
			if r == 0 {
				// Off the list; a request that begins from here on puts it back. One that
				// began before the flag was cleared did not: keep the connection then.
				c.lastSeen = 0
				c.watched.Store(false)
				if c.running.Load() == 0 || !c.watched.CompareAndSwap(false, true) {
					continue
				}
				r = c.running.Load()
			}
			if r != 0 && r == c.lastSeen {
				c.startWatch(r)
			}
			c.lastSeen = r
			kept = append(kept, c)
		}
		clear(list[len(kept):])
		list = kept
		if len(list) > 0 {
			continue
		}
		// Idle until a request begins. A request that began between the look and
		// watchIdle's store sends no wake-up: look at the new ones once more first.
		s.watchIdle.Store(true)
		s.watchMu.Lock()
		busy := len(s.watchNew) > 0
		s.watchMu.Unlock()
		if !busy {
			select {
			case <-s.done:
				return
			case <-s.watchWake:
			}
		}
		s.watchIdle.Store(false)
		tick.Reset(watchDelay)
	}
}

// startWatch starts the watcher for request seq, if it is still running, its body has been
// read, and no bytes of another request are buffered.
func (c *conn) startWatch(seq uint64) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.running.Load() != seq || c.ws.watching || !c.bodyDone.Load() {
		return
	}
	// The handler no longer reads from the connection (its body is read, and it has not
	// returned, for endWatch waits for wmu): the buffer is ours to look at.
	if c.br.Buffered() > 0 || c.cr.hasByte {
		return // the client has sent more: it is there
	}
	c.ws = watchState{watching: true, done: make(chan struct{})}
	go c.watch(c.ws.done)
}

// watch waits for the client to send or to go; if it goes, the request is cancelled.
func (c *conn) watch(done chan struct{}) {
	n, err := c.nc.Read(c.cr.b[:])
	c.wmu.Lock()
	if n > 0 {
		c.cr.hasByte = true
	} else if err != nil && !c.ws.stopping {
		c.cancelRequest()
	}
	c.wmu.Unlock()
	close(done)
}

// endRequest ends the watch of the request when its handler returns: no watcher starts
// from now on, and one reading is stopped.
func (c *conn) endRequest() {
	c.running.Store(0)
	c.wmu.Lock()
	watching, done := c.ws.watching, c.ws.done
	c.ws.stopping = true
	c.wmu.Unlock()
	if watching {
		_ = c.nc.SetReadDeadline(aLongTimeAgo)
		<-done
		c.wmu.Lock()
		c.ws = watchState{}
		c.wmu.Unlock()
	}
}

// cancelRequest ends the current request's context.
func (c *conn) cancelRequest() {
	c.mu.Lock()
	if c.cancel != nil {
		c.cancel()
	}
	c.mu.Unlock()
}
