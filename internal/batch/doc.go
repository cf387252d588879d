// Package batch is the wire codec for entity group transactions, `POST /$batch`
// (docs/protocol.md §6): it parses the multipart/mixed request into operations and writes the
// multipart/mixed response. It knows nothing about HTTP serving, tables or storage; the
// server resolves each Operation, applies the changeset atomically, and hands back one
// Result per operation (success) or the one failing Result (failure).
//
// # Request side
//
// Parse is deliberately tolerant, because each official SDK frames the request a little
// differently (docs/protocol.md §6.2, §11, checklist item 26): a preamble or extra blank lines
// before the first boundary (JS), lower-case part headers (JS), no Content-Length, quoted
// boundaries (Python), "Content-Transfer-Encoding:binary" without a space, CRLF or bare LF
// line endings (even mixed), absolute or path-only request URLs, %24format, empty header
// values (Go writes "x-ms-version: "), an extra blank line before the body (JS), SAS
// parameters in part URLs, and Content-ID on the MIME part or inside the HTTP request
// (Python numbers parts). The splitter is hand-written rather than mime/multipart, whose
// delimiter search fixes the line ending from the first boundary line.
//
// What Parse rejects, and how:
//   - Anything about the MIME or HTTP framing (no boundary, unterminated multipart, a second
//     changeset, several top-level parts, an empty changeset, a nested multipart inside the
//     changeset, a part with no or a malformed request line, a malformed header line, more
//     than 100 headers in one sub-request) is a plain *azerr.Error 400 InvalidInput: the
//     server answers it with a normal error response, not a 202.
//   - A problem that belongs to one operation (an unparseable URL, more than 64 query
//     parameters, X-HTTP-Method tunnelling, a verb that is not allowed) and more than
//     MaxOperations operations are an *OpError carrying the zero-based operation index. The real service reports these
//     inside a 202 batch response ("0:The batch request operation exceeds the maximum 100
//     changes per change set." is recorded that way; the .NET SDK's tests expect a
//     TableTransactionFailedException for it), so the server should answer them with
//     WriteFailure. OpError unwraps to its *azerr.Error, so azerr.As works on it too.
//
// The body-size limit (MaxBodyBytes, 413 RequestBodyTooLarge) is the caller's job: it reads
// the body with that limit before calling Parse.
//
// # Response side
//
// WriteResponse, WriteFailure and WriteRetrieve produce exactly the layout of docs/protocol.md
// §6.3/§6.4, because every SDK parses it differently and some very literally:
//   - the body starts with "--batchresponse_<uuid>" on its first line (Go reads the
//     boundary from the first body line, not from Content-Type) and the changeset part's
//     body starts immediately with "--changesetresponse_<uuid>" (Go again);
//   - the nested boundary begins with "changesetresponse_" (JS splits the raw body on
//     "--changesetresponse_" and drops the first and last pieces);
//   - each sub-response is "HTTP/1.1 <code> <reason>" with a non-empty reason (.NET splits
//     the status line into exactly three fields) and a blank line after its headers even
//     when there is no body (Go feeds each part to http.ReadResponse, which needs it);
//   - header names are spelled as the service spells them (JS matches "ETag: (.*)"
//     case-sensitively);
//   - a failure carries exactly one sub-response (.NET treats the batch as failed only when
//     there is exactly one part and its status is >= 400);
//   - CRLF everywhere.
package batch
