package e2e

// Unique indexes through the Go SDK (issue 46): a write giving a second entity a unique
// index's value answers 409 UniqueIndexViolation naming the index and the entity holding
// it, whatever the write; a $batch holding one fails whole; a bulk request fails that
// operation alone.

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/ceruleandb/cerulean/client"
)

func TestUniqueIndexSDK(t *testing.T) {
	srv := startServer(t)
	cc := bulkClient(t, srv)
	table := tableName(t)
	err := cc.CreateTable(ctx(t), table, &client.TableSettings{Elastic: true, Indexes: []client.Index{
		{Name: "ByEmail", Properties: []string{"Email"}, Unique: true},
		{Name: "ByRegionNo", Properties: []string{"Region", "No"}, Unique: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	c, rec := egtClient(t, srv, table)
	ent := func(pk, rk string, props ...any) []byte {
		m := map[string]any{"PartitionKey": pk, "RowKey": rk}
		for i := 0; i < len(props); i += 2 {
			m[props[i].(string)] = props[i+1]
		}
		return marshal(t, m)
	}
	add := func(e []byte) error {
		_, err := c.AddEntity(ctx(t), e, nil)
		return err
	}
	// refused checks a single write's answer: 409 UniqueIndexViolation, the message
	// naming the index and the holder.
	refused := func(what string, err error, index, holderPK, holderRK string) {
		t.Helper()
		var re *azcore.ResponseError
		if !errors.As(err, &re) || re.StatusCode != http.StatusConflict || re.ErrorCode != "UniqueIndexViolation" {
			t.Errorf("%s: %v; want 409 UniqueIndexViolation", what, err)
			return
		}
		want := "unique index '" + index + "' that the entity with PartitionKey '" + holderPK + "' and RowKey '" + holderRK + "' holds"
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: message %q; want it to say %q", what, err.Error(), want)
		}
	}
	absent := func(pk, rk string) {
		t.Helper()
		if _, err := c.GetEntity(ctx(t), pk, rk, nil); err == nil {
			t.Errorf("(%s, %s) was written", pk, rk)
		}
	}

	if err := add(ent("eu", "c1", "Email", "ann@x", "Region", "eu", "No", 1)); err != nil {
		t.Fatal(err)
	}
	// Every kind of write, in another partition or the same one.
	refused("insert", add(ent("us", "c2", "Email", "ann@x")), "ByEmail", "eu", "c1")
	absent("us", "c2")
	_, err = c.UpsertEntity(ctx(t), ent("eu", "c2", "Email", "ann@x"), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
	refused("upsert", err, "ByEmail", "eu", "c1")
	if err := add(ent("eu", "c3", "Email", "cy@x")); err != nil {
		t.Fatal(err)
	}
	_, err = c.UpdateEntity(ctx(t), ent("eu", "c3", "Email", "ann@x"), &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge})
	refused("merge", err, "ByEmail", "eu", "c1")
	// Compound: both values equal is a conflict, one of them is not; numbers compare by
	// value across EDM types (1 as Int32 and 1.0 as Double are one value).
	refused("compound", add(ent("us", "c4", "Region", "eu", "No", 1.0, "No@odata.type", "Edm.Double")), "ByRegionNo", "eu", "c1")
	if err := add(ent("us", "c4", "Region", "eu", "No", 2)); err != nil {
		t.Errorf("a compound value differing in one property: %v", err)
	}
	// Int64s beyond 2^53 are told apart exactly, though a Double cannot hold them (nor
	// can an index key): 2^53 + 1 is free while 2^53 is held, and then held itself.
	big := func(pk, rk, n string) []byte { return ent(pk, rk, "Email", n, "Email@odata.type", "Edm.Int64") }
	if err := add(big("eu", "i1", "9007199254740992")); err != nil {
		t.Fatal(err)
	}
	if err := add(big("eu", "i2", "9007199254740993")); err != nil {
		t.Errorf("an Int64 one above a held one, both beyond 2^53: %v", err)
	}
	refused("Int64 beyond 2^53", add(big("us", "i3", "9007199254740993")), "ByEmail", "eu", "i2")
	refused("a Double equal to a held Int64", add(ent("us", "i3", "Email", 9007199254740992.0, "Email@odata.type", "Edm.Double")),
		"ByEmail", "eu", "i1")
	// The holder may write its own value again; entities without the property are not in
	// the index.
	if _, err := c.UpdateEntity(ctx(t), ent("eu", "c1", "Email", "ann@x", "Note", "again"), nil); err != nil {
		t.Errorf("the holder writing its value again: %v", err)
	}
	for _, rk := range []string{"n1", "n2"} {
		if err := add(ent("eu", rk)); err != nil {
			t.Errorf("an entity without the indexed properties: %v", err)
		}
	}

	// A batch: the duplicate's operation fails the change set; nothing is written.
	_, err = c.SubmitTransaction(ctx(t), []aztables.TransactionAction{
		{ActionType: aztables.TransactionTypeAdd, Entity: ent("eu", "b1", "Email", "new@x")},
		{ActionType: aztables.TransactionTypeAdd, Entity: ent("eu", "b2", "Email", "ann@x")},
	}, nil)
	egtRequireFailure(t, err, rec, http.StatusConflict, "UniqueIndexViolation", 1)
	absent("eu", "b1")
	// Two operations of one batch taking one new value: the second fails it.
	_, err = c.SubmitTransaction(ctx(t), []aztables.TransactionAction{
		{ActionType: aztables.TransactionTypeAdd, Entity: ent("eu", "b3", "Email", "twice@x")},
		{ActionType: aztables.TransactionTypeAdd, Entity: ent("eu", "b4", "Email", "twice@x")},
	}, nil)
	egtRequireFailure(t, err, rec, http.StatusConflict, "UniqueIndexViolation", 1)
	absent("eu", "b3")

	// A bulk request: that operation alone fails.
	res, err := cc.Bulk(ctx(t), table, []client.BulkOp{
		{Op: client.BulkInsert, Entity: ent("p1", "k1", "Email", "k1@x")},
		{Op: client.BulkInsert, Entity: ent("p2", "k2", "Email", "ann@x")},
		{Op: client.BulkInsert, Entity: ent("p2", "k3", "Email", "k3@x")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Succeeded != 2 || res.Failed != 1 || res.Results[1].Status != http.StatusConflict || res.Results[1].Error == nil ||
		res.Results[1].Error.Code != "UniqueIndexViolation" || !strings.Contains(res.Results[1].Error.Message, "'ByEmail'") {
		t.Errorf("bulk: %+v", res)
	}

	// Deleting the holder frees the value.
	if _, err := c.DeleteEntity(ctx(t), "eu", "c1", nil); err != nil {
		t.Fatal(err)
	}
	if err := add(ent("us", "c2", "Email", "ann@x")); err != nil {
		t.Errorf("the value after its holder was deleted: %v", err)
	}
}
