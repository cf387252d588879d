package backup

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ceruleandb/cerulean/internal/storage/pebble"
	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// RestoreOptions tune Restore.
type RestoreOptions struct {
	// Force replaces a data directory that is not empty (never one a server holds).
	Force bool
}

// Restore checks the backup in from and installs it as the data directory data.
//
// Checks, before anything is installed: the manifest is present, readable and of a format
// and store format this build reads; the data directory is not held by a server and is
// empty or absent (unless Force); the copy of the store opens (read-only) and its
// catalogue holds the number of tables the manifest records. The store is copied into a
// new directory beside data and only then renamed into place (with Force, the old
// directory is moved aside first and removed after), so a failed restore leaves data as
// it was and never half-written. The backup itself is only read.
func Restore(from, data string, opts RestoreOptions) (Manifest, error) {
	m, err := ReadManifest(from)
	if err != nil {
		return m, err
	}
	absData, err := filepath.Abs(data)
	if err != nil {
		return m, fmt.Errorf("data directory: %w", err)
	}
	if overlap(from, data) {
		return m, fmt.Errorf("the data directory %s and the backup %s overlap", data, from)
	}
	unlock, exists, err := claimTarget(data, opts.Force)
	if err != nil {
		return m, err
	}
	defer unlock()

	parent := filepath.Dir(absData)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return m, fmt.Errorf("data directory: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(absData)+".restore-")
	if err != nil {
		return m, fmt.Errorf("restore: %w", err)
	}
	installed := false
	defer func() {
		if !installed {
			_ = os.RemoveAll(tmp)
		}
	}()
	if err := copyTree(filepath.Join(from, StoreDir), tmp); err != nil {
		return m, fmt.Errorf("copy the backup: %w", err)
	}
	info, err := pebble.Inspect(tmp)
	if err != nil {
		return m, fmt.Errorf("backup %s does not open: %w", from, err)
	}
	if info.Format != m.StoreFormat || info.Tables != m.Tables {
		return m, fmt.Errorf("backup %s does not match its manifest: it holds %d tables in store format %d, the manifest says %d in format %d",
			from, info.Tables, info.Format, m.Tables, m.StoreFormat)
	}
	if err := syncDir(tmp); err != nil {
		return m, err
	}
	if exists {
		old := tmp + ".old"
		if err := os.Rename(absData, old); err != nil {
			return m, fmt.Errorf("move the old data directory aside: %w", err)
		}
		if err := os.Rename(tmp, absData); err != nil {
			_ = os.Rename(old, absData)
			return m, fmt.Errorf("install: %w", err)
		}
		installed = true
		if err := os.RemoveAll(old); err != nil {
			return m, fmt.Errorf("installed, but the old data directory remains at %s: %w", old, err)
		}
	} else {
		// An empty directory (gone is fine too) gives way to the restored one.
		if err := os.Remove(absData); err != nil && !errors.Is(err, os.ErrNotExist) {
			return m, fmt.Errorf("install: %w", err)
		}
		if err := os.Rename(tmp, absData); err != nil {
			return m, fmt.Errorf("install: %w", err)
		}
		installed = true
	}
	return m, syncDir(parent)
}

// claimTarget checks the data directory data: absent, empty or, with force, not empty;
// never held by a server. For a directory with a Pebble lock file it takes that lock and
// returns its release, so no server can start on it while it is replaced. exists reports
// that data is not empty and must be moved aside.
func claimTarget(data string, force bool) (unlock func(), exists bool, err error) {
	unlock = func() {}
	entries, err := os.ReadDir(data)
	if errors.Is(err, os.ErrNotExist) {
		return unlock, false, nil
	}
	if err != nil {
		return unlock, false, fmt.Errorf("data directory: %w", err)
	}
	if _, err := os.Stat(filepath.Join(data, "LOCK")); err == nil {
		l, err := pebbledb.LockDirectory(data, vfs.Default)
		if err != nil {
			return unlock, false, fmt.Errorf("data directory %s is %w (stop it first; %v)", data, ErrInUse, err)
		}
		unlock = func() { _ = l.Close() }
	}
	if len(entries) == 0 {
		return unlock, false, nil
	}
	if !force {
		unlock()
		return func() {}, false, fmt.Errorf("data directory %s is not empty: restore into a new directory, or pass --force to replace it", data)
	}
	return unlock, true, nil
}

// copyTree copies the regular files under src into dst (which exists), syncing each, and
// leaves out Pebble's lock file.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			if rel == "." {
				return nil
			}
			return os.MkdirAll(target, 0o755)
		case !d.Type().IsRegular():
			return fmt.Errorf("%s: not a regular file", p)
		case rel == "LOCK":
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return copyToFile(target, io.Reader(f))
	})
}
