package pebble

import "github.com/cockroachdb/pebble/v2/vfs"

// walFS is the file system Pebble writes through: its WAL files are walFiles, whose
// data syncs sync makes (nil: the files' own). Everything else passes through.
type walFS struct {
	vfs.FS
	sync *walSyncer
}

func (fs walFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	if err == nil && category == "pebble-wal" {
		f = &walFile{File: f, sync: fs.sync, fill: true}
	}
	return f, err
}

func (fs walFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	if err == nil && category == "pebble-wal" {
		// Pebble writes a recycled file from its start; its length is written already.
		wf := &walFile{File: f, sync: fs.sync}
		if fi, err := f.Stat(); err == nil {
			wf.fill, wf.filled = true, fi.Size()
		}
		f = wf
	}
	return f, err
}

func (fs walFS) Unwrap() vfs.FS { return fs.FS }

// walFillChunk is how far a WAL file is extended with zeros at a time (see
// walFile.Write): the most it holds past what it has logged, as walPreallocateMax is
// without the zeros.
const walFillChunk = walPreallocateMax

// walZeros is what a WAL file is extended with.
var walZeros [walFillChunk]byte

// walFile is a WAL file as the engine writes it: extended with zeros ahead of its writes
// (see Write), its preallocations capped (see Preallocate), and its data syncs made by
// the engine's walSyncer.
type walFile struct {
	vfs.File
	sync *walSyncer
	// fill is set while the file is extended with zeros ahead of its writes; written is
	// how much Pebble has written, from the start, and filled the file's length (at
	// least written while fill is set).
	fill            bool
	written, filled int64
}

func (f *walFile) SyncData() error { return f.sync.syncData(f.File) }

// Write appends p, first extending the file with zeros when p would reach past its end
// (to the first multiple of walFillChunk past it).
//
// Why: a data sync of a file that has grown also commits the file's new length (and
// blocks) to the file system's journal; one that only overwrites does not. On the
// project's ext4 test machine a 1,200-byte write and fdatasync took 383–413 µs
// (119–129 µs of CPU) appending and 291–292 µs (88–92 µs) overwriting. Pebble recycles
// WAL files for that reason, but a new store, and every store after a restart (Pebble
// recycles only its own process's logs), writes new files until recycled ones of the
// memtable's size come round, which under synced inserts took about 15 seconds. With
// the zeros, a new WAL file has one growing sync per walFillChunk instead of one per
// group commit: one synced writer on a new store (`cerulean bench --client raw --workers
// 1`, 5-second runs on fresh servers, five pairs) made 1,004–1,338 inserts/s with WAL
// syncs of 339–520 µs on average, against 954–1,088/s and 462–595 µs; in
// BenchmarkApplyInsert (-benchtime 5000x, a new store each), one writer went from
// 4,934–5,380 to 6,680–7,791 inserts/s and 32 from 29,241–32,891 to 36,464–43,252.
//
// Zeros past the log's end are what preallocation and recycling leave too, and Pebble's
// WAL reader takes them for the end. They are written ahead of the records that will
// overwrite them, never over one: Pebble writes a WAL file in order, from one goroutine
// at a time, with Write only.
func (f *walFile) Write(p []byte) (int, error) {
	if f.fill {
		if end := f.written + int64(len(p)); end > f.filled {
			f.zeroFill(end)
		}
	}
	n, err := f.File.Write(p)
	f.written += int64(n)
	return n, err
}

// zeroFill extends the file with zeros to the first multiple of walFillChunk past end.
// If a write fails, the file stops being extended ahead and grows with its writes, as
// any file does; the write that follows meets the failure again if it was not a
// passing one.
func (f *walFile) zeroFill(end int64) {
	to := (end/walFillChunk + 1) * walFillChunk
	for f.filled < to {
		n := min(to-f.filled, walFillChunk)
		if _, err := f.File.WriteAt(walZeros[:n], f.filled); err != nil {
			f.fill = false
			return
		}
		f.filled += n
	}
}

// WriteAt is not how Pebble writes a WAL file. Were it ever, zeros ahead of Write's
// records could land on WriteAt's, so the file stops being extended ahead.
func (f *walFile) WriteAt(p []byte, off int64) (int, error) {
	f.fill = false
	return f.File.WriteAt(p, off)
}

// Preallocate does nothing while the file is extended with zeros (which allocates it),
// and otherwise caps the preallocation at walPreallocateMax. Pebble preallocates 110% of
// MemTableSize at the start of every new WAL file, whatever the size of the memtable it
// logs; a WAL file then holds as much of the disk as it has logged plus at most 1 MiB, so
// that the guard's accounting of bytes written holds and freed space is not swallowed by
// the next WAL.
func (f *walFile) Preallocate(offset, length int64) error {
	if f.fill {
		return nil
	}
	return f.File.Preallocate(offset, min(length, walPreallocateMax))
}
