package backup

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

// ErrInUse is returned when a server holds the data directory.
var ErrInUse = errors.New("in use by a running server")

// tmpPrefix names the directories a server's checkpoints are built in, inside its data
// directory (so sstables are hard-linked, not copied); Handler removes leftovers.
const tmpPrefix = ".backup-"

// checkpoint takes a checkpoint of eng into dir/StoreDir, reads it back and writes
// nothing else: it returns the manifest describing it.
func checkpoint(eng *pebble.Engine, dir string) (Manifest, error) {
	created := time.Now().UTC()
	store := filepath.Join(dir, StoreDir)
	pos, err := eng.Checkpoint(store)
	if err != nil {
		return Manifest{}, err
	}
	info, err := pebble.Inspect(store)
	if err != nil {
		return Manifest{}, fmt.Errorf("read checkpoint back: %w", err)
	}
	// Inspect's lock file is no part of the store.
	_ = os.Remove(filepath.Join(store, "LOCK"))
	return Manifest{Format: Format, Engine: Engine, Created: created, Cerulean: version(),
		Position: uint64(pos), StoreFormat: info.Format, Tables: info.Tables}, nil
}

// Local backs up the data directory data, which no server may hold, into to (which must
// not exist or be empty): it opens the store itself, takes the checkpoint and closes it.
func Local(data, to string) (Manifest, error) {
	// Every Pebble store has a MANIFEST file; opening a directory without one would
	// create an empty store.
	if found, _ := filepath.Glob(filepath.Join(data, "MANIFEST-*")); len(found) == 0 {
		return Manifest{}, fmt.Errorf("data directory %s holds no store", data)
	}
	if overlap(data, to) {
		return Manifest{}, fmt.Errorf("the backup directory %s and the data directory %s overlap", to, data)
	}
	created, err := prepareDest(to)
	if err != nil {
		return Manifest{}, err
	}
	m, err := local(data, to)
	if err != nil {
		cleanDest(to, created)
		return Manifest{}, err
	}
	return m, nil
}

func local(data, to string) (Manifest, error) {
	eng, err := pebble.Open(data, pebble.Options{DiskReserve: -1, ExpiryInterval: -1, CacheSize: 8 << 20, MemTableSize: 4 << 20})
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return Manifest{}, fmt.Errorf("data directory %s is %w: back it up through the server with --debug-addr", data, ErrInUse)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("open data directory: %w", err)
	}
	m, err := checkpoint(eng, to)
	if cerr := eng.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return Manifest{}, err
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := writeFileSync(filepath.Join(to, ManifestName), append(b, '\n')); err != nil {
		return Manifest{}, fmt.Errorf("write manifest: %w", err)
	}
	return m, syncDir(to)
}

// prepareDest makes sure to is an empty directory, creating it if needed, and reports
// whether it created it.
func prepareDest(to string) (created bool, err error) {
	entries, err := os.ReadDir(to)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(to, 0o755); err != nil {
			return false, fmt.Errorf("backup directory: %w", err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("backup directory: %w", err)
	case len(entries) > 0:
		return false, fmt.Errorf("backup directory %s is not empty: give a new or empty directory", to)
	}
	return false, nil
}

// cleanDest removes what a failed backup wrote into to.
func cleanDest(to string, created bool) {
	if created {
		_ = os.RemoveAll(to)
		return
	}
	entries, _ := os.ReadDir(to)
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(to, e.Name()))
	}
}

// Handler serves POST /debug/backup on the diagnostics address: it takes a checkpoint of
// eng while the server keeps serving and streams it as a tar archive (the StoreDir files,
// then the manifest, last), so the client writes the backup on its own file system,
// whether it runs on the server's machine or not. The checkpoint is built in a
// directory inside data (hard links, so it is quick and small) and removed once sent;
// backups are taken one at a time. A failure before the first byte is an HTTP error with
// a message; a failure later cuts the stream, which the client sees as a backup without
// its manifest. With eng nil (the postgres engine) it answers 501 with PostgresAdvice.
//
// Creating the handler removes checkpoint directories a previous process left behind.
func Handler(eng *pebble.Engine, data string, log *slog.Logger) http.Handler {
	if eng != nil {
		if old, err := filepath.Glob(filepath.Join(data, tmpPrefix+"*")); err == nil {
			for _, d := range old {
				_ = os.RemoveAll(d)
			}
		}
	}
	var mu sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST to take a backup", http.StatusMethodNotAllowed)
			return
		}
		if eng == nil {
			http.Error(w, PostgresAdvice, http.StatusNotImplemented)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		began := time.Now()
		tmp, err := os.MkdirTemp(data, tmpPrefix)
		if err != nil {
			http.Error(w, "backup: "+err.Error(), http.StatusInternalServerError)
			return
		}
		defer os.RemoveAll(tmp)
		m, err := checkpoint(eng, tmp)
		if err != nil {
			log.Error("backup", "err", err)
			http.Error(w, "backup: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/x-tar")
		n, err := writeTar(w, tmp, m)
		if err != nil {
			// The client sees a stream without its manifest and discards it.
			log.Error("backup cut off", "err", err, "remote", r.RemoteAddr)
			panic(http.ErrAbortHandler)
		}
		log.Info("backup sent", "remote", r.RemoteAddr, "position", m.Position, "tables", m.Tables,
			"bytes", n, "took", time.Since(began).Round(time.Millisecond))
	})
}

// writeTar writes the files under dir/StoreDir and then the manifest m as a tar archive.
func writeTar(w io.Writer, dir string, m Manifest) (int64, error) {
	tw := tar.NewWriter(w)
	var n int64
	err := filepath.WalkDir(filepath.Join(dir, StoreDir), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: st.Size(), ModTime: st.ModTime(), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		c, err := io.Copy(tw, f)
		n += c
		return err
	})
	if err != nil {
		return n, err
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	b = append(b, '\n')
	if err := tw.WriteHeader(&tar.Header{Name: ManifestName, Mode: 0o644, Size: int64(len(b)), ModTime: m.Created, Typeflag: tar.TypeReg}); err != nil {
		return n, err
	}
	if _, err := tw.Write(b); err != nil {
		return n, err
	}
	return n + int64(len(b)), tw.Close()
}

// Fetch asks the server whose diagnostics address is debugAddr (host:port or a URL) for a
// backup and writes it into to, which must not exist or be empty. Every file is synced and
// the manifest is written last, so a backup directory with a manifest is complete; on
// failure what was written is removed.
func Fetch(ctx context.Context, debugAddr, to string) (Manifest, error) {
	u := debugAddr
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	u = strings.TrimSuffix(u, "/") + "/debug/backup"
	created, err := prepareDest(to)
	if err != nil {
		return Manifest{}, err
	}
	m, err := fetch(ctx, u, to)
	if err != nil {
		cleanDest(to, created)
		return Manifest{}, err
	}
	return m, nil
}

func fetch(ctx context.Context, url, to string) (Manifest, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return Manifest{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Manifest{}, fmt.Errorf("ask the server for a backup: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return Manifest{}, fmt.Errorf("server refused the backup: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	tr := tar.NewReader(resp.Body)
	dirs := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return Manifest{}, errors.New("backup stream ended before its manifest: the server failed during the backup (see its log)")
		}
		if err != nil {
			return Manifest{}, fmt.Errorf("backup stream cut off: %w", err)
		}
		name := path.Clean(hdr.Name)
		if hdr.Typeflag != tar.TypeReg || !(name == ManifestName || strings.HasPrefix(name, StoreDir+"/")) || strings.Contains(name, "..") {
			return Manifest{}, fmt.Errorf("backup stream: unexpected entry %q", hdr.Name)
		}
		if name == ManifestName {
			b, err := io.ReadAll(io.LimitReader(tr, 1<<20))
			if err != nil {
				return Manifest{}, fmt.Errorf("backup stream cut off: %w", err)
			}
			var m Manifest
			if err := decodeManifest(b, &m); err != nil {
				return Manifest{}, err
			}
			for d := range dirs {
				if err := syncDir(d); err != nil {
					return Manifest{}, err
				}
			}
			if err := writeFileSync(filepath.Join(to, ManifestName), b); err != nil {
				return Manifest{}, fmt.Errorf("write manifest: %w", err)
			}
			return m, syncDir(to)
		}
		p := filepath.Join(to, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return Manifest{}, err
		}
		dirs[filepath.Dir(p)] = true
		if err := copyToFile(p, tr); err != nil {
			return Manifest{}, fmt.Errorf("write %s: %w", name, err)
		}
	}
}

// copyToFile writes r into a new file at p and syncs it.
func copyToFile(p string, r io.Reader) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// overlap reports whether directories a and b are the same or one is inside the other.
func overlap(a, b string) bool {
	a, err1 := filepath.Abs(a)
	b, err2 := filepath.Abs(b)
	if err1 != nil || err2 != nil {
		return true
	}
	sep := string(filepath.Separator)
	return a == b || strings.HasPrefix(a, b+sep) || strings.HasPrefix(b, a+sep)
}
