// Package edmjson is the OData v3 "JSON light" codec for table entities and tables: it
// decodes request bodies into entity.Entity values and appends response bodies at the
// three metadata levels, exactly as the Azure Table service writes them (docs/protocol.md §4).
//
// It is hand-written rather than built on encoding/json because it sits on every request:
// decoding a 1 KiB entity costs a few allocations (one for all strings, one for all
// Binary/Guid bytes, one for the property slice), and encoding appends to a caller-owned
// buffer without allocating.
//
// Decoding is deliberately lenient where the SDKs differ (annotations before or after the
// value, numbers and booleans carried in strings, Edm.Double on integers, Edm.String on
// strings, odata.* and Timestamp keys re-sent from a query) and strict where the data
// would otherwise change: no nested values, no invalid UTF-8 or unpaired surrogates, no
// number that does not fit its type. Encoding writes the forms every SDK reads back into
// the same EDM type: integral doubles keep a decimal point, Int64 is a string, and only
// the types JSON cannot express carry annotations.
//
// All errors are *azerr.Error values; the Detail field says what was wrong.
package edmjson
