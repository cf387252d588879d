package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/server"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

// TestMain serves a real Cerulean (in process, Pebble on disk) for the examples, which
// are written against the development endpoint a local `cerulean` serves
// (client.DevEndpoint, 127.0.0.1:10002): http.DefaultClient — what client.New uses —
// dials that address to this server instead, so the examples read as users write them
// and still run whatever listens on port 10002 of the test machine.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cerulean-client-example")
	if err != nil {
		log.Fatal(err)
	}
	eng, err := pebble.Open(dir, pebble.Options{})
	if err != nil {
		log.Fatal(err)
	}
	srv, err := server.New(server.Options{Engine: eng, Accounts: []auth.Account{auth.DevAccount()}})
	if err != nil {
		log.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	var d net.Dialer
	http.DefaultClient.Transport = &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == "127.0.0.1:10002" {
				addr = hs.Listener.Addr().String()
			}
			return d.DialContext(ctx, network, addr)
		},
	}
	code := m.Run()
	hs.Close()
	eng.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

// An elastic table whose entities expire an hour after their last write unless they
// say otherwise (in their TTLInSeconds property).
func ExampleClient_CreateTable() {
	ctx := context.Background()
	c, err := client.New(client.DevEndpoint, client.DevAccount, client.DevKey)
	if err != nil {
		log.Fatal(err)
	}
	err = c.CreateTable(ctx, "sessions", &client.TableSettings{Elastic: true, DefaultTimeToLive: 3600})
	if err != nil {
		log.Fatal(err)
	}
	t, err := c.GetTableSettings(ctx, "sessions")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.Name, t.Elastic, t.DefaultTimeToLive, t.TimeToLiveProperty)

	// Creating it again is an *Error with Azure's code.
	err = c.CreateTable(ctx, "sessions", &client.TableSettings{Elastic: true})
	if e, ok := err.(*client.Error); ok {
		fmt.Println(e.Status, e.Code)
	}
	// Output:
	// sessions true 3600 TTLInSeconds
	// 409 TableAlreadyExists
}

// A bulk request writes entities of any partitions of an elastic table in one round
// trip; each operation succeeds or fails on its own.
func ExampleClient_Bulk() {
	ctx := context.Background()
	c, err := client.New(client.DevEndpoint, client.DevAccount, client.DevKey)
	if err != nil {
		log.Fatal(err)
	}
	if err := c.CreateTable(ctx, "readings", &client.TableSettings{Elastic: true}); err != nil {
		log.Fatal(err)
	}
	entity := func(pk, rk string, celsius float64) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"PartitionKey": pk, "RowKey": rk, "Celsius": celsius})
		return b
	}
	resp, err := c.Bulk(ctx, "readings", []client.BulkOp{
		{Op: client.BulkInsert, Entity: entity("sensor-1", "0001", 21.5)},
		{Op: client.BulkInsert, Entity: entity("sensor-2", "0001", 19)},
		{Op: client.BulkInsert, Entity: entity("sensor-1", "0001", 22)}, // the same keys twice in one request
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("succeeded", resp.Succeeded, "failed", resp.Failed)
	for _, r := range resp.Results {
		if r.Error != nil {
			fmt.Println(r.Index, r.Status, r.Error.Code)
		} else {
			fmt.Println(r.Index, r.Status)
		}
	}
	// Output:
	// succeeded 2 failed 1
	// 0 201
	// 1 201
	// 2 400 InvalidDuplicateRow
}

// QueryEntities reads a table a page at a time, each entity as OData JSON with every
// property's type; a page's Next is where the next one starts.
func ExampleClient_QueryEntities() {
	ctx := context.Background()
	c, err := client.New(client.DevEndpoint, client.DevAccount, client.DevKey)
	if err != nil {
		log.Fatal(err)
	}
	if err := c.CreateTable(ctx, "orders", nil); err != nil {
		log.Fatal(err)
	}
	var ents []client.BatchEntity
	for i := range 5 {
		rk := fmt.Sprintf("order-%d", i)
		b, _ := json.Marshal(map[string]any{"PartitionKey": "customer-42", "RowKey": rk, "Total": i * 10})
		ents = append(ents, client.BatchEntity{PartitionKey: "customer-42", RowKey: rk, Body: b})
	}
	// One partition's entities in one $batch: all written or none.
	if err := c.Batch(ctx, "orders", client.Insert, ents); err != nil {
		log.Fatal(err)
	}
	q := client.Query{Filter: "Total ge 20", Select: "RowKey,Total", Top: 2}
	for {
		page, err := c.QueryEntities(ctx, "orders", q)
		if err != nil {
			log.Fatal(err)
		}
		for _, raw := range page.Entities {
			var e struct {
				RowKey string
				Total  int
			}
			if err := json.Unmarshal(raw, &e); err != nil {
				log.Fatal(err)
			}
			fmt.Println(e.RowKey, e.Total)
		}
		if page.Next.Done() {
			break
		}
		q.Continuation = page.Next
	}
	// Output:
	// order-2 20
	// order-3 30
	// order-4 40
}

// Open takes what a user types: a connection string or a SAS URL.
func ExampleOpen() {
	t, err := client.Open("UseDevelopmentStorage=true")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.Endpoint, t.Account)
	t, err = client.Open("https://myaccount.table.core.windows.net/orders?sv=2019-02-02&tn=orders&sp=r&se=2030-01-01&sig=c2lnbmF0dXJl")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.Endpoint, t.Account, t.Table)
	// Output:
	// http://127.0.0.1:10002/devstoreaccount1 devstoreaccount1
	// https://myaccount.table.core.windows.net myaccount orders
}
