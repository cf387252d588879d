// Package observe is how the server reports each request to what watches it — metrics,
// the hot-partition sketch, the access log — without any of them in the data path: the
// server fills one Request when the request is answered and hands it to every Observer,
// once (design.md, "Operator surface").
package observe

import "time"

// Request is what the server knows of one answered request. Every string is either
// bounded by the protocol (operation names, error codes, schemes) or names the client's
// own data (account, table, PartitionKey); an Observer that turns them into metric labels
// must bound their cardinality itself.
type Request struct {
	// Start is when the request arrived; Latency how long it took to answer.
	Start   time.Time
	Latency time.Duration
	// ID is the x-ms-request-id the server answered; ClientRequestID the client's
	// x-ms-client-request-id, if it sent one.
	ID, ClientRequestID string
	// Account is the account addressed ("" if the address was not understood).
	Account string
	// Operation is the Storage Analytics name of the operation ("InsertEntity",
	// "QueryEntities", …; "Unknown" if it could not be told).
	Operation string
	// Table is the table addressed, if any (a $batch's: the one its operations address).
	Table string
	// PartitionKey is the partition of a single-entity operation or of a $batch; "" for
	// the others.
	PartitionKey string
	// QueryPartition is, for QueryEntities, the PartitionKey every entity of the page
	// answered shares, if it returned any and they all share one ("" otherwise): the
	// partition a query confined to one read.
	QueryPartition string
	// Status is the HTTP status answered; ErrorCode the x-ms-error-code, if any.
	Status    int
	ErrorCode string
	// BytesIn and BytesOut are the request and response bodies' sizes.
	BytesIn, BytesOut int64
	// RemoteAddr is the client's address (host:port).
	RemoteAddr string
	// AuthScheme is how the request authenticated, or tried to: "SharedKey",
	// "SharedKeyLite", "SAS", "Bearer", or "" for none (CORS preflight, or no credentials).
	AuthScheme string
	// Principal names who a verified bearer token is (identity.Principal.Name: its object
	// id, and the application it acted through), "" for other credentials. Never the
	// token.
	Principal string
	// EntitiesRead is how many entities the answer returned; EntitiesWritten how many
	// the request wrote (a $batch's or a bulk request's committed operations).
	EntitiesRead, EntitiesWritten int
	// BatchSize is the number of operations in a $batch or bulk request (0 otherwise).
	BatchSize int
	// EntitiesScanned is how many stored entities a query examined to answer
	// (EntitiesRead or more: more when its filter does not use keys).
	EntitiesScanned int
	// PageCut is whether the 5 s page budget ended a query page early.
	PageCut bool
	// Plan is, for QueryEntities, how its page was read (x-cerulean-plan: "keys",
	// "keys: 3 ranges", "index ByEmail: 1 point", …), "" for the others.
	Plan string
	// AuthFailure is why authentication or authorization refused the request, one of a
	// small fixed set ("signature", "date", "no_credentials", …; see the server's
	// authFailureReason), or "" if it was not refused for that.
	AuthFailure string
	// Throttled is which scale target refused the request ("partition" or "account",
	// see package throttle), or "".
	Throttled string
	// Fault is the fault injected into the request (a faults.Kind name: "503", "500",
	// "timeout", "reset-before", "reset-after", "cut"; "latency" when only latency was
	// added), or "". A request whose connection was reset has Status 0: it got no answer.
	Fault string
}

// Observer receives every answered request. Observe is called once per request, on the
// request's goroutine, after the answer is sent: it must be cheap and safe for concurrent
// use, and must not keep r (copy what it needs).
type Observer interface {
	Observe(r *Request)
}

// Observers is several Observers as one, called in order.
type Observers []Observer

// Observe calls each observer.
func (os Observers) Observe(r *Request) {
	for _, o := range os {
		o.Observe(r)
	}
}
