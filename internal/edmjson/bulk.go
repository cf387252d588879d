package edmjson

import (
	"bytes"
	"strconv"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
)

// BulkOperation is one operation of a bulk request document, decoded (DecodeBulk).
type BulkOperation struct {
	// Op is the "op" member as given; the caller checks it.
	Op string
	// IfMatch is the "ifMatch" member; HasIfMatch is false when it is absent or null.
	IfMatch    string
	HasIfMatch bool
	// Entity and Keys are the "entity" member as DecodeEntity decodes it, or EntityErr
	// is DecodeEntity's error: the entity alone is at fault, and the caller fails the
	// operation alone.
	Entity    entity.Entity
	Keys      Keys
	EntityErr error
}

// BulkEntry is one operation of a bulk request document as ScanBulk finds it: what
// grouping the operations and answering them takes, and where its entity lies in the
// body, to be decoded (DecodeEntity of body[Start:End]) only when the operation's turn
// comes. The byte slices point into what the scanner was given (or into a fresh buffer,
// for a string with escapes), and the scanner reuses the BulkEntry for the next
// operation: both are valid during the call that gets them only.
type BulkEntry struct {
	// Op is the "op" member's content, unescaped; the caller checks it.
	Op []byte
	// IfMatch is the "ifMatch" member's content; HasIfMatch is false when it is absent or
	// null.
	IfMatch    []byte
	HasIfMatch bool
	// Start and End delimit the "entity" object in the body (offsets in the whole body).
	Start, End int
	// PartitionKey is the content of the entity's first "PartitionKey" member whose value
	// is a well-formed JSON string (HasPartitionKey). An entity that DecodeEntity decodes
	// with a PartitionKey has exactly this one; one without HasPartitionKey decodes with
	// an error or without a PartitionKey (Keys.PartitionKey false), so it fails whatever
	// its partition.
	PartitionKey    []byte
	HasPartitionKey bool
	// RowKey is the same for the entity's "RowKey" member.
	RowKey    []byte
	HasRowKey bool
	// Members is how many members the entity object has (at its top level, annotations
	// and ignored ones included): with End-Start, what bounds the memory decoding it takes.
	Members int
}

// maxBulkDepth bounds the nesting skipped inside an entity (which DecodeEntity refuses
// anyway), so a hostile body cannot make the scan recurse without bound.
const maxBulkDepth = 32

// DecodeBulk decodes a bulk request body whole: ScanBulk, and DecodeEntity on each
// entity, whose errors are the operation's EntityErr, not the document's. It holds every
// entity decoded at once (up to twelve times its JSON); the server scans instead, and
// decodes each group of operations only when it is applied.
func DecodeBulk(body []byte, maxOps int) ([]BulkOperation, error) {
	ops := []BulkOperation{}
	err := ScanBulk(body, maxOps, func(e *BulkEntry) error {
		o := BulkOperation{Op: string(e.Op), IfMatch: string(e.IfMatch), HasIfMatch: e.HasIfMatch}
		o.Entity, o.Keys, o.EntityErr = DecodeEntity(body[e.Start:e.End])
		ops = append(ops, o)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ops, nil
}

// ScanBulk checks the shape of a bulk request body and calls each with every operation
// in order, without decoding any entity:
//
//	{"operations": [{"op": "insert", "entity": {…}, "ifMatch": "…"}, …]}
//
// The document's shape is checked here: one JSON object whose one member is
// "operations", an array of objects whose members are "op" (a string, required),
// "entity" (an object, required) and "ifMatch" (a string or null), each at most once, in
// any order. A document that is not that shape — malformed JSON around or inside an
// entity included, and member names with bad escapes or invalid UTF-8 anywhere — or
// holds more than maxOps operations is 400 InvalidInput naming the operation and offset,
// and nothing of it should be applied. What only DecodeEntity checks in an entity (string
// contents, nesting, types, duplicates) is that operation's problem, not the document's.
//
// An error from each ends the scan and is returned as it is (a caller that counts the
// memory of what it keeps refuses a request before it keeps too much). Work is linear in
// the body: one pass, which reads every byte once, and the keys' strings twice.
func ScanBulk(body []byte, maxOps int, each func(*BulkEntry) error) error {
	_, err := NewBulkScanner(maxOps).Scan(body, 0, true, each)
	return err
}

// ScanBulkChunks is ScanBulk on a body held in pieces, chunks, in order: a server reads
// a body into fixed-size buffers, and joining them would hold it twice. A token that
// crosses from one chunk into the next (an operation, mostly) is scanned from a copy of
// it: a scratch buffer of twice its part in the first chunk, at least 4 KiB, doubled
// until the token fits, so that the copying and scanning stay linear in the body. grow,
// when not nil, is called before the scratch grows, with how many bytes it grows by; its
// error ends the scan. Entries give their offsets in the whole body.
func ScanBulkChunks(chunks [][]byte, maxOps int, grow func(int) error, each func(*BulkEntry) error) error {
	s := NewBulkScanner(maxOps)
	total := 0
	for _, c := range chunks {
		total += len(c)
	}
	var scratch []byte
	k, base, pos := 0, 0, 0 // chunk k holds body[base:base+len(chunks[k])]; pos is where the scan is
	for s.step != stepDone {
		for k < len(chunks) && pos >= base+len(chunks[k]) {
			base += len(chunks[k])
			k++
		}
		if k == len(chunks) {
			_, err := s.Scan(nil, pos, true, each)
			return err
		}
		c := chunks[k][pos-base:]
		done, err := s.Scan(c, pos, k == len(chunks)-1, each)
		if err != nil {
			return err
		}
		pos += done
		if done == len(c) || s.step == stepDone {
			continue
		}
		for want := max(2*(len(c)-done), 4<<10); ; want *= 2 {
			stop := min(pos+want, total)
			if n := stop - pos; cap(scratch) < n {
				if grow != nil {
					if err := grow(n - cap(scratch)); err != nil {
						return err
					}
				}
				scratch = make([]byte, n)
			}
			scratch = scratch[:stop-pos]
			copyChunks(scratch, chunks, pos)
			done, err := s.Scan(scratch, pos, stop == total, each)
			if err != nil {
				return err
			}
			if done > 0 || s.step == stepDone {
				pos += done
				break
			}
		}
	}
	return nil
}

// copyChunks copies into dst the bytes of the body held in chunks from offset off on.
func copyChunks(dst []byte, chunks [][]byte, off int) {
	for _, c := range chunks {
		if len(dst) == 0 {
			return
		}
		if off >= len(c) {
			off -= len(c)
			continue
		}
		n := copy(dst, c[off:])
		dst, off = dst[n:], 0
	}
}

// BulkScanner checks the shape of a bulk request body and indexes its operations, as
// ScanBulk, from pieces of the body given in order: each Scan goes on where the last one
// stopped.
type BulkScanner struct {
	maxOps int
	step   bulkStep
	n      int    // operations so far
	seen   bool   // "operations" met
	first  bool   // no member yet in the document's object
	key    string // the member name stepKey read
	entry  BulkEntry
}

// bulkStep is where a BulkScanner is in the document. Each step but stepStart begins
// with blanks, which the scanner takes before the step, so that a run of them, however
// long, never has to be given again.
type bulkStep uint8

const (
	stepStart  bulkStep = iota // a byte order mark
	stepOpen                   // '{'
	stepMember                 // '}', or a ',' (but before the first member)
	stepKey                    // a member name
	stepColon                  // ':'
	stepArray                  // '['
	stepItem                   // ']', or a ',' (but before the first operation)
	stepValue                  // an operation
	stepEnd                    // the end of the body
	stepDone
)

// scanSlack is how close to the end of what Scan was given an error may be found and
// still be due to the piece ending there: the scanner looks at most this far past the
// position of an error to find it (a \u escape and its pair, a literal, a UTF-8
// sequence).
const scanSlack = 16

// errScanMore is next's answer when the piece ends before a step can start.
var errScanMore = invalidf("more")

// NewBulkScanner returns a scanner for a body of at most maxOps operations.
func NewBulkScanner(maxOps int) *BulkScanner {
	return &BulkScanner{maxOps: maxOps, first: true}
}

// Scan goes on scanning with buf, the body's bytes from offset off on, where off is where
// the last Scan stopped (0 at first); end says whether buf runs to the end of the body.
// It calls each with every operation complete in buf, in order (its error ends the scan
// and is returned as it is), and returns how far it got: buf[:done] is scanned, and what
// buf ends in the middle of (an operation, a member name, the few bytes of anything else)
// is left for the next Scan, which must be given it again with what follows. At the end
// of the body Scan takes it all or fails. Errors are the document's, as ScanBulk's, with
// offsets in the whole body. The entry given to each points into buf (or into a fresh
// buffer, for a string with escapes) and is valid during the call only.
func (s *BulkScanner) Scan(buf []byte, off int, end bool, each func(*BulkEntry) error) (done int, err error) {
	d := decoder{b: buf, base: off}
	for s.step != stepDone {
		if s.step != stepStart {
			d.ws()
		}
		at := d.i
		op, err := s.next(&d, end)
		if err == errScanMore {
			return at, nil
		}
		if err != nil {
			if !end && d.i+scanSlack > len(buf) {
				return at, nil // what failed may go on past buf
			}
			return at, err
		}
		if op {
			if err := each(&s.entry); err != nil {
				return at, err
			}
			s.n++
		}
	}
	return d.i, nil
}

// next takes one step at d: the token the step expects, or an error. op reports an
// operation scanned into s.entry.
func (s *BulkScanner) next(d *decoder, end bool) (op bool, err error) {
	atEnd := d.i >= len(d.b)
	if atEnd && !end && s.step != stepStart {
		return false, errScanMore // no step is decided without a byte
	}
	switch s.step {
	case stepStart:
		bom := []byte("\xEF\xBB\xBF")
		if d.base == 0 {
			if !end && len(d.b) < len(bom) && bytes.HasPrefix(bom, d.b) {
				return false, errScanMore
			}
			if bytes.HasPrefix(d.b, bom) {
				d.i = len(bom)
			}
		}
		s.step = stepOpen
	case stepOpen:
		switch {
		case atEnd:
			return false, invalidf("empty request body")
		case d.peek() != '{':
			return false, d.errSyntax(`expected a JSON object with an "operations" array`)
		}
		d.i++
		s.step = stepMember
	case stepMember:
		switch {
		case d.peek() == '}':
			d.i++
			s.step = stepEnd
		case s.first:
			s.step = stepKey
		case d.peek() != ',':
			return false, d.errSyntax("expected ',' or '}'")
		default:
			d.i++
			s.step = stepKey
		}
	case stepKey:
		if d.peek() != '"' {
			return false, d.errSyntax("expected a property name")
		}
		k, err := d.str()
		if err != nil {
			return false, err
		}
		s.key, s.step = string(k), stepColon
	case stepColon:
		if d.peek() != ':' {
			return false, d.errSyntax("expected ':'")
		}
		d.i++
		if s.key != "operations" {
			return false, invalidf(`unknown member %s: the bulk request body takes "operations"`, strconv.Quote(s.key))
		}
		if s.seen {
			return false, invalidf(`"operations" appears twice`)
		}
		s.seen, s.first, s.step = true, false, stepArray
	case stepArray:
		if d.peek() != '[' {
			return false, d.errSyntax(`"operations" must be an array`)
		}
		d.i++
		s.step = stepItem
	case stepItem:
		switch {
		case d.peek() == ']':
			d.i++
			s.step = stepMember
		case s.n == 0:
			s.step = stepValue
		case d.peek() != ',':
			return false, d.errSyntax("expected ',' or ']'")
		default:
			d.i++
			s.step = stepValue
		}
	case stepValue:
		if s.n == s.maxOps {
			return false, azerr.Newf(azerr.InvalidInput, "The bulk request holds more than %d operations; at most %d are allowed.", s.maxOps, s.maxOps)
		}
		s.entry = BulkEntry{}
		if err := d.bulkOperation(s.n, &s.entry); err != nil {
			return false, err
		}
		s.entry.Start += d.base
		s.entry.End += d.base
		s.step = stepItem
		return true, nil
	case stepEnd:
		switch {
		case !atEnd:
			return false, d.errSyntax("data after the JSON object")
		case !s.seen:
			return false, invalidf(`the bulk request body has no "operations" array`)
		}
		s.step = stepDone
	}
	return false, nil
}

// key scans a member name and the ':' after it (and the blanks around the ':').
func (d *decoder) key() ([]byte, error) {
	if d.peek() != '"' {
		return nil, d.errSyntax("expected a property name")
	}
	k, err := d.str()
	if err != nil {
		return nil, err
	}
	d.ws()
	if d.peek() != ':' {
		return nil, d.errSyntax("expected ':'")
	}
	d.i++
	d.ws()
	return k, nil
}

// bulkOperation scans operation n, an object, into e.
func (d *decoder) bulkOperation(n int, e *BulkEntry) error {
	fail := func(err error) error {
		ae, _ := azerr.As(err)
		return ae.WithDetail("operation " + strconv.Itoa(n) + ": " + ae.Detail)
	}
	if d.peek() != '{' {
		return fail(d.errSyntax("an operation must be a JSON object"))
	}
	d.i++
	d.ws()
	var hasOp, hasEntity, hasIfMatch bool
	for first := true; d.peek() != '}'; first = false {
		if !first {
			if d.peek() != ',' {
				return fail(d.errSyntax("expected ',' or '}'"))
			}
			d.i++
			d.ws()
		}
		key, err := d.key()
		if err != nil {
			return fail(err)
		}
		var dup bool
		switch string(key) {
		case "op":
			dup, hasOp = hasOp, true
			if d.peek() != '"' {
				return fail(d.errSyntax(`"op" must be a string`))
			}
			v, err := d.str()
			if err != nil {
				return fail(err)
			}
			e.Op = v
		case "ifMatch":
			dup, hasIfMatch = hasIfMatch, true
			switch {
			case d.peek() == '"':
				v, err := d.str()
				if err != nil {
					return fail(err)
				}
				e.IfMatch, e.HasIfMatch = v, true
			case bytes.HasPrefix(d.b[d.i:], []byte("null")):
				d.i += 4
			default:
				return fail(d.errSyntax(`"ifMatch" must be a string (an ETag or "*") or null`))
			}
		case "entity":
			dup, hasEntity = hasEntity, true
			if d.peek() != '{' {
				return fail(d.errSyntax(`"entity" must be a JSON object`))
			}
			if !dup {
				e.Start = d.i
				err = d.entity(e)
				e.End = d.i
			} else {
				err = d.skip(0)
			}
			if err != nil {
				return fail(err)
			}
		default:
			return fail(invalidf(`unknown member %s: an operation takes "op", "entity" and "ifMatch"`, strconv.Quote(string(key))))
		}
		if dup {
			return fail(invalidf("%s appears twice", strconv.Quote(string(key))))
		}
		d.ws()
	}
	d.i++
	switch {
	case !hasOp:
		return fail(invalidf(`no "op"`))
	case !hasEntity:
		return fail(invalidf(`no "entity"`))
	}
	return nil
}

// entity passes over an entity object as skip does, counting its members and noting the
// first PartitionKey and RowKey whose values are well-formed strings. A key's value that
// is not (bad escapes, invalid UTF-8) is skipped as skip would: it is the entity's
// problem, which DecodeEntity reports, not the document's.
func (d *decoder) entity(e *BulkEntry) error {
	d.i++
	d.ws()
	for first := true; d.peek() != '}'; first = false {
		if !first {
			if d.peek() != ',' {
				return d.errSyntax("expected ',' or '}'")
			}
			d.i++
			d.ws()
		}
		key, err := d.key()
		if err != nil {
			return err
		}
		e.Members++
		var dst *[]byte
		var has *bool
		if d.peek() == '"' {
			switch {
			case string(key) == "PartitionKey" && !e.HasPartitionKey:
				dst, has = &e.PartitionKey, &e.HasPartitionKey
			case string(key) == "RowKey" && !e.HasRowKey:
				dst, has = &e.RowKey, &e.HasRowKey
			}
		}
		if dst != nil {
			start := d.i
			v, err := d.str()
			if err != nil {
				d.i = start
				if err := d.skipString(); err != nil {
					return err
				}
			} else {
				*dst, *has = v, true
			}
		} else if err := d.skip(1); err != nil {
			return err
		}
		d.ws()
	}
	d.i++
	return nil
}

// skip passes over one JSON value (at depth levels of nesting), checking only what it
// takes to find where the value ends.
func (d *decoder) skip(depth int) error {
	if depth > maxBulkDepth {
		return d.errSyntax("nested too deeply")
	}
	switch c := d.peek(); {
	case c == '"':
		return d.skipString()
	case c == '{' || c == '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		d.i++
		d.ws()
		for first := true; d.peek() != end; first = false {
			if !first {
				if d.peek() != ',' {
					return d.errSyntax("expected ',' or '" + string(end) + "'")
				}
				d.i++
				d.ws()
			}
			if c == '{' {
				if _, err := d.key(); err != nil {
					return err
				}
			}
			if err := d.skip(depth + 1); err != nil {
				return err
			}
			d.ws()
		}
		d.i++
		return nil
	case c == '-' || c >= '0' && c <= '9':
		_, _, err := d.number()
		return err
	case c == 't' && bytes.HasPrefix(d.b[d.i:], []byte("true")):
		d.i += 4
	case c == 'f' && bytes.HasPrefix(d.b[d.i:], []byte("false")):
		d.i += 5
	case c == 'n' && bytes.HasPrefix(d.b[d.i:], []byte("null")):
		d.i += 4
	default:
		return d.errSyntax("expected a value")
	}
	return nil
}

// skipString passes over a JSON string, eight plain bytes at a time; its content is
// checked by whoever decodes it.
func (d *decoder) skipString() error {
	b := d.b
	i := d.i + 1
	for i < len(b) {
		if i+8 <= len(b) && plain8(load8(b, i)) {
			i += 8
			continue
		}
		switch b[i] {
		case '"':
			d.i = i + 1
			return nil
		case '\\':
			i += 2
		default:
			i++
		}
	}
	d.i = len(b)
	return d.errSyntax("unterminated string")
}
