package edmjson

import (
	"bytes"
	"strconv"

	"github.com/ceruleandb/cerulean/azerr"
	"github.com/ceruleandb/cerulean/entity"
)

// BulkOperation is one operation of a bulk request document (docs/protocol.md §15).
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

// maxBulkDepth bounds the nesting skipped inside an entity (which DecodeEntity refuses
// anyway), so a hostile body cannot make the scan recurse without bound.
const maxBulkDepth = 32

// DecodeBulk decodes a bulk request body:
//
//	{"operations": [{"op": "insert", "entity": {…}, "ifMatch": "…"}, …]}
//
// The document's shape is checked here: one JSON object whose one member is
// "operations", an array of objects whose members are "op" (a string, required),
// "entity" (an object, required) and "ifMatch" (a string or null), each at most once, in
// any order. A document that is not that shape — malformed JSON around or inside an
// entity included — or holds more than maxOps operations is 400 InvalidInput naming the
// operation and offset, and nothing of it should be applied.
//
// Each entity is decoded by DecodeEntity from its span of the body, so every rule of a
// single write's body applies to it; its errors are the operation's EntityErr, not the
// document's. Work is linear in the body: the scan passes over each entity once to find
// its end, and DecodeEntity once more.
func DecodeBulk(body []byte, maxOps int) ([]BulkOperation, error) {
	return DecodeBulkEach(body, maxOps, nil)
}

// DecodeBulkEach is DecodeBulk, calling each (when not nil) with every operation as soon
// as it is decoded; an error from each ends the decoding and is returned as it is. A
// caller that counts the memory the operations take (they take up to ten times their
// JSON) refuses a request before it holds too much.
func DecodeBulkEach(body []byte, maxOps int, each func(*BulkOperation) error) ([]BulkOperation, error) {
	d := decoder{b: body}
	if bytes.HasPrefix(body, []byte("\xEF\xBB\xBF")) {
		d.i = 3
	}
	d.ws()
	if d.i >= len(body) {
		return nil, invalidf("empty request body")
	}
	if d.peek() != '{' {
		return nil, d.errSyntax(`expected a JSON object with an "operations" array`)
	}
	d.i++
	d.ws()
	var ops []BulkOperation
	seen := false
	for first := true; d.peek() != '}'; first = false {
		if !first {
			if d.peek() != ',' {
				return nil, d.errSyntax("expected ',' or '}'")
			}
			d.i++
			d.ws()
		}
		key, err := d.key()
		if err != nil {
			return nil, err
		}
		if string(key) != "operations" {
			return nil, invalidf(`unknown member %s: the bulk request body takes "operations"`, strconv.Quote(string(key)))
		}
		if seen {
			return nil, invalidf(`"operations" appears twice`)
		}
		seen = true
		if ops, err = d.bulkOperations(maxOps, each); err != nil {
			return nil, err
		}
		d.ws()
	}
	d.i++
	d.ws()
	if d.i != len(body) {
		return nil, d.errSyntax("data after the JSON object")
	}
	if !seen {
		return nil, invalidf(`the bulk request body has no "operations" array`)
	}
	return ops, nil
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

// bulkOperations scans the operations array.
func (d *decoder) bulkOperations(maxOps int, each func(*BulkOperation) error) ([]BulkOperation, error) {
	if d.peek() != '[' {
		return nil, d.errSyntax(`"operations" must be an array`)
	}
	d.i++
	d.ws()
	ops := []BulkOperation{}
	for d.peek() != ']' {
		if len(ops) > 0 {
			if d.peek() != ',' {
				return nil, d.errSyntax("expected ',' or ']'")
			}
			d.i++
			d.ws()
		}
		if len(ops) == maxOps {
			return nil, azerr.Newf(azerr.InvalidInput, "The bulk request holds more than %d operations; at most %d are allowed.", maxOps, maxOps)
		}
		op, err := d.bulkOperation(len(ops))
		if err != nil {
			return nil, err
		}
		if each != nil {
			if err := each(&op); err != nil {
				return nil, err
			}
		}
		ops = append(ops, op)
		d.ws()
	}
	d.i++
	return ops, nil
}

// bulkOperation scans operation n, an object.
func (d *decoder) bulkOperation(n int) (BulkOperation, error) {
	var op BulkOperation
	fail := func(err error) (BulkOperation, error) {
		e, _ := azerr.As(err)
		return op, e.WithDetail("operation " + strconv.Itoa(n) + ": " + e.Detail)
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
			op.Op = string(v)
		case "ifMatch":
			dup, hasIfMatch = hasIfMatch, true
			switch {
			case d.peek() == '"':
				v, err := d.str()
				if err != nil {
					return fail(err)
				}
				op.IfMatch, op.HasIfMatch = string(v), true
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
			start := d.i
			if err := d.skip(0); err != nil {
				return fail(err)
			}
			op.Entity, op.Keys, op.EntityErr = DecodeEntity(d.b[start:d.i])
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
	return op, nil
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
