package pebble

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ceruleandb/cerulean/internal/storage"
	pebbledb "github.com/cockroachdb/pebble/v2"
)

// FormatVersion is the newest store format this build reads (keys.go): a backup of a
// newer store cannot be restored for it.
const FormatVersion = formatVersion

// Checkpoint writes a consistent copy of the store into dir, which must not exist,
// while the engine keeps serving, and returns the committed position read just before:
// every write at or below it is in the copy (later ones may be too).
//
// Why the copy holds every acknowledged write and no partial batch: an Apply returns only
// after its batch is synced to the write-ahead log, and Pebble's checkpoint, asked to flush
// the log first (WithFlushedWAL), links the sstables and blob files of the current version
// and copies the logs that hold everything since; an Apply is one Pebble batch, one log
// record, so opening the copy replays each batch whole or (a record still being written
// when the log was copied) not at all, as after a crash. Sstables are hard-linked when dir
// is on the same file system (so the copy is quick and costs little space until
// compactions replace the originals), copied otherwise.
func (e *Engine) Checkpoint(dir string) (storage.Position, error) {
	if err := e.enter(); err != nil {
		return 0, err
	}
	defer e.exit()
	pos := storage.Position(e.committed.Load())
	if err := e.db.Checkpoint(dir, pebbledb.WithFlushedWAL()); err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	return pos, nil
}

// StoreInfo describes a store on disk.
type StoreInfo struct {
	// Format is the store's format version (keys.go).
	Format uint64
	// Tables is the number of tables in the catalogue, every account's.
	Tables int
}

// Inspect opens the store in dir read-only (replaying its write-ahead log in memory,
// writing nothing but Pebble's lock file) and reads its format and catalogue. It fails
// when dir holds no store, when the store cannot be read, and when its format is newer
// than FormatVersion. Like Open it takes the directory's lock, so it fails on the data
// directory of a running server.
func Inspect(dir string) (StoreInfo, error) {
	db, err := pebbledb.Open(dir, &pebbledb.Options{ReadOnly: true, Logger: quietLogger{}})
	if err != nil {
		return StoreInfo{}, fmt.Errorf("open store: %w", err)
	}
	defer db.Close()
	var info StoreInfo
	v, closer, err := db.Get(metaFormat)
	if errors.Is(err, pebbledb.ErrNotFound) {
		return info, errors.New("not a cerulean store: no format mark")
	}
	if err != nil {
		return info, fmt.Errorf("read format: %w", err)
	}
	if len(v) != 8 {
		closer.Close()
		return info, errors.New("read format: corrupt format mark")
	}
	info.Format = binary.BigEndian.Uint64(v)
	closer.Close()
	if info.Format > formatVersion {
		return info, fmt.Errorf("store format %d is newer than this build's %d", info.Format, formatVersion)
	}
	it, err := db.NewIter(&pebbledb.IterOptions{
		LowerBound: []byte{kindCatalog},
		UpperBound: []byte{kindCatalog + 1},
	})
	if err != nil {
		return info, fmt.Errorf("read catalogue: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		if _, err := it.ValueAndErr(); err != nil {
			it.Close()
			return info, fmt.Errorf("read catalogue: %w", err)
		}
		info.Tables++
	}
	if err := it.Close(); err != nil {
		return info, fmt.Errorf("read catalogue: %w", err)
	}
	return info, nil
}
