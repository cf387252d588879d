package e2e

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// Keep-Alive: timeout=N on responses that keep the connection open, matched to the server's
// idle timeout (the connection is kept at least that long, and closed soon after); none on
// responses that close it.
func TestKeepAliveTimeout(t *testing.T) {
	srv := startServer(t, withChildEnv("CERULEAN_IDLE_TIMEOUT=3s"))
	acct := srv.Default().Name
	r := srv.do(t, rawReq{Method: "GET", Path: "/" + acct + "/Tables"})
	requireStatus(t, r, http.StatusOK, "list tables")
	if got := r.Header.Get("Keep-Alive"); got != "timeout=3" {
		t.Errorf("Keep-Alive = %q, want timeout=3", got)
	}
	r = srv.do(t, rawReq{Method: "GET", Path: "/" + acct + "/Tables", Header: map[string]string{"Connection": "close"}})
	if got := r.Header.Get("Keep-Alive"); got != "" {
		t.Errorf("response closing the connection: Keep-Alive = %q, want none", got)
	}

	// An idle connection lives as long as advertised, and not much longer.
	conn, err := srv.dial(&net.Dialer{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /"+acct+"/Tables HTTP/1.1\r\nHost: "+srv.Addr+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	idleFrom := time.Now()
	if got := resp.Header.Get("Keep-Alive"); got != "timeout=3" {
		t.Errorf("Keep-Alive = %q, want timeout=3", got)
	}
	_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	_, err = br.ReadByte()
	idle := time.Since(idleFrom)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("idle connection still open after %v (advertised 3s)", idle)
	}
	if idle < 3*time.Second || idle > 8*time.Second {
		t.Errorf("idle connection closed after %v, want a little over the advertised 3s", idle)
	}
}
