package rbac

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/identity"
)

// Load reads and parses the assignments file at path.
func Load(path string) (*Policy, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	pol, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return pol, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%s: more than %d bytes", path, maxFileSize)
	}
	return data, nil
}

// Status is how the watched file stands, for metrics and the log.
type Status struct {
	// Loaded is when the policy in force was read, Loads how many good files have been
	// read (the first included), Assignments how many the policy in force holds.
	Loaded      time.Time
	Loads       uint64
	Assignments int
	// Err is why the latest change to the file was not taken (nil when the file in force is
	// the file on disk), and ErrAt when that was seen.
	Err   error
	ErrAt time.Time
}

// Options tune an Authorizer.
type Options struct {
	// Interval is how often the file is looked at; 0 is one second.
	Interval time.Duration
	// OnReload, if set, is called after every change seen: with nil when a new file was
	// taken, with the error when it was refused and the previous assignments stay. It runs
	// on the watcher's goroutine and must not block it for long.
	OnReload func(error)
}

// Authorizer holds the assignments of one file and follows the file's changes: Watch
// reads it every Interval and, when its content changed, parses it and swaps the new
// policy in whole, or keeps the last good one and reports why not. Reading the content
// (not only its modification time and size) catches a change made within the file
// system's time granularity that keeps the size, and an editor's replacement of the file
// by rename is a change of content like any other. The decision path is one atomic
// pointer load and the policy's lookups: no lock.
type Authorizer struct {
	path string
	opts Options

	policy atomic.Pointer[Policy]
	status atomic.Pointer[Status]

	mu      sync.Mutex // serialises reloads (Watch's and Reload's)
	lastSum [sha256.Size]byte
	loads   uint64
}

// NewAuthorizer loads the file at path; it must be good, since a server must not start
// with assignments it cannot read. Call Watch to follow the file's changes.
func NewAuthorizer(path string, opts Options) (*Authorizer, error) {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	a := &Authorizer{path: path, opts: opts}
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	pol, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	a.lastSum = sha256.Sum256(data)
	a.install(pol)
	return a, nil
}

func (a *Authorizer) install(pol *Policy) {
	a.loads++
	a.policy.Store(pol)
	a.status.Store(&Status{Loaded: time.Now(), Loads: a.loads, Assignments: len(pol.assignments)})
}

// Policy is the policy in force.
func (a *Authorizer) Policy() *Policy { return a.policy.Load() }

// Status is how the file stands now.
func (a *Authorizer) Status() Status { return *a.status.Load() }

// Check is Policy().Check: see Policy.Check.
func (a *Authorizer) Check(p identity.Principal, account, table string, ops ...auth.OpKind) error {
	return a.policy.Load().Check(p, account, table, ops...)
}

// Allowed is Policy().Allowed.
func (a *Authorizer) Allowed(p identity.Principal, account, table string, op auth.OpKind) bool {
	return a.policy.Load().Check(p, account, table, op) == nil
}

// Watch looks at the file every Interval until ctx ends.
func (a *Authorizer) Watch(ctx context.Context) {
	t := time.NewTicker(a.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.Reload()
		}
	}
}

// errUnchanged is Reload's answer when the file holds what was last read.
var errUnchanged = errors.New("unchanged")

// Reload reads the file now and takes it if its content changed and it is good. It
// returns nil when it took a new file, the error when it refused one (the previous
// assignments stay in force, and Status reports it), and errUnchanged when there was
// nothing new. A file that cannot be read (removed, say) is refused the same way.
func (a *Authorizer) Reload() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	data, err := readFile(a.path)
	if err == nil {
		sum := sha256.Sum256(data)
		if sum == a.lastSum {
			return errUnchanged
		}
		a.lastSum = sum
		var pol *Policy
		if pol, err = Parse(data); err == nil {
			a.install(pol)
			a.report(nil)
			return nil
		}
		err = fmt.Errorf("%s: %w", a.path, err)
	} else {
		// Unreadable: forget the last content, so that the same good file coming back
		// is taken again and clears the error.
		a.lastSum = [sha256.Size]byte{}
		if prev := a.status.Load().Err; prev != nil && prev.Error() == err.Error() {
			return err // already reported
		}
	}
	st := *a.status.Load()
	st.Err, st.ErrAt = err, time.Now()
	a.status.Store(&st)
	a.report(err)
	return err
}

func (a *Authorizer) report(err error) {
	if a.opts.OnReload != nil {
		a.opts.OnReload(err)
	}
}
