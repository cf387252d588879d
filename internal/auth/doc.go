// Package auth authenticates Table service requests the way Azure Storage does: the
// SharedKey and SharedKeyLite schemes of the Table service (docs/protocol.md §8.2–8.4), against
// a fixed set of accounts, each with one or two keys.
//
// The package knows nothing about routing: the server resolves which account a request
// addresses (first DNS label or first path segment, docs/protocol.md §1.1) and hands that name
// to Verifier.Authenticate together with the request. Everything that is signed is read
// from the request exactly as received, because only the raw bytes reproduce each
// client's signature.
package auth
