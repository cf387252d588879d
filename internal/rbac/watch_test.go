package rbac

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/identity"
)

const (
	readerFile  = `{"assignments":[{"principal":"u","role":"Storage Table Data Reader","scope":"/acct"}]}`
	contribFile = `{"assignments":[{"principal":"u","role":"Storage Table Data Contributor","scope":"/acct"}]}`
	brokenFile  = `{"assignments":[{"principal":"u","role":"Storage Table Data Writer","scope":"/acct"}]}`
)

var u = identity.Principal{ObjectID: "u"}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replace writes content beside path and renames it over path, as editors and
// configuration tools do.
func replace(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	write(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// eventually waits up to three seconds for cond, the time within which a change must be
// seen (the watcher looks every 100ms here, every second by default).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 3s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type reloads struct {
	mu   sync.Mutex
	errs []error
}

func (r *reloads) record(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

func (r *reloads) last() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) == 0 {
		return 0, nil
	}
	return len(r.errs), r.errs[len(r.errs)-1]
}

func TestWatchFollowsChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "assignments.json")
	write(t, path, readerFile)
	var rec reloads
	a, err := NewAuthorizer(path, Options{Interval: 100 * time.Millisecond, OnReload: rec.record})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Watch(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	canInsert := func() bool { return a.Allowed(u, "acct", "t1x", auth.OpInsert) }
	if canInsert() || !a.Allowed(u, "acct", "t1x", auth.OpQueryEntities) {
		t.Fatal("the reader file does not decide as a reader")
	}
	st := a.Status()
	if st.Loads != 1 || st.Assignments != 1 || st.Err != nil || st.Loaded.IsZero() {
		t.Fatalf("initial status %+v", st)
	}

	// Written in place.
	write(t, path, contribFile)
	eventually(t, "an in-place write taken", canInsert)
	if n, err := rec.last(); err != nil || n != 1 {
		t.Errorf("after the first change: last report %v of %d", err, n)
	}

	// Replaced by rename.
	replace(t, path, readerFile)
	eventually(t, "a replacement by rename taken", func() bool { return !canInsert() })

	// Broken: the last good assignments stay, and the error is reported.
	replace(t, path, brokenFile)
	eventually(t, "a broken file reported", func() bool { return a.Status().Err != nil })
	st = a.Status()
	var fe *FileError
	if !errors.As(st.Err, &fe) || fe.Path != "assignments[0].role" || !strings.Contains(st.Err.Error(), path) {
		t.Errorf("status error %v, want the file's name and a FileError at assignments[0].role", st.Err)
	}
	if st.ErrAt.IsZero() || st.Loads != 3 {
		t.Errorf("status after a broken file: %+v", st)
	}
	if _, err := rec.last(); err == nil {
		t.Error("OnReload not told of the broken file")
	}
	if canInsert() || !a.Allowed(u, "acct", "t1x", auth.OpQueryEntities) {
		t.Error("a broken file changed the decisions")
	}
	time.Sleep(300 * time.Millisecond) // several more looks at the same broken file
	if n, _ := rec.last(); n != 3 {
		t.Errorf("%d reports, want 3: an unchanged broken file is reported once", n)
	}

	// Removed: still the last good assignments; then fixed: taken, and the error cleared.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a removed file reported", func() bool {
		err := a.Status().Err
		return err != nil && errors.Is(err, os.ErrNotExist)
	})
	if !a.Allowed(u, "acct", "t1x", auth.OpQueryEntities) {
		t.Error("a removed file changed the decisions")
	}
	n, _ := rec.last()
	time.Sleep(300 * time.Millisecond)
	if n2, _ := rec.last(); n2 != n {
		t.Errorf("%d reports of a file that stays removed, want 1", n2-n+1)
	}
	replace(t, path, contribFile)
	eventually(t, "a fixed file taken", canInsert)
	if st := a.Status(); st.Err != nil || st.Loads != 4 {
		t.Errorf("status after the fix: %+v", st)
	}
}

// TestReloadSameSizeSameTime: a change that keeps the size and the modification time is
// still seen, since the watcher compares content.
func TestReloadSameSizeSameTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.json")
	a1 := `{"assignments":[{"principal":"u","role":"Owner","scope":"/acct"}]}`
	a2 := `{"assignments":[{"principal":"v","role":"Owner","scope":"/acct"}]}`
	write(t, path, a1)
	a, err := NewAuthorizer(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	write(t, path, a2)
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if a.Allowed(u, "acct", "t1x", auth.OpSetACL) || !a.Allowed(identity.Principal{ObjectID: "v"}, "acct", "t1x", auth.OpSetACL) {
		t.Error("the same-size change was not taken")
	}
	if err := a.Reload(); !errors.Is(err, errUnchanged) {
		t.Errorf("Reload of an unchanged file: %v", err)
	}
}

// TestRemovedAndRestored: a file removed and then restored as it was is taken again,
// clearing the error (the watcher forgets what it last read when the file goes away).
func TestRemovedAndRestored(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.json")
	write(t, path, contribFile)
	a, err := NewAuthorizer(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	if err := a.Reload(); !errors.Is(err, os.ErrNotExist) || !errors.Is(a.Status().Err, os.ErrNotExist) {
		t.Fatalf("Reload of a removed file: %v, status %v", err, a.Status().Err)
	}
	write(t, path, contribFile)
	if err := a.Reload(); err != nil || a.Status().Err != nil || a.Status().Loads != 2 {
		t.Fatalf("Reload of the restored file: %v, status %+v", err, a.Status())
	}
}

func TestNewAuthorizerRefusesBadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.json")
	write(t, path, brokenFile)
	if _, err := NewAuthorizer(path, Options{}); err == nil || !strings.Contains(err.Error(), "unknown role") {
		t.Errorf("NewAuthorizer on a broken file: %v", err)
	}
	if _, err := NewAuthorizer(filepath.Join(dir, "missing.json"), Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("NewAuthorizer on a missing file: %v", err)
	}
	big := filepath.Join(dir, "big.json")
	write(t, big, `{"assignments":[`+strings.Repeat(" ", maxFileSize)+`]}`)
	if _, err := NewAuthorizer(big, Options{}); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("NewAuthorizer on an oversized file: %v", err)
	}
}

// TestConcurrentChecks runs decisions while the file changes under them (go test -race
// shows the swap is safe).
func TestConcurrentChecks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.json")
	write(t, path, readerFile)
	a, err := NewAuthorizer(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if !a.Allowed(u, "acct", "t1x", auth.OpQueryEntities) {
					t.Error("a read refused while both files allow it")
					return
				}
				_ = a.Status()
			}
		}()
	}
	for i := 0; i < 50; i++ {
		if i%2 == 0 {
			replace(t, path, contribFile)
		} else {
			replace(t, path, readerFile)
		}
		if err := a.Reload(); err != nil {
			t.Fatalf("Reload %d: %v", i, err)
		}
	}
	close(stop)
	wg.Wait()
	if a.Status().Loads != 51 {
		t.Errorf("loads = %d, want 51", a.Status().Loads)
	}
}
