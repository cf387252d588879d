// Package client is a small Go client of a Cerulean (or Azure Table) endpoint for the
// calls the official SDKs do not make: Cerulean's extensions — table settings for
// elastic tables (time-to-live), bulk writes, an entity's exact expiry — and what the
// data tools need (raw pages at full metadata, batches, connection strings and SAS URLs).
//
// It is the one public package of the module: everything else is the server's inside,
// under internal/. For ordinary table work (create, insert, query, $batch) use the
// official SDK, github.com/Azure/azure-sdk-for-go/sdk/data/aztables, beside it: both
// talk to the same endpoint with the same account key.
//
// A Client signs every request with SharedKeyLite, as the Go SDK does, or carries a
// shared access signature (Open with a SAS URL or a connection string holding one). It
// is safe for concurrent use. Errors the service answers are *Error values with the
// HTTP status and Azure's error code:
//
//	c, err := client.New(client.DevEndpoint, client.DevAccount, client.DevKey)
//	if err != nil {
//		log.Fatal(err)
//	}
//	err = c.CreateTable(ctx, "events", &client.TableSettings{Elastic: true, DefaultTimeToLive: 3600})
//	var e *client.Error
//	if errors.As(err, &e) && e.Code == "TableAlreadyExists" {
//		// created before
//	}
//
// The wire format of the extensions is in docs/protocol.md and docs/compatibility.md;
// their use, with examples in Go, JavaScript and Python, in docs/elastic-tables.md and
// docs/bulk.md.
package client
