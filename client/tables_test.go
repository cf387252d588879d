package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/server"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
	"github.com/ceruleandb/cerulean/internal/table"
)

func newClient(t *testing.T, rules string) *client.Client {
	t.Helper()
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	r, err := table.ParseElasticRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Engine: eng, Accounts: []auth.Account{auth.DevAccount()}, ElasticTables: r})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	c, err := client.New(hs.URL+"/"+auth.DevAccountName, auth.DevAccountName, auth.DevAccountKey)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTableSettings(t *testing.T) {
	c := newClient(t, "auto*:45")
	ctx := context.Background()
	if err := c.CreateTable(ctx, "autoA", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTable(ctx, "autoB", &client.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTable(ctx, "Events", &client.TableSettings{Elastic: true, DefaultTimeToLive: -1, TimeToLiveProperty: "Exp"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]client.TableSettings{
		"autoA":  {Elastic: true, DefaultTimeToLive: 45, TimeToLiveProperty: "TTLInSeconds"},
		"autoB":  {},
		"Events": {Elastic: true, DefaultTimeToLive: -1, TimeToLiveProperty: "Exp"},
	}
	for name, w := range want {
		got, err := c.GetTableSettings(ctx, name)
		if err != nil || got.Name != name || !reflect.DeepEqual(got.TableSettings, w) {
			t.Errorf("GetTableSettings(%s) = %+v, %v; want %+v", name, got, err, w)
		}
	}
	if err := c.SetTableSettings(ctx, "autoB", client.TableSettings{Elastic: true, DefaultTimeToLive: 7}); err != nil {
		t.Fatal(err)
	}
	want["autoB"] = client.TableSettings{Elastic: true, DefaultTimeToLive: 7, TimeToLiveProperty: "TTLInSeconds"}
	list, err := c.ListTables(ctx, true)
	if err != nil || len(list) != 3 {
		t.Fatalf("ListTables = %+v, %v", list, err)
	}
	for _, tb := range list {
		if !reflect.DeepEqual(tb.TableSettings, want[tb.Name]) {
			t.Errorf("ListTables: %+v; want %+v", tb, want[tb.Name])
		}
	}
	if list, err := c.ListTables(ctx, false); err != nil || len(list) != 3 || !reflect.DeepEqual(list[2], client.Table{Name: "Events"}) {
		t.Errorf("ListTables without settings = %+v, %v", list, err)
	}

	// Errors carry the status, the code and the message on one line.
	err = c.SetTableSettings(ctx, "autoB", client.TableSettings{DefaultTimeToLive: 7})
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 400 || e.Code != "InvalidInput" ||
		err.Error() != "400 InvalidInput: Time-to-live is available on elastic tables only." {
		t.Errorf("SetTableSettings(invalid) = %v", err)
	}
	_, err = c.GetTableSettings(ctx, "nosuch")
	if !errors.As(err, &e) || e.Status != 404 || e.Code != "TableNotFound" {
		t.Errorf("GetTableSettings(nosuch) = %v", err)
	}
	err = c.CreateTable(ctx, "autoA", nil)
	if !errors.As(err, &e) || e.Status != 409 || e.Code != "TableAlreadyExists" {
		t.Errorf("CreateTable(existing) = %v", err)
	}
}

// ListTables follows continuations.
func TestListTablesPages(t *testing.T) {
	c := newClient(t, "")
	ctx := context.Background()
	const n = 1003
	for i := range n {
		if err := c.CreateTable(ctx, fmt.Sprintf("t%04d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	list, err := c.ListTables(ctx, false)
	if err != nil || len(list) != n || list[n-1].Name != fmt.Sprintf("t%04d", n-1) {
		t.Fatalf("ListTables: %d tables, %v", len(list), err)
	}
}

// Index declarations come back with the server's state, from GetTableSettings and from
// ListTables with settings; a settings answer sent back unchanged (states included) keeps
// them.
func TestTableIndexes(t *testing.T) {
	c := newClient(t, "")
	ctx := context.Background()
	decl := []client.Index{{Name: "ByEmail", Properties: []string{"Email"}, Unique: true}, {Name: "ByCD", Properties: []string{"Customer", "Date"}}}
	if err := c.CreateTable(ctx, "Orders", &client.TableSettings{Elastic: true, Indexes: decl}); err != nil {
		t.Fatal(err)
	}
	want := []client.Index{
		{Name: "ByEmail", Properties: []string{"Email"}, Unique: true, State: "ready"},
		{Name: "ByCD", Properties: []string{"Customer", "Date"}, State: "ready"},
	}
	got, err := c.GetTableSettings(ctx, "Orders")
	if err != nil || !reflect.DeepEqual(got.Indexes, want) {
		t.Fatalf("GetTableSettings = %+v, %v; want indexes %+v", got, err, want)
	}
	if err := c.SetTableSettings(ctx, "Orders", got.TableSettings); err != nil {
		t.Fatalf("SetTableSettings(what was read) = %v", err)
	}
	list, err := c.ListTables(ctx, true)
	if err != nil || len(list) != 1 || !reflect.DeepEqual(list[0].Indexes, want) {
		t.Fatalf("ListTables(with settings) = %+v, %v; want indexes %+v", list, err, want)
	}
	if list, err := c.ListTables(ctx, false); err != nil || len(list) != 1 || list[0].Indexes != nil {
		t.Errorf("ListTables without settings = %+v, %v", list, err)
	}
}
