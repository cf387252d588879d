package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
)

func TestAddressing(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name
	c, table := newTable(t, svc)
	if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "V": "path"}), nil); err != nil {
		t.Fatal(err)
	}

	tableNamesIn := func(t *testing.T, r rawResp) []string {
		t.Helper()
		var body struct {
			Value []struct{ TableName string } `json:"value"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatalf("query tables body: %v: %s", err, truncate(r.Body))
		}
		var names []string
		for _, v := range body.Value {
			names = append(names, v.TableName)
		}
		return names
	}

	t.Run("HostStyleRaw", func(t *testing.T) {
		for _, host := range []string{acct + ".table.localhost", fmt.Sprintf("%s.table.localhost:%d", acct, srv.Port)} {
			r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/Tables", Host: host})
			requireStatus(t, r, http.StatusOK, "host-style query tables, Host "+host)
			if names := tableNamesIn(t, r); !contains(names, table) {
				t.Errorf("Host %s: tables %v do not include %s", host, names, table)
			}
			r = srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + table + "(PartitionKey='p',RowKey='r')", Host: host})
			requireStatus(t, r, http.StatusOK, "host-style get entity, Host "+host)
			if v := rawObject(t, r.Body)["V"]; string(v) != `"path"` {
				t.Errorf("host-style get entity: V = %s", v)
			}
		}
		// A write through host style is visible path style.
		host := acct + ".table.localhost"
		r := srv.do(t, rawReq{Method: http.MethodPost, Path: "/" + table, Host: host,
			Body: []byte(`{"PartitionKey":"p","RowKey":"host","V":"host"}`)})
		requireStatus(t, r, http.StatusCreated, "host-style insert")
		e, _ := getEDM(t, c, "p", "host")
		if e.Properties["V"] != "host" {
			t.Errorf("host-style insert read path-style: %v", e.Properties)
		}
		// Host-style signature must cover the host-style path: signing the path-style
		// resource for a host-style request is refused.
		r = srv.do(t, rawReq{Method: http.MethodGet, Path: "/Tables", Host: host, SignPath: "/" + acct + "/" + acct + "/Tables"})
		requireRawErr(t, r, http.StatusForbidden, "AuthenticationFailed")
	})

	t.Run("HostStyleSDK", func(t *testing.T) {
		endpoint := fmt.Sprintf("%s://%s.table.localhost:%d", srv.scheme, acct, srv.Port)
		hs := newServiceClientFor(t, endpoint, acct, srv.Default().Key, fixedDialer(srv))
		if names := listTableNames(t, hs); !contains(names, table) {
			t.Errorf("host-style SDK list: %v lacks %s", names, table)
		}
		hc := hs.NewClient(table)
		if _, err := hc.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "sdkhost"}), nil); err != nil {
			t.Fatalf("host-style SDK AddEntity: %v", err)
		}
		e, _ := getEDM(t, hc, "p", "r")
		if e.Properties["V"] != "path" {
			t.Errorf("host-style SDK GetEntity: %v", e.Properties)
		}
		if _, err := c.GetEntity(ctx(t), "p", "sdkhost", nil); err != nil {
			t.Errorf("entity inserted host-style not visible path-style: %v", err)
		}
	})

	t.Run("LocalhostIsPathStyle", func(t *testing.T) {
		// A host name without dots means path style (docs/protocol.md §1.1).
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/Tables", Host: fmt.Sprintf("localhost:%d", srv.Port)})
		requireStatus(t, r, http.StatusOK, "path-style with Host localhost")
		if names := tableNamesIn(t, r); !contains(names, table) {
			t.Errorf("tables %v lack %s", names, table)
		}
	})

	t.Run("SecondaryPathStyle", func(t *testing.T) {
		// The Go SDK pointed at the secondary endpoint signs with the primary account name.
		sec := newServiceClientFor(t, srv.Endpoint(acct+"-secondary"), acct, srv.Default().Key, nil)
		if names := listTableNames(t, sec); !contains(names, table) {
			t.Errorf("secondary list: %v lacks %s", names, table)
		}
		e, _ := getEDM(t, sec.NewClient(table), "p", "r")
		if e.Properties["V"] != "path" {
			t.Errorf("secondary GetEntity: %v", e.Properties)
		}
		if got := listAll(t, sec.NewClient(table), nil); len(got) < 2 {
			t.Errorf("secondary query: %d entities", len(got))
		}
	})

	t.Run("SecondaryHostStyle", func(t *testing.T) {
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/Tables", Host: acct + "-secondary.table.localhost"})
		requireStatus(t, r, http.StatusOK, "host-style secondary query tables")
		if names := tableNamesIn(t, r); !contains(names, table) {
			t.Errorf("tables %v lack %s", names, table)
		}
	})
}
