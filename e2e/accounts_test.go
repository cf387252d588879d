package e2e

import (
	"net/http"
	"testing"
)

func TestAccounts(t *testing.T) {
	a := account{Name: "alpha" + runID, Key: randomKey(t)}
	b := account{Name: "beta" + runID, Key: randomKey(t)}
	srv := startServer(t, withAccounts(a, b))
	svcA := newServiceClientFor(t, srv.Endpoint(a.Name), a.Name, a.Key, nil)
	svcB := newServiceClientFor(t, srv.Endpoint(b.Name), b.Name, b.Key, nil)

	shared := tableName(t)
	onlyA := tableName(t)

	t.Run("SameTableNameIndependent", func(t *testing.T) {
		if _, err := svcA.CreateTable(ctx(t), shared, nil); err != nil {
			t.Fatalf("A CreateTable: %v", err)
		}
		if _, err := svcB.CreateTable(ctx(t), shared, nil); err != nil {
			t.Fatalf("B CreateTable of the same name: %v", err)
		}
		if _, err := svcA.CreateTable(ctx(t), onlyA, nil); err != nil {
			t.Fatalf("A CreateTable: %v", err)
		}
		ca, cb := svcA.NewClient(shared), svcB.NewClient(shared)
		if _, err := ca.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "Owner": "A"}), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := cb.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "Owner": "B"}), nil); err != nil {
			t.Fatalf("B AddEntity with the same keys: %v", err)
		}
		if _, err := ca.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "onlyA"}), nil); err != nil {
			t.Fatal(err)
		}
		ea, _ := getEDM(t, ca, "p", "r")
		eb, _ := getEDM(t, cb, "p", "r")
		if ea.Properties["Owner"] != "A" || eb.Properties["Owner"] != "B" {
			t.Errorf("entities mixed between accounts: A sees %v, B sees %v", ea.Properties, eb.Properties)
		}
		_, err := cb.GetEntity(ctx(t), "p", "onlyA", nil)
		requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
		if n := len(listAll(t, cb, nil)); n != 1 {
			t.Errorf("B's table lists %d entities, want 1", n)
		}
		if n := len(listAll(t, ca, nil)); n != 2 {
			t.Errorf("A's table lists %d entities, want 2", n)
		}
	})

	t.Run("ListShowsOnlyOwnTables", func(t *testing.T) {
		na, nb := listTableNames(t, svcA), listTableNames(t, svcB)
		if !contains(na, shared) || !contains(na, onlyA) {
			t.Errorf("A lists %v, want %s and %s", na, shared, onlyA)
		}
		if !contains(nb, shared) {
			t.Errorf("B lists %v, want %s", nb, shared)
		}
		if contains(nb, onlyA) {
			t.Errorf("B lists A's table %s", onlyA)
		}
		_, err := svcB.NewClient(onlyA).GetEntity(ctx(t), "p", "r", nil)
		requireRespErr(t, err, http.StatusNotFound, "TableNotFound")
	})

	t.Run("DeleteInOneAccountOnly", func(t *testing.T) {
		name := tableName(t)
		if _, err := svcA.CreateTable(ctx(t), name, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := svcB.CreateTable(ctx(t), name, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := svcA.DeleteTable(ctx(t), name, nil); err != nil {
			t.Fatal(err)
		}
		if !contains(listTableNames(t, svcB), name) {
			t.Errorf("deleting A's table removed B's")
		}
		_, err := svcA.DeleteTable(ctx(t), name, nil)
		requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
	})

	t.Run("KeyOfAnotherAccountRefused", func(t *testing.T) {
		// B's URL and name, signed with A's key.
		wrongKey := newServiceClientFor(t, srv.Endpoint(b.Name), b.Name, a.Key, nil)
		_, err := wrongKey.NewClient(shared).GetEntity(ctx(t), "p", "r", nil)
		requireRespErr(t, err, http.StatusForbidden, "AuthenticationFailed")
		_, err = wrongKey.NewListTablesPager(nil).NextPage(ctx(t))
		requireRespErr(t, err, http.StatusForbidden, "AuthenticationFailed")
		// B's URL, signed as account A with A's key: the signature names another account.
		asA := newServiceClientFor(t, srv.Endpoint(b.Name), a.Name, a.Key, nil)
		_, err = asA.NewClient(shared).GetEntity(ctx(t), "p", "r", nil)
		if code := statusOf(err); code != http.StatusForbidden {
			t.Errorf("B's URL signed as A: status %d (err %v), want 403", code, err)
		}
		_, err = asA.CreateTable(ctx(t), tableName(t), nil)
		if code := statusOf(err); code != http.StatusForbidden {
			t.Errorf("B's URL signed as A, create table: status %d, want 403", code)
		}
		// and B's data is unchanged
		eb, _ := getEDM(t, svcB.NewClient(shared), "p", "r")
		if eb.Properties["Owner"] != "B" {
			t.Errorf("B's entity changed: %v", eb.Properties)
		}
	})

	t.Run("UnknownAccount", func(t *testing.T) {
		other := "gamma" + runID
		svc := newServiceClientFor(t, srv.Endpoint(other), other, randomKey(t), nil)
		_, err := svc.NewListTablesPager(nil).NextPage(ctx(t))
		if code := statusOf(err); code < 400 || code >= 500 {
			t.Errorf("unknown account: status %d (err %v), want 4xx", code, err)
		}
	})
}
