package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// consoleGet GETs a console URL, signed with SharedKeyLite for devstoreaccount1 when key
// is not empty (over the canonicalized resource /<account><path>, as the API signs).
func consoleGet(t *testing.T, client *http.Client, base, path, key string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest("GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		date := time.Now().UTC().Format(http.TimeFormat)
		p, _, _ := strings.Cut(path, "?")
		req.Header.Set("x-ms-date", date)
		req.Header.Set("Authorization", "SharedKeyLite "+devAccount+":"+signLite(t, key, date+"\n/"+devAccount+p))
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestConsoleServing: the console is on by default at /-/ beside the API, with its URL in
// the start-up message; --console=false turns it off; --console-addr moves it to its own
// listener, which serves the table API too; the Watch endpoint answers only a signed
// request, as the API does.
func TestConsoleServing(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		srv := startServer(t)
		waitConsoleURL(t, srv, srv.BaseURL())
		c := http.DefaultClient
		status, h, body := consoleGet(t, c, srv.BaseURL(), "/-/", "")
		if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") || !strings.Contains(body, "app.js") ||
			!strings.Contains(h.Get("Content-Security-Policy"), "connect-src 'self'") {
			t.Fatalf("GET /-/: %d %v %s", status, h, body)
		}
		if status, _, _ := consoleGet(t, c, srv.BaseURL(), "/-/app.js", ""); status != 200 {
			t.Fatalf("GET /-/app.js: %d", status)
		}
		status, h, body = consoleGet(t, c, srv.BaseURL(), "/-/api/watch", "")
		if status != 401 || h.Get("x-ms-error-code") != "NoAuthenticationInformation" {
			t.Fatalf("unsigned watch: %d %s", status, body)
		}
		status, h, body = consoleGet(t, c, srv.BaseURL(), "/-/api/watch", randomKey(t))
		if status != 403 || h.Get("x-ms-error-code") != "AuthenticationFailed" {
			t.Fatalf("watch signed with a wrong key: %d %s", status, body)
		}
		// The API's own requests appear in Watch.
		svc := newServiceClient(t, srv)
		listTableNames(t, svc)
		status, _, body = consoleGet(t, c, srv.BaseURL(), "/-/api/watch?seconds=30", devKey)
		if status != 200 {
			t.Fatalf("signed watch: %d %s", status, body)
		}
		var w struct {
			Account string
			Rates   struct {
				Seconds    int
				Operations []struct {
					Operation string
					Requests  []int
				}
			}
			Partitions struct {
				TargetPerSec float64 `json:"target_per_sec"`
			}
		}
		if err := json.Unmarshal([]byte(body), &w); err != nil {
			t.Fatal(err)
		}
		if w.Account != devAccount || w.Rates.Seconds != 30 || w.Partitions.TargetPerSec != 2000 {
			t.Fatalf("watch: %s", body)
		}
		// The QueryTables of listTableNames is counted within a second or two.
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(body, `"QueryTables"`) {
			if time.Now().After(deadline) {
				t.Fatalf("QueryTables not in Watch: %s", body)
			}
			time.Sleep(200 * time.Millisecond)
			_, _, body = consoleGet(t, c, srv.BaseURL(), "/-/api/watch?seconds=30", devKey)
		}
	})
	t.Run("off", func(t *testing.T) {
		for _, opt := range []serverOption{withArgs("--console=false"), withChildEnv("CERULEAN_CONSOLE=false")} {
			srv := startServer(t, opt)
			if strings.Contains(srv.logs.Tail(8<<10), "Web console") {
				t.Fatalf("console off, yet announced:\n%s", srv.logs.Tail(8<<10))
			}
			if status, _, body := consoleGet(t, http.DefaultClient, srv.BaseURL(), "/-/", ""); status == 200 || strings.Contains(body, "app.js") {
				t.Fatalf("console off, yet GET /-/ = %d %s", status, body)
			}
			listTableNames(t, newServiceClient(t, srv))
		}
	})
	t.Run("own address", func(t *testing.T) {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		srv := startServer(t, withArgs("--console-addr", addr))
		base := srv.scheme + "://" + addr
		waitConsoleURL(t, srv, base)
		if status, _, _ := consoleGet(t, http.DefaultClient, base, "/-/", ""); status != 200 {
			t.Fatalf("GET /-/ on --console-addr: %d", status)
		}
		if status, _, body := consoleGet(t, http.DefaultClient, srv.BaseURL(), "/-/", ""); status == 200 || strings.Contains(body, "app.js") {
			t.Fatalf("--console-addr given, yet --addr serves the console: %d", status)
		}
		// The same table API on the console's address, so the page stays same-origin.
		name := tableName(t)
		if _, err := newServiceClient(t, srv).CreateTable(ctx(t), name, nil); err != nil {
			t.Fatal(err)
		}
		other := newServiceClientFor(t, base+"/"+devAccount, devAccount, devKey, nil)
		if !contains(listTableNames(t, other), name) {
			t.Fatalf("the table API on --console-addr does not list %s", name)
		}
	})
	t.Run("https", func(t *testing.T) {
		srv := startServer(t, withSelfSignedTLS())
		if !strings.Contains(srv.logs.Tail(8<<10), "https://"+srv.Addr+"/-/\n") {
			t.Fatalf("over HTTPS the console URL is not https://%s/-/:\n%s", srv.Addr, srv.logs.Tail(8<<10))
		}
		pem, err := os.ReadFile(srv.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		if status, _, _ := consoleGet(t, c, srv.BaseURL(), "/-/", ""); status != 200 {
			t.Fatalf("GET /-/ over HTTPS: %d", status)
		}
	})
	t.Run("flags", func(t *testing.T) {
		status, _, errOut := runCLI(t, "serve", "--console=false", "--console-addr", "127.0.0.1:1")
		if status != 2 || !strings.Contains(errOut, "--console-addr with --console=false") {
			t.Fatalf("--console=false --console-addr: exit %d, %q", status, errOut)
		}
	})
}

// waitConsoleURL fails unless srv's start-up message gives the console's URL at base. The
// server answers before that message is written, so it is given a few seconds.
func waitConsoleURL(t *testing.T, srv *server, base string) {
	t.Helper()
	hasURL := func() bool {
		out := srv.logs.Tail(8 << 10)
		return strings.Contains(out, "Web console") && strings.Contains(out, base+"/-/\n")
	}
	for deadline := time.Now().Add(5 * time.Second); !hasURL() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if !hasURL() {
		t.Fatalf("the start-up message does not give the console URL %s/-/:\n%s", base, srv.logs.Tail(8<<10))
	}
}
