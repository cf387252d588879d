package bench

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/h1"
	"github.com/ceruleandb/cerulean/internal/tlsconf"
)

// The floor (--floor): an HTTP server inside the bench process that answers every request
// as the measured server answered the same kind of request — the same status, headers and
// body bytes — without authenticating, parsing or storing anything. Running each workload
// against it right after the server, with the same client, connections and workers,
// measures what this machine's HTTP stack and the load generator alone allow: the floor
// under any server's cost. A workload's ratio to it (server rate ÷ floor rate) says how
// much of the machine the server's own work takes; 1.0 would be a server that costs
// nothing.
//
// The floor replays recordings rather than canned answers so that its responses are
// exactly the server's (1 KiB entities, its headers, a 100-part $batch answer), whatever
// server is measured. The recorder keeps the first successful answer per workload and
// request kind (method, entity or collection URL, continuation position), so a scan's
// pages replay in order with their continuation headers and the scan ends where the
// server's did. It serves HTTP as Cerulean does, with package h1 in front of a net/http
// server (so that the ratio compares the server's own work, not two HTTP stacks), over TLS
// when the measured endpoint is https.

// recorder keeps the first answer to each kind of request of each workload.
type recorder struct {
	workload atomic.Pointer[string]
	mu       sync.RWMutex
	m        map[string]*recorded
}

type recorded struct {
	status int
	header http.Header
	body   []byte
}

func newRecorder() *recorder {
	r := &recorder{m: map[string]*recorded{}}
	r.setWorkload("")
	return r
}

// setWorkload names the workload whose requests follow.
func (r *recorder) setWorkload(name string) { r.workload.Store(&name) }

// key identifies a request kind within the current workload: method, whether the URL
// addresses one entity, and the continuation it asks for.
func (r *recorder) key(method string, point bool, nextPK, nextRK string) string {
	p := "c"
	if point {
		p = "e"
	}
	return *r.workload.Load() + " " + method + " " + p + " " + nextPK + " " + nextRK
}

// keyOf is key for an HTTP request (the SDK's, recorded by recordingTransport, or one the
// floor answers).
func (r *recorder) keyOf(req *http.Request) string {
	point := strings.Contains(req.URL.EscapedPath(), "PartitionKey=")
	q := req.URL.Query()
	return r.key(req.Method, point, q.Get("NextPartitionKey"), q.Get("NextRowKey"))
}

func (r *recorder) has(key string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.m[key] != nil
}

func (r *recorder) get(key string) *recorded {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.m[key]
}

// put keeps a successful answer, the first one per key. header and body are copied.
func (r *recorder) put(key string, status int, header http.Header, body []byte) {
	if status >= 300 {
		return
	}
	h := header.Clone()
	// The floor's HTTP server sets these itself, as the server's did.
	for _, k := range []string{"Date", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive"} {
		h.Del(k)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m[key] == nil {
		r.m[key] = &recorded{status: status, header: h, body: bytes.Clone(body)}
	}
}

// recordingTransport records the SDK's answers for the floor.
type recordingTransport struct {
	next http.RoundTripper
	rec  *recorder
}

func (t recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	key := t.rec.keyOf(req)
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode >= 300 || t.rec.has(key) {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	t.rec.put(key, resp.StatusCode, resp.Header, body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// floor is the replaying server.
type floor struct {
	rec       *recorder
	srv       *h1.Server
	endpoint  string      // the floor's table endpoint, with the measured endpoint's path
	clientTLS *tls.Config // trusts the floor's certificate; nil over plain HTTP
	dir       string      // the certificate's directory, removed by close
	// log, with --durable-floor, is where requests that change data go before they are
	// answered while mode is floorDurable (durable.go); engine, with --engine-floor, where
	// they go while it is floorEngine (enginefloor.go).
	log    *durableLog
	engine *engineLog
	mode   atomic.Int32
}

// The floor's modes (floor.mode): what it does with a request that changes data before
// it answers.
const (
	floorPlain   int32 = iota // nothing
	floorDurable              // appends it to the durable floor's log and syncs it
	floorEngine               // writes it into the engine floor's engine, synced
)

// startFloor starts the floor on a loopback port, over TLS when useTLS, answering under
// basePath (the measured endpoint's path, e.g. /devstoreaccount1).
func startFloor(rec *recorder, useTLS bool, basePath string) (*floor, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	f := &floor{rec: rec}
	f.srv = &h1.Server{HTTP: &http.Server{Handler: f, ReadHeaderTimeout: httpTimeout, IdleTimeout: 2 * time.Minute}}
	scheme := "http"
	if useTLS {
		scheme = "https"
		cfg, clientCfg, dir, err := floorTLS()
		if err != nil {
			ln.Close()
			return nil, err
		}
		f.clientTLS, f.dir = clientCfg, dir
		ln = tls.NewListener(ln, cfg)
	}
	f.endpoint = scheme + "://" + ln.Addr().String() + basePath
	go f.srv.Serve(ln) //nolint:errcheck // ends with Close
	return f, nil
}

// floorTLS makes a self-signed certificate for the floor and a client config trusting it.
func floorTLS() (server, clientCfg *tls.Config, dir string, err error) {
	dir, err = os.MkdirTemp("", "cerulean-bench-floor")
	if err != nil {
		return nil, nil, "", fmt.Errorf("floor: %w", err)
	}
	fail := func(err error) (*tls.Config, *tls.Config, string, error) {
		os.RemoveAll(dir)
		return nil, nil, "", fmt.Errorf("floor: certificate: %w", err)
	}
	certFile, keyFile, _, err := tlsconf.SelfSigned(dir)
	if err != nil {
		return fail(err)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return fail(err)
	}
	pem, err := os.ReadFile(certFile)
	if err != nil {
		return fail(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fail(errors.New("unreadable PEM"))
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}},
		&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}, dir, nil
}

// ServeHTTP replays the recorded answer to the request's kind. The body is read to the end
// first, as a server must; in the durable and engine modes a request that changes data
// (any but GET and HEAD) is written with its body to f.log, or into f.engine, and synced
// before it is answered.
func (f *floor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if mode := f.mode.Load(); mode != floorPlain && r.Method != http.MethodGet && r.Method != http.MethodHead {
		body, err := io.ReadAll(r.Body)
		if err == nil && mode == floorDurable {
			err = f.log.append([]byte(r.Method+" "+r.URL.RequestURI()+"\n"), body)
		} else if err == nil {
			err = f.engine.write(r, body)
		}
		if err != nil {
			http.Error(w, "floor: "+err.Error(), http.StatusInternalServerError)
			return
		}
	} else {
		_, _ = io.Copy(io.Discard, r.Body)
	}
	a := f.rec.get(f.rec.keyOf(r))
	if a == nil {
		http.Error(w, "floor: no recorded answer for "+r.Method+" "+r.URL.Path, http.StatusNotImplemented)
		return
	}
	h := w.Header()
	for k, v := range a.header {
		h[k] = v
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

func (f *floor) close() {
	f.srv.Close()
	if f.log != nil {
		f.log.close()
	}
	if f.engine != nil {
		f.engine.close()
	}
	if f.dir != "" {
		os.RemoveAll(f.dir)
	}
}

// connectionString is the measured connection string pointed at the floor: the same
// account and credentials, TableEndpoint replaced.
func (f *floor) connectionString(cs string) (string, error) {
	fields, err := client.ParseConnectionString(cs)
	if err != nil {
		return "", err
	}
	out := "TableEndpoint=" + f.endpoint + ";"
	for k, v := range fields {
		switch k {
		case "accountname":
			out += "AccountName=" + v + ";"
		case "accountkey":
			out += "AccountKey=" + v + ";"
		case "sharedaccesssignature":
			out += "SharedAccessSignature=" + v + ";"
		}
	}
	if fields["accountname"] == "" && fields["usedevelopmentstorage"] != "" {
		out += "AccountName=" + client.DevAccount + ";AccountKey=" + client.DevKey + ";"
	}
	return out, nil
}
