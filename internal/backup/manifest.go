// Package backup makes and restores backups of the pebble engine's store: a consistent
// checkpoint (pebble.Engine.Checkpoint) taken from a running server over its diagnostics
// address, or from a data directory no server holds, plus a small manifest that restore
// checks before it installs anything.
//
// A backup is a directory:
//
//	DIR/cerulean-backup.json   the manifest (Manifest), written last: a directory
//	                           without it is an interrupted backup, which restore refuses
//	DIR/pebble/                the Pebble checkpoint, a complete store
//
// The postgres engine has no backup here: its data lives in the database, whose own tools
// back it up (docs/operations.md, "Backup and restore").
package backup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

const (
	// ManifestName is the manifest's file name in a backup directory.
	ManifestName = "cerulean-backup.json"
	// StoreDir is the directory of the checkpoint in a backup directory.
	StoreDir = "pebble"
	// Format is the backup layout this build writes and reads; restore refuses another.
	Format = 1
	// Engine is the only engine this package backs up.
	Engine = "pebble"
)

// PostgresAdvice is what backup says when asked to back up the postgres engine.
const PostgresAdvice = "the postgres engine keeps all its data in the database: back it up with the database's own tools " +
	"(pg_basebackup, pg_dump, your provider's snapshots and point-in-time recovery); " +
	`see "Backup and restore" in docs/operations.md for what Cerulean needs restored`

// Manifest describes a backup.
type Manifest struct {
	// Format is the backup layout (Format).
	Format int `json:"format"`
	// Engine is the engine whose store the backup holds ("pebble").
	Engine string `json:"engine"`
	// Created is when the checkpoint was taken.
	Created time.Time `json:"created"`
	// Cerulean is the version of the build that made the backup.
	Cerulean string `json:"cerulean"`
	// Position is the engine's committed position when the backup began: every write at
	// or below it is in the backup.
	Position uint64 `json:"position"`
	// StoreFormat is the store's format version (pebble.FormatVersion of the build that
	// wrote it, or older).
	StoreFormat uint64 `json:"store_format"`
	// Tables is the number of tables in the checkpoint's catalogue, every account's, as
	// read back from the checkpoint when it was made; restore reads it again and compares.
	Tables int `json:"tables"`
}

// ErrNotBackup is returned for a directory without a manifest.
var ErrNotBackup = errors.New("not a Cerulean backup")

// check refuses a manifest this build cannot restore.
func (m Manifest) check() error {
	if m.Format != Format {
		return fmt.Errorf("backup format %d is not supported by this build (it reads format %d)", m.Format, Format)
	}
	if m.Engine != Engine {
		return fmt.Errorf("backup of engine %q: this build restores %q backups only", m.Engine, Engine)
	}
	if m.StoreFormat == 0 || m.StoreFormat > pebble.FormatVersion {
		return fmt.Errorf("backup holds store format %d; this build reads formats 1 to %d", m.StoreFormat, pebble.FormatVersion)
	}
	if m.Tables < 0 {
		return fmt.Errorf("manifest: negative table count %d", m.Tables)
	}
	return nil
}

// ReadManifest reads and checks the manifest of backup directory dir.
func ReadManifest(dir string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat(dir); serr != nil {
			return m, fmt.Errorf("backup %s: %w", dir, serr)
		}
		return m, fmt.Errorf("%s: %w: it has no %s (an interrupted backup has none)", dir, ErrNotBackup, ManifestName)
	}
	if err != nil {
		return m, fmt.Errorf("read manifest: %w", err)
	}
	if err := decodeManifest(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", filepath.Join(dir, ManifestName), err)
	}
	return m, nil
}

// decodeManifest parses and checks a manifest.
func decodeManifest(b []byte, m *Manifest) error {
	if err := json.Unmarshal(b, m); err != nil {
		return fmt.Errorf("%w: unreadable manifest: %v", ErrNotBackup, err)
	}
	return m.check()
}

// writeFileSync writes a file and syncs it, so a manifest on disk means its backup is.
func writeFileSync(path string, b []byte) error {
	return copyToFile(path, bytes.NewReader(b))
}

// syncDir syncs a directory, making the entries created in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// version describes this build for the manifest: module version and VCS revision.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			v += " " + s.Value
		}
	}
	return v
}
