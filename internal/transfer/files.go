package transfer

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ceruleandb/cerulean/internal/transfer/csv"
	"github.com/ceruleandb/cerulean/internal/transfer/jsonl"
	"github.com/ceruleandb/cerulean/internal/transfer/record"
)

// Formats of files.
const (
	JSONL = "jsonl"
	CSV   = "csv"
)

// FormatOf is the format a flag names, or that a path's extension implies (JSON Lines
// unless the path ends in .csv).
func FormatOf(flag, path string) (string, error) {
	switch strings.ToLower(flag) {
	case JSONL, "json", "ndjson":
		return JSONL, nil
	case CSV:
		return CSV, nil
	case "":
		if strings.EqualFold(filepath.Ext(path), ".csv") {
			return CSV, nil
		}
		return JSONL, nil
	}
	return "", fmt.Errorf("unknown format %q (jsonl or csv)", flag)
}

// FileOutput is an export's output: stdout ("-" or "") or a file, in a format.
type FileOutput struct {
	record.Writer
	f       *os.File // nil for stdout
	regular bool     // f is a regular file (not a device, a pipe, a socket)
	jw      *jsonl.Writer
	format  string
}

// Write writes one record. CSV has no place for a table's settings: a standard table's
// are dropped (CSV means standard), an elastic table's are refused, since its settings
// and its entities' expiry would be lost.
func (o *FileOutput) Write(r *record.Record) error {
	if r.Settings != nil && o.format == CSV {
		if r.Settings.Elastic {
			return fmt.Errorf("table %s is %s: CSV cannot carry a table's settings or its entities' expiry; export it as JSON Lines (--format jsonl), or give --settings=false to export the entities alone", r.Table, describeSettings(*r.Settings))
		}
		return nil
	}
	return o.Writer.Write(r)
}

// CreateOutput opens path for an export. multi writes each record's table (several
// tables; JSON Lines only); timestamp keeps the Timestamps. With resume the file is
// kept and later truncated by Truncate.
func CreateOutput(path, format string, multi, timestamp, resume bool) (*FileOutput, error) {
	if format == CSV && multi {
		return nil, fmt.Errorf("a CSV file holds one table: name one with --table, or use --format jsonl")
	}
	var w io.Writer = os.Stdout
	o := &FileOutput{format: format}
	if path != "" && path != "-" {
		flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
		if resume {
			flags = os.O_WRONLY
		}
		f, err := os.OpenFile(path, flags, 0o644)
		if err != nil {
			return nil, fmt.Errorf("open output: %w", err)
		}
		o.f, w = f, f
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			o.regular = true
		}
	}
	if format == CSV {
		cw, err := csv.NewWriter(w, timestamp)
		if err != nil {
			o.closeFile()
			return nil, err
		}
		o.Writer = cw
	} else {
		o.jw = jsonl.NewWriter(w, multi, timestamp)
		o.Writer = o.jw
	}
	return o, nil
}

// Resumable reports whether an export to this output can resume: JSON Lines to a regular
// file. Anything else — stdout, a device such as /dev/null, a pipe — can be neither cut
// back nor read again, so such an export keeps no checkpoint.
func (o *FileOutput) Resumable() bool { return o.f != nil && o.regular && o.format == JSONL }

// Truncate cuts the file to n bytes and writes after them (a resumed export). A file
// shorter than n is not the one the checkpoint describes (a shell's '>' emptied it, or
// it was replaced) and is refused: extending it would leave zeros in the output.
func (o *FileOutput) Truncate(n int64) error {
	if !o.Resumable() {
		return fmt.Errorf("only a JSON Lines export to a regular file resumes")
	}
	if st, err := o.f.Stat(); err != nil {
		return fmt.Errorf("truncate output: %w", err)
	} else if st.Size() < n {
		return fmt.Errorf("resume: the output holds %d bytes, the checkpoint says %d were written: is it the same file?", st.Size(), n)
	}
	if err := o.f.Truncate(n); err != nil {
		return fmt.Errorf("truncate output: %w", err)
	}
	if _, err := o.f.Seek(n, io.SeekStart); err != nil {
		return fmt.Errorf("truncate output: %w", err)
	}
	return nil
}

// Sync flushes and makes the output durable, returning its length; -1 when it is not
// resumable.
func (o *FileOutput) Sync() (int64, error) {
	if !o.Resumable() {
		return -1, nil
	}
	if err := o.jw.Flush(); err != nil {
		return 0, err
	}
	if err := o.f.Sync(); err != nil {
		return 0, err
	}
	return o.f.Seek(0, io.SeekCurrent)
}

// Close completes the output and closes the file.
func (o *FileOutput) Close() error {
	err := o.Writer.Close()
	if cerr := o.closeFile(); err == nil {
		err = cerr
	}
	return err
}

// Abandon flushes what is written (an interrupted export) and closes the file.
func (o *FileOutput) Abandon() {
	if o.jw != nil {
		_ = o.jw.Flush()
	}
	_ = o.closeFile()
}

func (o *FileOutput) closeFile() error {
	if o.f == nil {
		return nil
	}
	f := o.f
	o.f = nil
	return f.Close()
}

// OpenInput opens an import's input: stdin ("-" or "") or a file, as records.
func OpenInput(path, format string) (record.Reader, io.Closer, error) {
	var r io.Reader = os.Stdin
	var c io.Closer = io.NopCloser(nil)
	if path != "" && path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, fmt.Errorf("open input: %w", err)
		}
		r, c = f, f
	}
	if format == CSV {
		return csv.NewReader(r), c, nil
	}
	return jsonl.NewReader(r), c, nil
}

// DefaultCheckpoint is where a run keeps its checkpoint unless told: beside its file
// (PATH.checkpoint, PATH with its symbolic links resolved), or, for a run on
// stdin/stdout, on something that is not a regular file (/dev/stdin, a pipe) or between
// endpoints, a file in the current directory named for the job — never in /dev.
func DefaultCheckpoint(kind, job, beside string) string {
	if beside != "" && beside != "-" {
		if real, err := filepath.EvalSymlinks(beside); err == nil {
			if st, err := os.Stat(real); err == nil && st.Mode().IsRegular() {
				return real + ".checkpoint"
			}
		}
	}
	sum := sha256.Sum256([]byte(job))
	return "cerulean-" + kind + "-" + hex.EncodeToString(sum[:4]) + ".checkpoint"
}

// Interrupts turns SIGINT, SIGTERM and SIGHUP (a closed terminal) into a clean stop: the
// first closes stop (the run finishes the batches in flight, writes its checkpoint and
// returns ErrInterrupted), a second cancels ctx (in-flight calls are abandoned; the
// checkpoint still holds only acknowledged work). SIGHUP is left alone when it is
// ignored (nohup): the run then goes on after its terminal closes. release undoes the
// handling — except after a stop: then the signals stay ignored until the process exits,
// since one signal often comes twice (timeout(1) sends it to the command and to its
// process group), and a copy arriving after release would otherwise kill a command that
// has stopped cleanly (exit status 130 instead of its own).
func Interrupts(parent context.Context) (ctx context.Context, stop <-chan struct{}, release func()) {
	ctx, cancel := context.WithCancel(parent)
	sig := make(chan os.Signal, 2)
	signals := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		signals = append(signals, syscall.SIGHUP)
	}
	signal.Notify(sig, signals...)
	ch := make(chan struct{})
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		n := 0
		for {
			select {
			case <-sig:
				n++
				if n == 1 {
					close(ch)
				} else {
					cancel()
				}
			case <-done:
				return
			}
		}
	}()
	return ctx, ch, func() {
		close(done)
		<-exited
		select {
		case <-ch:
			signal.Ignore(signals...)
		default:
			signal.Stop(sig)
		}
		cancel()
	}
}

// RemoveCheckpoint deletes a finished run's checkpoint.
func RemoveCheckpoint(path string) {
	if path != "" {
		_ = os.Remove(path)
	}
}

// CountLines counts the entity lines of a JSON Lines file (non-blank lines that are not
// a table's settings), for the progress total: a fast pass (the file is read once more,
// at disk speed) that lets the bar show a percentage and an ETA.
func CountLines(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	var n int64
	blank, settings := true, false
	var head []byte // the start of the line, enough to see a settings line
	for {
		chunk, err := br.ReadSlice('\n')
		if len(head) < 4096 {
			head = append(head, chunk[:min(len(chunk), 4096-len(head))]...)
		}
		for _, c := range chunk {
			if c != '\n' && c != ' ' && c != '\t' && c != '\r' {
				blank = false
				break
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		settings = record.IsSettings(head)
		if !blank && !settings {
			n++
		}
		blank, head = true, head[:0]
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
	}
}
