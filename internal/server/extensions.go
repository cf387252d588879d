package server

import "net/url"

// Cerulean's extensions of the REST API on a table resource, selected by ?comp= like the
// service's own table-level operations (?comp=acl), so that SharedKey signing covers them
// as it covers those. Their bodies and answers are JSON.
const (
	// compSettings reads and writes a table's settings (elastic, time-to-live).
	compSettings = "properties"
	// compBulk is a bulk write on an elastic table.
	compBulk = "bulk"
	// compChanges reads a table's change feed.
	compChanges = "changes"
)

// jsonComp reports whether the query selects one of the JSON extensions (whose errors
// are JSON, unlike the XML endpoints' selected by the other comp values).
func jsonComp(q url.Values) bool {
	if q.Get("restype") == "service" {
		return false
	}
	switch q.Get("comp") {
	case compSettings, compBulk, compChanges:
		return true
	}
	return false
}
