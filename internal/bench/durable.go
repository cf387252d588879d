package bench

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

// The durable floor (--durable-floor DIR): the floor, except that before it answers a
// request that changes data it writes the request to a log in DIR and syncs it. That is
// the least a server that acknowledges a write only once it is on disk can do: no
// parsing, no index, no existence check, one group-committed data sync per batch of
// concurrent writes, as a storage engine's write-ahead log makes. A write workload's ratio
// to it says how much of what durability leaves the server's own work takes; the durable
// floor's ratio to the floor says what durability itself costs on this machine's disk.
// DIR must be on the disk the measured server writes to for the comparison to mean that.

// durableRingSize is the size of the durable floor's log file, which is written round and
// round. It is larger than any one group commit of the bench's requests (32 workers' 100-
// entity batches of 1 KiB entities are about 3.5 MiB).
const durableRingSize = 64 << 20

// durableLog is the durable floor's write-ahead log. Its file is written in full and
// synced when it is opened, so that later writes overwrite allocated blocks and a data
// sync commits no file-system metadata — as with the recycled log files of a storage
// engine (Pebble's, and Cerulean's zero-extended WAL files): a sync that also commits a
// file's new length costs about a third more on ext4. Concurrent appends share one write
// and one data sync: an append joins the group that the log writer takes next, and
// returns once the sync that covers it has returned.
type durableLog struct {
	f    *os.File
	size int64 // the file's size, written round and round

	mu      sync.Mutex
	pending []byte       // the next group's records
	waiters []chan error // the next group's appenders
	closed  bool
	wake    chan struct{} // buffered 1: a group is pending, or the log is closed
	done    chan struct{} // closed when the writer has stopped

	off   int64 // where the next group goes (writer only)
	syncs int64 // data syncs made (writer only; read after close)
}

// openDurableLog creates a log file of size bytes in dir, writes it in full and syncs it,
// and starts its writer.
func openDurableLog(dir string, size int64) (*durableLog, error) {
	f, err := os.CreateTemp(dir, "cerulean-bench-durable-floor-*.log")
	if err != nil {
		return nil, fmt.Errorf("durable floor: %w", err)
	}
	fail := func(err error) (*durableLog, error) {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("durable floor: %w", err)
	}
	zeros := make([]byte, 1<<20)
	for n := int64(0); n < size; n += int64(len(zeros)) {
		if _, err := f.Write(zeros[:min(int64(len(zeros)), size-n)]); err != nil {
			return fail(err)
		}
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	l := &durableLog{f: f, size: size, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go l.write()
	return l, nil
}

// append writes the records to the log and returns once they are synced to disk.
func (l *durableLog) append(records ...[]byte) error {
	c := make(chan error, 1)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return errors.New("durable floor: log closed")
	}
	for _, r := range records {
		l.pending = append(l.pending, r...)
	}
	l.waiters = append(l.waiters, c)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default: // the writer is woken already
	}
	return <-c
}

// write is the log's writer: it takes the pending group whole, writes it where the last
// one ended (wrapping round at the end of the file), syncs its data and answers the
// group's appenders; until the log is closed and nothing is pending.
func (l *durableLog) write() {
	defer close(l.done)
	var buf []byte
	for range l.wake {
		for {
			l.mu.Lock()
			buf, l.pending = l.pending, buf[:0]
			waiters := l.waiters
			l.waiters = nil
			closed := l.closed
			l.mu.Unlock()
			if len(waiters) == 0 {
				if closed {
					return
				}
				break
			}
			err := l.writeAt(buf)
			if err == nil {
				err = syncData(l.f)
				l.syncs++
			}
			for _, c := range waiters {
				c <- err
			}
		}
	}
}

// writeAt writes p at l.off, wrapping round at the end of the file.
func (l *durableLog) writeAt(p []byte) error {
	for len(p) > 0 {
		n := min(int64(len(p)), l.size-l.off)
		if _, err := l.f.WriteAt(p[:n], l.off); err != nil {
			return err
		}
		p = p[n:]
		if l.off += n; l.off == l.size {
			l.off = 0
		}
	}
	return nil
}

// close stops the writer once the pending appends are synced, and removes the file.
func (l *durableLog) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	<-l.done
	l.f.Close()
	os.Remove(l.f.Name())
}
