// Package jsonl is Cerulean's interchange format: JSON Lines, one entity per line, every
// property annotated with its EDM type so that a round trip is exact (docs/jsonl.md).
//
// A line is an OData JSON entity object, so it is also a valid Insert Entity body:
//
//	{"odata.table":"orders","PartitionKey":"p1","RowKey":"r1","Timestamp@odata.type":"Edm.DateTime","Timestamp":"2026-11-24T19:00:00.1234567Z","Count@odata.type":"Edm.Int64","Count":"9223372036854775807"}
//
// "odata.table" appears when the file holds several tables; Timestamp when the export
// kept it (it is informational: an import never sets it); "odata.expiry" when the entity
// expires (the expiry its elastic table stored with it; in such a table an entity without
// it never expires). A table's settings, when the source has them, are a line of their
// own before its entities:
//
//	{"odata.table":"events","odata.settings":{"Elastic":true,"DefaultTimeToLive":86400,"TimeToLiveProperty":"TTLInSeconds"}}
package jsonl

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/ceruleandb/cerulean/internal/transfer/record"
)

// MaxLine bounds one line: an entity is at most 1 MiB stored, and JSON escaping (base64
// Binary, \u escapes) can make its text a few times larger.
const MaxLine = 8 << 20

// Writer writes records as JSON Lines.
type Writer struct {
	w    *bufio.Writer
	buf  []byte
	opts record.JSONOptions
}

// NewWriter writes to w. withTable writes each record's table (for a file of several
// tables); withTimestamp writes the Timestamps records carry.
func NewWriter(w io.Writer, withTable, withTimestamp bool) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 256<<10), opts: record.JSONOptions{AnnotateAll: true, Table: withTable, Timestamp: withTimestamp, Expiry: true}}
}

// Write writes one record (an entity, or a table's settings) as one line.
func (w *Writer) Write(r *record.Record) error {
	if r.Settings != nil {
		w.buf = record.AppendSettings(w.buf[:0], r, w.opts.Table)
	} else {
		w.buf = record.AppendJSON(w.buf[:0], r, w.opts)
	}
	w.buf = append(w.buf, '\n')
	_, err := w.w.Write(w.buf)
	return err
}

// Flush writes out what is buffered (so a checkpoint can name a durable position).
func (w *Writer) Flush() error { return w.w.Flush() }

// Close flushes; it does not close the underlying writer.
func (w *Writer) Close() error { return w.w.Flush() }

// Reader reads JSON Lines records: entities, and tables' settings (record.Settings set).
// Blank lines are skipped; a line that is not a valid entity or settings line gives a
// *record.LineError, after which Read goes on with the next line.
type Reader struct {
	r    *bufio.Reader
	line int
	// Offset is the byte offset after the last line read: where a resumed read starts.
	Offset int64
}

// NewReader reads from r, whose first byte is line 1 (or line firstLine, with offset
// startOffset, when resuming part-way through a file).
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 256<<10)}
}

// Resume tells the reader that r starts at byte offset off, after line line.
func (rd *Reader) Resume(line int, off int64) { rd.line, rd.Offset = line, off }

// Line is the number of the last line read.
func (rd *Reader) Line() int { return rd.line }

// Read returns the next record, io.EOF at the end.
func (rd *Reader) Read() (record.Record, error) {
	for {
		b, err := rd.readLine()
		if err != nil {
			return record.Record{}, err
		}
		if len(trimSpace(b)) == 0 {
			continue
		}
		var r record.Record
		if record.IsSettings(b) {
			r, err = record.SettingsFromJSON(b)
		} else {
			r, err = record.FromJSON(b)
		}
		if err != nil {
			return record.Record{}, &record.LineError{Line: rd.line, Err: errors.New(record.Detail(err))}
		}
		return r, nil
	}
}

// readLine reads one line without its end, counting it; a line over MaxLine is an error
// for that line (and skipped).
func (rd *Reader) readLine() ([]byte, error) {
	var long []byte
	tooLong := false
	n := 0
	for {
		chunk, err := rd.r.ReadSlice('\n')
		n += len(chunk)
		if err == bufio.ErrBufferFull {
			if !tooLong {
				if len(long)+len(chunk) > MaxLine {
					tooLong, long = true, nil
				} else {
					long = append(long, chunk...)
				}
			}
			continue
		}
		if err == io.EOF && n == 0 {
			return nil, io.EOF
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		rd.line++
		rd.Offset += int64(n)
		if tooLong || len(long)+len(chunk) > MaxLine {
			return nil, &record.LineError{Line: rd.line, Err: fmt.Errorf("line longer than %d bytes", MaxLine)}
		}
		if long != nil {
			chunk = append(long, chunk...)
		}
		if k := len(chunk); k > 0 && chunk[k-1] == '\n' {
			chunk = chunk[:k-1]
		}
		return chunk, nil
	}
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
