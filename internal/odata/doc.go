// Package odata is the query language of the Table service: the $filter expression
// (lexer, parser, AST, typed three-valued evaluation, key-range planning) and $select
// lists (docs/protocol.md §5).
//
// # Grammar
//
//	filter     := orExpr
//	orExpr     := andExpr ( "or" andExpr )*
//	andExpr    := unary ( "and" unary )*
//	unary      := "not" unary | primary
//	primary    := "(" orExpr ")" | operand cmpOp operand | operand
//	cmpOp      := "eq" | "ne" | "gt" | "ge" | "lt" | "le"
//	operand    := identifier | literal
//
// Precedence is not > comparison > and > or. "not A eq 1" therefore means
// "not (A eq 1)": an operand is never itself an expression, so the comparison is the only
// reading. Parentheses need no surrounding spaces ("(A eq 1)or(B eq 2)"); a string or
// prefixed literal may also be followed directly by a keyword ("'a'or"), while a number
// must be followed by a space or parenthesis because its suffixes (1L, 1d, 1e5) are
// letters. A property may stand on either side of an operator; the parser normalises
// "'x' lt Name" to "Name gt 'x'" (the operator mirrored), so the AST always has the
// property on the left when exactly one side is a property. A bare operand is a boolean
// predicate ("IsActive", "not IsActive", "true"); a bare non-boolean literal is an error.
//
// Keywords (and, or, not, eq, ne, gt, ge, lt, le, true, false) are lower-case in every
// SDK's output and case-sensitive per the service docs; this package accepts them in any
// case, as Azurite does. The leniency costs nothing an SDK can send: a keyword is only a
// keyword where one can stand, so a property called "And" or "EQ" still works as an
// operand, and "Not" is a property when an operator, ")" or the end follows it. Only
// properties named true or false (in any case) cannot be referenced.
//
// Literals:
//
//	'text'              String; '' inside stands for one quote
//	123, -5             Int32; a value outside Int32 is an error ("Unrecognized
//	                    'Edm.Int32' literal") — the client must write 123L
//	123L, 123l          Int64
//	1.5, 2.0, 1e10,     Double (digits before a '.' are required; optional d/D
//	1.5E+3, -0.5, 2d    suffix); 1.5m (Decimal) and 1.5f (Single) are errors
//	true, false         Boolean
//	datetime'…'         DateTime: yyyy-mm-ddThh:mm[:ss[.fffffff]] with 0–7 fraction
//	                    digits and Z, an offset, or no zone (UTC); years 0001–9999 once
//	                    converted to UTC
//	guid'…'             Guid, hex digits in any case
//	X'0A0B', binary'…'  Binary, an even number of hex digits (prefixes in any case)
//
// Identifiers follow the C# rules property names obey (entity.ValidatePropertyName): a
// letter or underscore, then letters, digits, underscores and combining marks.
// PartitionKey and RowKey are String properties and Timestamp a DateTime; in Query Tables
// the only property is TableName.
//
// Errors are *azerr.Error values with code InvalidInput (400) and the service's message
// "Bad Request - Error in query syntax."; Detail names the byte offset (0-based) and the
// problem. Absurd inputs are rejected the same way instead of exhausting the stack or the
// CPU: nesting (parentheses plus not) deeper than MaxDepth, or more than MaxPredicates
// comparisons. The documented limit of 15 comparisons is deliberately not enforced —
// Azurite does not, clients send long or-chains, and whether the service does is
// unverified (docs/protocol.md §14).
//
// # Comparison semantics
//
// Evaluation uses three-valued logic. A comparison is unknown when a side is a property
// the entity lacks, or when the two sides' types cannot be compared. Unknown matches
// nothing — "Foo ne 'x'" does not return entities without Foo (the service's behaviour,
// docs/protocol.md §5.2) — and propagates as in SQL: not unknown = unknown, unknown and false =
// false, unknown and true = unknown, unknown or true = true, unknown or false = unknown. An
// entity matches when the whole filter is true. The service leaves "not" over a missing
// property unverified; three-valued logic is the choice under which "not (A eq 1)" and
// "A ne 1" agree.
//
// Types compare as follows:
//
//   - Int32, Int64 and Double form one numeric domain compared exactly, whichever side
//     is the property: integers compare as int64 (never through float64), and an integer
//     against a Double compares the mathematical values (no rounding of large Int64s).
//     This widens further than the service is known to (an Int64 property matched by an
//     Int32 literal, docs/protocol.md §5.2): the emulator reportedly treats an Int32 property
//     against an Int64 or Double literal as a mismatch. Widening both ways is the lenient
//     choice; it never makes a correct query return less.
//   - Double follows IEEE 754: -0 equals 0, and a NaN is unordered — every operator but
//     ne is false against it and ne is true. (NaN cannot be written as a literal.)
//   - String compares ordinally by UTF-8 bytes. This is UTF-16 code-unit order except
//     that supplementary characters sort after U+E000–U+FFFF instead of before; Cerulean
//     uses byte order everywhere because keys are stored and returned in byte order, so a
//     filter and a key range always agree.
//   - Boolean: false < true. DateTime: instants at 100 ns. Guid: the canonical
//     lower-case string, which is byte order of the 16 bytes. Binary: byte-wise.
//   - Anything else (a String property against an Int32 literal, a Guid against a
//     string, DateTime against a number …) is unknown for every operator, ne included.
//   - A bare operand is true when it is Boolean true, false when Boolean false, and
//     unknown otherwise (missing, or not a Boolean).
//   - Two literals, or two properties, compare under the same rules.
//
// # Planning
//
// KeyRanges derives from the filter the (PartitionKey, RowKey) ranges a query must read:
// a superset of the keys of every entity the filter can match, as sorted, disjoint
// [Start, End) ranges that map directly onto storage.ScanRequest (ClipRanges trims them
// to a continuation key). Comparisons of PartitionKey and RowKey with string literals are
// exact; every other predicate is treated as "could be anything", and not is pushed down
// to the key comparisons under three-valued logic (keys are never missing, so
// not (PartitionKey eq 'a') is exactly PartitionKey ne 'a'). Predicates that can never be
// true — a key compared with a number, false — plan to nothing. Bounds use the
// successor trick: the least string above s is s+"\x00", so RowKey gt 'r' starts at
// (pk, "r\x00") and PartitionKey le 'p' ends before ("p\x00", ""). A RowKey limit
// under a PartitionKey range that is not a single partition cannot be expressed as a key
// range and widens to the whole PartitionKey range. Exact reports when the ranges are
// precisely the matching keys, so the residual filter need not run; IsPoint recognises a
// single-entity lookup. Planning is done once, in Parse, and its size is bounded: past
// a few thousand spans the plan coarsens to whole partitions (and stops being Exact).
//
// For Query Tables, MatchTableName evaluates the filter on a table name and
// TableKeyRange bounds the catalogue scan in storage.TableKey order (see its comment for
// how case folding is handled).
package odata
