package e2e

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// specialKeys are legal key values that stress URL escaping and OData literal parsing.
// Characters in U+E000–U+FFFF are avoided so UTF-8 byte order and UTF-16 code-unit order agree.
var specialKeys = []string{
	"plain",
	"a'b",
	"''",
	"'",
	"it's 'quoted'",
	"with space",
	" lead",
	"trail ",
	"100%",
	"%41",
	"%2F",
	"a+b",
	"+",
	"ключ",
	"emoji😀",
	"日本語",
	"a,b",
	"x',RowKey='y",
	"PartitionKey='z'",
	"(paren)",
	"&=;:@!$*",
	"~-._",
	"é\u0301", // combining mark: no normalisation may happen
	"\"dq\"",
}

func TestKeys(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name

	t.Run("CRUDWithSpecialKeys", func(t *testing.T) {
		c, _ := newTable(t, svc)
		for _, k := range specialKeys {
			for _, pair := range [][2]string{{"p", k}, {k, "r"}} {
				pk, rk := pair[0], pair[1]
				ent := map[string]any{"PartitionKey": pk, "RowKey": rk, "V": 1}
				add, err := c.AddEntity(ctx(t), marshal(t, ent), nil)
				if err != nil {
					t.Errorf("AddEntity(%q,%q): %v", pk, rk, err)
					continue
				}
				if e := decodeEDM(t, add.Value); e.PartitionKey != pk || e.RowKey != rk {
					t.Errorf("AddEntity(%q,%q) returned keys (%q,%q)", pk, rk, e.PartitionKey, e.RowKey)
				}
				e, _ := getEDM(t, c, pk, rk)
				if e.PartitionKey != pk || e.RowKey != rk || e.Properties["V"] != int32(1) {
					t.Errorf("GetEntity(%q,%q) = (%q,%q) %v", pk, rk, e.PartitionKey, e.RowKey, e.Properties)
				}
				ent["V"] = 2
				if _, err := c.UpdateEntity(ctx(t), marshal(t, ent), &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeReplace, IfMatch: &add.ETag}); err != nil {
					t.Errorf("UpdateEntity(%q,%q): %v", pk, rk, err)
				}
				ent["W"] = "w"
				if _, err := c.UpsertEntity(ctx(t), marshal(t, ent), nil); err != nil {
					t.Errorf("UpsertEntity(%q,%q): %v", pk, rk, err)
				}
				e, _ = getEDM(t, c, pk, rk)
				if e.Properties["V"] != int32(2) || e.Properties["W"] != "w" {
					t.Errorf("after update+upsert (%q,%q): %v", pk, rk, e.Properties)
				}
			}
		}
		// Everything is there, exactly once, in (PartitionKey, RowKey) order.
		var want [][2]string
		for _, k := range specialKeys {
			want = append(want, [2]string{"p", k}, [2]string{k, "r"})
		}
		sort.Slice(want, func(i, j int) bool {
			if want[i][0] != want[j][0] {
				return want[i][0] < want[j][0]
			}
			return want[i][1] < want[j][1]
		})
		all := listAll(t, c, nil)
		if len(all) != len(want) {
			t.Errorf("table holds %d entities, want %d", len(all), len(want))
		}
		for i := 0; i < len(all) && i < len(want); i++ {
			e := decodeEDM(t, all[i])
			if e.PartitionKey != want[i][0] || e.RowKey != want[i][1] {
				t.Errorf("entity %d = (%q,%q), want (%q,%q)", i, e.PartitionKey, e.RowKey, want[i][0], want[i][1])
			}
		}
		// Delete each one; afterwards the table is empty.
		for _, w := range want {
			if _, err := c.DeleteEntity(ctx(t), w[0], w[1], nil); err != nil {
				t.Errorf("DeleteEntity(%q,%q): %v", w[0], w[1], err)
			}
			_, err := c.GetEntity(ctx(t), w[0], w[1], nil)
			if statusOf(err) != http.StatusNotFound {
				t.Errorf("GetEntity(%q,%q) after delete: %v", w[0], w[1], err)
			}
		}
		if n := len(listAll(t, c, nil)); n != 0 {
			t.Errorf("%d entities left after deleting all", n)
		}
	})

	t.Run("FilterOnSpecialKeys", func(t *testing.T) {
		c, _ := newTable(t, svc)
		for _, k := range specialKeys {
			for _, pair := range [][2]string{{"p", k}, {k, "r"}} {
				if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": pair[0], "RowKey": pair[1]}), nil); err != nil {
					t.Fatalf("AddEntity(%q,%q): %v", pair[0], pair[1], err)
				}
			}
		}
		lit := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
		for _, k := range specialKeys {
			for _, pair := range [][2]string{{"p", k}, {k, "r"}} {
				pk, rk := pair[0], pair[1]
				filter := "PartitionKey eq " + lit(pk) + " and RowKey eq " + lit(rk)
				got, err := listAllErr(t, c, &aztables.ListEntitiesOptions{Filter: &filter})
				if err != nil {
					t.Fatalf("query %s: %v", filter, err)
				}
				if len(got) != 1 {
					t.Errorf("query %s: %d entities", filter, len(got))
				} else if e := decodeEDM(t, got[0]); e.PartitionKey != pk || e.RowKey != rk {
					t.Errorf("query %s: (%q,%q)", filter, e.PartitionKey, e.RowKey)
				}
			}
			// PartitionKey alone: the special key's own partition holds exactly one entity.
			filter := "PartitionKey eq " + lit(k)
			got, err := listAllErr(t, c, &aztables.ListEntitiesOptions{Filter: &filter})
			if err != nil {
				t.Fatalf("query %s: %v", filter, err)
			}
			if len(got) != 1 {
				t.Errorf("query %s: %d entities, want 1", filter, len(got))
			}
		}
		filter := "RowKey eq ''"
		got, err := listAllErr(t, c, &aztables.ListEntitiesOptions{Filter: &filter})
		if err != nil {
			t.Fatalf("query %s: %v", filter, err)
		}
		if len(got) != 0 {
			t.Errorf("query %s: %d entities, want 0", filter, len(got))
		}
	})

	t.Run("EmptyRowKey", func(t *testing.T) {
		c, table := newTable(t, svc)
		add, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "", "V": 1}), nil)
		if err != nil {
			t.Fatalf("AddEntity with empty RowKey: %v", err)
		}
		if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "a", "V": 2}), nil); err != nil {
			t.Fatal(err)
		}
		e, _ := getEDM(t, c, "p", "")
		if e.RowKey != "" || e.Properties["V"] != int32(1) {
			t.Errorf("GetEntity(p, \"\") = %q %v", e.RowKey, e.Properties)
		}
		if _, err := c.UpdateEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "", "V": 3}),
			&aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge, IfMatch: &add.ETag}); err != nil {
			t.Errorf("UpdateEntity with empty RowKey: %v", err)
		}
		all := listAll(t, c, nil)
		if len(all) != 2 {
			t.Fatalf("%d entities", len(all))
		}
		if e := decodeEDM(t, all[0]); e.RowKey != "" || e.Properties["V"] != int32(3) {
			t.Errorf("first entity should be the empty RowKey with V=3: %q %v", e.RowKey, e.Properties)
		}
		filter := "PartitionKey eq 'p'"
		if got := listAll(t, c, &aztables.ListEntitiesOptions{Filter: &filter}); len(got) != 2 {
			t.Errorf("filter %s: %d entities, want 2", filter, len(got))
		}
		// Paging across the empty RowKey: page size 1 must still visit both entities.
		top := int32(1)
		if got := listAll(t, c, &aztables.ListEntitiesOptions{Top: &top}); len(got) != 2 {
			t.Errorf("paging with $top=1: %d entities, want 2", len(got))
		}
		if _, err := c.DeleteEntity(ctx(t), "p", "", nil); err != nil {
			t.Errorf("DeleteEntity with empty RowKey: %v", err)
		}
		// Empty PartitionKey (the Go SDK refuses it client-side; raw request).
		r := srv.do(t, rawReq{Method: http.MethodPost, Path: "/" + acct + "/" + table,
			Body: []byte(`{"PartitionKey":"","RowKey":"","V":9}`)})
		requireStatus(t, r, http.StatusCreated, "insert with empty PartitionKey and RowKey")
		r = srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/" + table + "(PartitionKey='',RowKey='')"})
		requireStatus(t, r, http.StatusOK, "get with empty keys")
		if v := rawObject(t, r.Body)["V"]; string(v) != "9" {
			t.Errorf("empty-key entity V = %s", v)
		}
	})

	t.Run("EDMEntityQuoteDoubling", func(t *testing.T) {
		// aztables.EDMEntity doubles quotes in the body keys (an SDK bug): the server stores
		// what the body says and must not "repair" it (docs/protocol.md §1.3).
		c, _ := newTable(t, svc)
		ent := aztables.EDMEntity{Entity: aztables.Entity{PartitionKey: "a'b", RowKey: "r"}, Properties: map[string]any{"V": int32(1)}}
		if _, err := c.AddEntity(ctx(t), marshal(t, ent), nil); err != nil {
			t.Fatal(err)
		}
		e, _ := getEDM(t, c, "a''b", "r")
		if e.PartitionKey != "a''b" {
			t.Errorf("stored PartitionKey %q, want %q", e.PartitionKey, "a''b")
		}
		_, err := c.GetEntity(ctx(t), "a'b", "r", nil)
		requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
	})

	t.Run("RawKeyForms", func(t *testing.T) {
		// Other SDKs keep quotes and parentheses literal and may put a space after the comma or
		// swap the key order; the server must resolve all of them to the same entity.
		c, table := newTable(t, svc)
		if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "a'b c", "RowKey": "x+y", "V": 1}), nil); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{
			"(PartitionKey='a%27%27b%20c',RowKey='x%2By')",  // Go style
			"(PartitionKey='a''b%20c',RowKey='x+y')",        // literal quotes, literal '+'
			"(PartitionKey='a%27%27b%20c',%20RowKey='x+y')", // space after the comma
			"(RowKey='x+y',PartitionKey='a''b%20c')",        // swapped order
		} {
			r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/" + table + p})
			requireStatus(t, r, http.StatusOK, "GET "+p)
			var e struct{ PartitionKey, RowKey string }
			if err := json.Unmarshal(r.Body, &e); err != nil || e.PartitionKey != "a'b c" || e.RowKey != "x+y" {
				t.Errorf("GET %s: %s", p, r.Body)
			}
		}
		// '+' in a path is not a space.
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/" + table + "(PartitionKey='a''b+c',RowKey='x+y')"})
		requireRawErr(t, r, http.StatusNotFound, "ResourceNotFound")
	})
}
