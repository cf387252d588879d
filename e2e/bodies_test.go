package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/gcfloor"
)

// Request bodies and the connections that carry them: memory grows only as bytes arrive
// and is capped across the server, a client that stalls is cut off, and shutdown does not
// wait for stalled uploads. The limits are set through CERULEAN_* environment variables
// (not flags) so that the same tests run against an older binary (CERULEAN_TEST_BINARY),
// which ignores them, to show what they fix.

// withChildEnv adds environment variables to the child process.
func withChildEnv(kv ...string) serverOption {
	return func(c *serverConfig) { c.env = append(c.env, kv...) }
}

// upload is a hand-driven POST of an entity body over its own connection.
type upload struct {
	conn net.Conn
	br   *bufio.Reader
}

// startUpload connects and sends the headers of an authenticated Insert Entity declaring a
// body of declared bytes.
func startUpload(t testing.TB, srv *server, table string, declared int) (*upload, error) {
	return startUploadFrom(t, srv, table, declared, nil)
}

// startUploadFrom is startUpload from a local address (nil: any), so that a test can be
// two clients: 127.0.0.1 and 127.0.0.2 are both this host's loopback.
func startUploadFrom(t testing.TB, srv *server, table string, declared int, local net.Addr) (*upload, error) {
	conn, err := srv.dial(&net.Dialer{Timeout: 10 * time.Second, LocalAddr: local})
	if err != nil {
		return nil, err
	}
	acct := srv.Default()
	path := "/" + acct.Name + "/" + table
	date := time.Now().UTC().Format(http.TimeFormat)
	sig := signLite(t, acct.Key, date+"\n/"+acct.Name+path)
	head := "POST " + path + " HTTP/1.1\r\n" +
		"Host: " + srv.Addr + "\r\n" +
		"x-ms-version: 2019-02-02\r\n" +
		"x-ms-date: " + date + "\r\n" +
		"Authorization: SharedKeyLite " + acct.Name + ":" + sig + "\r\n" +
		"Content-Type: application/json\r\n" +
		"Accept: application/json;odata=nometadata\r\n" +
		"Content-Length: " + strconv.Itoa(declared) + "\r\n\r\n"
	_ = conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, head); err != nil {
		conn.Close()
		return nil, err
	}
	return &upload{conn: conn, br: bufio.NewReader(conn)}, nil
}

// send writes n body bytes (a JSON entity that never ends) within the deadline.
func (u *upload) send(n int, deadline time.Duration) error {
	_ = u.conn.SetWriteDeadline(time.Now().Add(deadline))
	body := bytes.Repeat([]byte("a"), n)
	copy(body, `{"PartitionKey":"p","RowKey":"r","Data":"`)
	_, err := u.conn.Write(body)
	return err
}

// result waits up to d for the server's answer: the status (0 if the connection ended
// without one) and whether the server closed the connection.
func (u *upload) result(d time.Duration) (status int, code string, closed bool) {
	status, h, closed := u.response(d)
	return status, h.Get("x-ms-error-code"), closed
}

// response is result with the response headers.
func (u *upload) response(d time.Duration) (status int, h http.Header, closed bool) {
	_ = u.conn.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(u.br, nil)
	if err != nil {
		var ne net.Error
		return 0, http.Header{}, !(errors.As(err, &ne) && ne.Timeout())
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		return resp.StatusCode, resp.Header, true
	}
	// A connection kept open stays so; one the server closes ends at once.
	_ = u.conn.SetReadDeadline(time.Now().Add(time.Second))
	_, err = u.br.ReadByte()
	var ne net.Error
	return resp.StatusCode, resp.Header, !(errors.As(err, &ne) && ne.Timeout())
}

// TestStalledUploadsBoundedMemory: 300 authenticated uploads that stall 100 bytes short of
// 4 MiB. Before, each held a 4 MiB buffer allocated from Content-Length for as long as the
// client liked (1.24 GB for 300). Now the server stays under 100 MB (plus the GC floor's
// headroom), each stalled upload is answered (503 ServerBusy when the body budget is
// spent, 500 OperationTimedOut when it stalls past --stall-timeout) and its connection
// closed, and ordinary SDK traffic keeps working meanwhile.
func TestStalledUploadsBoundedMemory(t *testing.T) {
	const (
		uploads  = 300
		declared = 4 << 20
		short    = 100
		stall    = 5 * time.Second
	)
	srv := startServer(t, withChildEnv("CERULEAN_STALL_TIMEOUT="+stall.String()))
	svc := newServiceClient(t, srv)
	client, name := newTable(t, svc)

	var (
		wg                     sync.WaitGroup
		mu                     sync.Mutex
		statuses               = map[string]int{}
		unanswered, sendFailed atomic.Int64
		slowest                atomic.Int64 // ns from the end of sending to the answer
	)
	begin := time.Now()
	for i := 0; i < uploads; i++ {
		wg.Go(func() {
			u, err := startUpload(t, srv, name, declared)
			if err != nil {
				sendFailed.Add(1)
				return
			}
			defer u.conn.Close()
			// The server may refuse to read on (budget spent): a write that cannot finish
			// is fine, the answer is what counts.
			if err := u.send(declared-short, 60*time.Second); err != nil {
				sendFailed.Add(1)
			}
			sent := time.Now()
			status, code, closed := u.result(stall + 60*time.Second)
			if status == 0 && !closed {
				unanswered.Add(1)
			}
			for {
				d := int64(time.Since(sent))
				if old := slowest.Load(); d <= old || slowest.CompareAndSwap(old, d) {
					break
				}
			}
			mu.Lock()
			statuses[fmt.Sprintf("%d %s", status, code)]++
			mu.Unlock()
		})
	}

	// Ordinary SDK traffic while the uploads are stalled: small inserts and reads, with
	// the SDK's retries off, must all succeed.
	time.Sleep(2 * time.Second)
	for i := 0; i < 20; i++ {
		e := marshal(t, map[string]any{"PartitionKey": "normal", "RowKey": strconv.Itoa(i), "N": i})
		if _, err := client.AddEntity(ctx(t), e, nil); err != nil {
			t.Errorf("insert during stalled uploads: %v", err)
		}
		if _, err := client.GetEntity(ctx(t), "normal", strconv.Itoa(i), nil); err != nil {
			t.Errorf("read during stalled uploads: %v", err)
		}
	}
	rssDuring, _ := srv.memKB(t)

	wg.Wait()
	rss, hwm := srv.memKB(t)
	t.Logf("%d stalled uploads: peak RSS %d MB, RSS during %d MB, after %d MB; answers %v; %d sends cut short; slowest answer %v after its last byte; all done in %v",
		uploads, hwm>>10, rssDuring>>10, rss>>10, statuses, sendFailed.Load(), time.Duration(slowest.Load()).Round(time.Millisecond), time.Since(begin).Round(time.Second))
	// Over HTTPS each connection also holds TLS's record buffers and handshake state, which
	// no body budget covers: up to 64 KiB more each. The garbage collector's floor
	// (internal/gcfloor) lets the heap grow by up to 64 MiB more than GOGC=100 would
	// before collecting the bodies already answered.
	limitKB := int64(100<<10) + gcfloor.DefaultHeadroom>>10
	if srv.HTTPS() {
		limitKB += uploads * 64
	}
	if hwm > limitKB {
		t.Errorf("peak RSS %d MB with %d stalled uploads, want under %d MB", hwm>>10, uploads, limitKB>>10)
	}
	if n := unanswered.Load(); n > 0 {
		t.Errorf("%d stalled uploads were neither answered nor disconnected within %v of stalling", n, stall+60*time.Second)
	}
	if d := time.Duration(slowest.Load()); d > stall+20*time.Second {
		t.Errorf("a stalled upload was held %v after its last byte, want about --stall-timeout (%v)", d, stall)
	}
	for k := range statuses {
		if k != "503 ServerBusy" && k != "500 OperationTimedOut" && !strings.HasPrefix(k, "0 ") {
			t.Errorf("stalled uploads answered %q (%d times), want 503 ServerBusy or 500 OperationTimedOut", k, statuses[k])
		}
	}
	// The server is still serving after all that.
	if _, err := client.GetEntity(ctx(t), "normal", "0", nil); err != nil {
		t.Errorf("read after the stalled uploads: %v", err)
	}
}

// TestSlowUploadCompletes: an honest client on a bad link, pausing between pieces of its
// body for less than --stall-timeout each but longer than that in total, is served.
func TestSlowUploadCompletes(t *testing.T) {
	srv := startServer(t, withChildEnv("CERULEAN_STALL_TIMEOUT=2s"))
	svc := newServiceClient(t, srv)
	client, name := newTable(t, svc)
	body := []byte(`{"PartitionKey":"p","RowKey":"slow","Text":"` + strings.Repeat("x", 3000) + `"}`)
	u, err := startUpload(t, srv, name, len(body))
	if err != nil {
		t.Fatal(err)
	}
	defer u.conn.Close()
	pieces := 4
	for i := 0; i < pieces; i++ {
		part := body[i*len(body)/pieces : (i+1)*len(body)/pieces]
		if _, err := u.conn.Write(part); err != nil {
			t.Fatalf("piece %d: %v", i, err)
		}
		if i < pieces-1 {
			time.Sleep(1200 * time.Millisecond)
		}
	}
	status, code, _ := u.result(30 * time.Second)
	if status != http.StatusCreated {
		t.Fatalf("slow upload answered %d %s, want 201", status, code)
	}
	if _, err := client.GetEntity(ctx(t), "p", "slow", nil); err != nil {
		t.Fatalf("slow upload not stored: %v", err)
	}
}

// TestTricklingUploadCutOff: a client that keeps sending a byte now and then never stalls,
// but --body-timeout bounds the whole body.
func TestTricklingUploadCutOff(t *testing.T) {
	srv := startServer(t, withChildEnv("CERULEAN_STALL_TIMEOUT=2s", "CERULEAN_BODY_TIMEOUT=3s"))
	svc := newServiceClient(t, srv)
	_, name := newTable(t, svc)
	u, err := startUpload(t, srv, name, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer u.conn.Close()
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 100; i++ {
			if _, err := u.conn.Write([]byte("{")); err != nil {
				return
			}
			time.Sleep(300 * time.Millisecond)
		}
	}()
	status, code, closed := u.result(30 * time.Second)
	elapsed := time.Since(start)
	if status != http.StatusInternalServerError || code != "OperationTimedOut" || !closed {
		t.Errorf("trickling upload: %d %s closed=%v, want 500 OperationTimedOut and the connection closed", status, code, closed)
	}
	if elapsed < 2500*time.Millisecond || elapsed > 15*time.Second {
		t.Errorf("trickling upload cut after %v, want about the 3s body timeout", elapsed)
	}
	u.conn.Close()
	<-done
}

// TestBodyBudgetServerBusy: when stalled uploads hold the body budget, a further large
// upload is answered at once with 503 ServerBusy and Retry-After (which every SDK retries),
// and small writes still get through.
func TestBodyBudgetServerBusy(t *testing.T) {
	srv := startServer(t, withChildEnv("CERULEAN_MAX_BODY_MEMORY=48MiB", "CERULEAN_STALL_TIMEOUT=20s"))
	svc := newServiceClient(t, srv)
	client, name := newTable(t, svc)
	// Bodies over 64 KiB may hold half of the 48 MiB, and one client half of that: three
	// stalled uploads of 3.9 MiB hold most of those 12 MiB, a fourth one does not fit.
	for range 3 {
		held, err := startUpload(t, srv, name, 4<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer held.conn.Close()
		if err := held.send(4<<20-100<<10, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	u, err := startUpload(t, srv, name, 3<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer u.conn.Close()
	_ = u.send(2<<20, 10*time.Second) // the server stops reading at the budget
	status, h, closed := u.response(10 * time.Second)
	if status != http.StatusServiceUnavailable || h.Get("x-ms-error-code") != "ServerBusy" || h.Get("Retry-After") == "" || !closed {
		t.Errorf("second large upload: %d %s Retry-After=%q closed=%v, want 503 ServerBusy with Retry-After and the connection closed",
			status, h.Get("x-ms-error-code"), h.Get("Retry-After"), closed)
	}
	// Small writes do not compete with the large uploads.
	if _, err := client.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "small"}), nil); err != nil {
		t.Errorf("small insert while the large-body budget is spent: %v", err)
	}
}

// TestShutdownWithStalledUpload: SIGTERM while an upload is stalled. Before, the server
// waited 30 s and exited 1 with "context deadline exceeded"; now it cuts the stalled
// upload, closes the engine and exits 0 within a few seconds, and the writes it
// acknowledged are there after a restart.
func TestShutdownWithStalledUpload(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	client, name := newTable(t, svc)
	for i := 0; i < 10; i++ {
		if _, err := client.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "ack", "RowKey": strconv.Itoa(i)}), nil); err != nil {
			t.Fatal(err)
		}
	}
	u, err := startUpload(t, srv, name, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer u.conn.Close()
	if err := u.send(1<<20-100, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)

	start := time.Now()
	exitErr, inTime := srv.terminate(45 * time.Second)
	elapsed := time.Since(start)
	t.Logf("SIGTERM with a stalled upload: exit %v after %v", exitErr, elapsed.Round(time.Millisecond))
	if !inTime {
		t.Fatalf("no exit within 45s of SIGTERM")
	}
	if exitErr != nil {
		t.Errorf("exit after SIGTERM: %v, want status 0", exitErr)
	}
	if elapsed > 5*time.Second {
		t.Errorf("shutdown took %v with a stalled upload, want a few seconds", elapsed)
	}
	if status, code, closed := u.result(5 * time.Second); status != 0 && status != http.StatusServiceUnavailable || !closed {
		t.Errorf("stalled upload at shutdown: %d %s closed=%v, want 503 (or nothing) and the connection closed", status, code, closed)
	}

	srv.restart(t)
	client = newServiceClient(t, srv).NewClient(name)
	for i := 0; i < 10; i++ {
		if _, err := client.GetEntity(ctx(t), "ack", strconv.Itoa(i), nil); err != nil {
			t.Errorf("acknowledged entity %d after restart: %v", i, err)
		}
	}
}

// TestShutdownLetsRequestsFinish: a request whose body is still arriving when SIGTERM comes
// is served to its end within the grace period; new connections are refused.
func TestShutdownLetsRequestsFinish(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	_, name := newTable(t, svc)
	body := []byte(`{"PartitionKey":"p","RowKey":"late","Text":"` + strings.Repeat("y", 4000) + `"}`)
	u, err := startUpload(t, srv, name, len(body))
	if err != nil {
		t.Fatal(err)
	}
	defer u.conn.Close()
	if _, err := u.conn.Write(body[:500]); err != nil {
		t.Fatal(err)
	}
	// Let the server take up the request (a connection still in the listen queue at
	// SIGTERM is refused, as it must be), then signal right after the next piece.
	time.Sleep(500 * time.Millisecond)
	if _, err := u.conn.Write(body[500:1000]); err != nil {
		t.Fatal(err)
	}
	srv.signal(syscall.SIGTERM)
	// Keep the body moving (pauses well under the 1 s allowed during shutdown).
	for off := 1000; off < len(body); off += 1000 {
		time.Sleep(250 * time.Millisecond)
		if _, err := u.conn.Write(body[off:min(off+1000, len(body))]); err != nil {
			t.Fatalf("body piece at %d: %v", off, err)
		}
	}
	status, code, _ := u.result(10 * time.Second)
	if status != http.StatusCreated {
		t.Errorf("upload in progress at SIGTERM: %d %s, want 201", status, code)
	}
	if c, err := net.DialTimeout("tcp", srv.Addr, time.Second); err == nil {
		c.Close()
		// The listener may not be closed yet only if the process has not seen the signal;
		// by now (after a full request) it has.
		t.Errorf("new connection accepted during shutdown")
	}
	// The SIGTERM above is the only one: the process exits by itself once its last
	// request is answered.
	exitErr, inTime := srv.waitExit(20 * time.Second)
	if !inTime || exitErr != nil {
		t.Fatalf("exit: %v (in time: %v), want status 0", exitErr, inTime)
	}
	srv.restart(t)
	client := newServiceClient(t, srv).NewClient(name)
	if _, err := client.GetEntity(ctx(t), "p", "late", nil); err != nil {
		t.Errorf("entity written during shutdown: %v", err)
	}
}

// TestResponseToNonReader: a client that asks for a large page and never reads it is cut
// off after --stall-timeout; the server does not keep the page for it.
func TestResponseToNonReader(t *testing.T) {
	srv := startServer(t, withChildEnv("CERULEAN_STALL_TIMEOUT=2s"), withArgs("--log-level", "debug"))
	svc := newServiceClient(t, srv)
	client, name := newTable(t, svc)
	// 1,000 entities of 16 KB: a first page of about 4 MB (the page byte budget), far more
	// than the socket buffers hold with the client's 4 KiB receive buffer.
	pad := strings.Repeat("z", 16000)
	for b := 0; b < 10; b++ {
		var actions []aztables.TransactionAction
		for i := 0; i < 100; i++ {
			actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd,
				Entity: marshal(t, map[string]any{"PartitionKey": "big", "RowKey": fmt.Sprintf("%04d", b*100+i), "Pad": pad})})
		}
		if _, err := client.SubmitTransaction(ctx(t), actions, nil); err != nil {
			t.Fatal(err)
		}
	}
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := srv.dial(&d)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	acct := srv.Default()
	path := "/" + acct.Name + "/" + name + "()"
	date := time.Now().UTC().Format(http.TimeFormat)
	sig := signLite(t, acct.Key, date+"\n/"+acct.Name+path)
	req := "GET " + path + " HTTP/1.1\r\nHost: " + srv.Addr + "\r\nx-ms-version: 2019-02-02\r\nx-ms-date: " + date +
		"\r\nAuthorization: SharedKeyLite " + acct.Name + ":" + sig + "\r\nAccept: application/json;odata=nometadata\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	// Never read for a while (the server's log line for the query shows when it gave up).
	deadline := time.Now().Add(15 * time.Second)
	line := ""
	for line == "" && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		line = findLogLine(srv, "op=QueryEntities", "table="+name)
	}
	t.Logf("server's line for the query: %s", line)
	// The server gave up on the connection: reading now finds the page cut short and the
	// connection closed, not the rest of the page.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(conn)
	t.Logf("read %d bytes after the server gave up: %v", len(got), err)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("the connection stayed open for a client that did not read for 15s (read %d bytes), want it closed after --stall-timeout (2s)", len(got))
	}
	// The page goes out in chunks (it is larger than one); a complete response would end
	// with the last chunk, "0\r\n\r\n".
	if bytes.HasSuffix(got, []byte("\r\n0\r\n\r\n")) {
		t.Errorf("the whole page arrived (%d bytes): the server waited for a client that did not read", len(got))
	}
}

// findLogLine returns the first line of the server's output containing every part.
func findLogLine(srv *server, parts ...string) string {
	for _, line := range strings.Split(srv.logs.Tail(1<<20), "\n") {
		ok := true
		for _, p := range parts {
			if !strings.Contains(line, p) {
				ok = false
				break
			}
		}
		if ok {
			return line
		}
	}
	return ""
}

// httpClientFrom is an HTTP client whose connections come from the local address ip
// (another loopback address is another client to the server).
func httpClientFrom(srv *server, ip string) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}
	if srv.HTTPS() {
		tr.TLSClientConfig = srv.clientTLS("")
	}
	return &http.Client{Transport: tr, Timeout: 2 * time.Minute}
}

// TestLargeBodiesFairAcrossClients (issue 42, item 25): one client (127.0.0.1) opens 31
// uploads declaring 4 MiB and trickles them after 1.1 MiB each, as a slow or hostile
// writer would. Before, they held every byte bodies over 64 KiB may hold (half of
// --max-body-memory), and every large write of every client was refused with 503 for the
// five minutes a body may take. Now one client holds at most half of that: another client
// (127.0.0.2) has its large writes — an entity of 300 KB, a $batch of 1 MB, a bulk request
// of 1 MB — served, while the first client's own next large write is refused.
func TestLargeBodiesFairAcrossClients(t *testing.T) {
	other := &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}
	if ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: other.IP}); err != nil {
		t.Skipf("no second loopback address: %v", err)
	} else {
		ln.Close()
	}
	srv := startServer(t, withChildEnv("CERULEAN_STALL_TIMEOUT=20s")) // --max-body-memory 64 MiB
	svc := newServiceClient(t, srv)
	_, name := newTable(t, svc)

	// The first client's trickling uploads.
	const uploads = 31
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var refused atomic.Int64
	var ups []*upload
	defer func() {
		for _, u := range ups {
			u.conn.Close()
		}
	}()
	for range uploads {
		u, err := startUpload(t, srv, name, 4<<20)
		if err != nil {
			t.Fatal(err)
		}
		_ = u.send(1100<<10, 20*time.Second) // the server may stop reading: its budget refused it
		ups = append(ups, u)
		wg.Go(func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					_ = u.conn.SetWriteDeadline(time.Now().Add(time.Second))
					if _, err := u.conn.Write([]byte("a")); err != nil {
						return
					}
				}
			}
		})
	}
	defer func() {
		if stop != nil {
			close(stop)
			wg.Wait()
		}
	}()
	time.Sleep(time.Second)

	// The other client's large writes.
	acct := srv.Default()
	hc := httpClientFrom(srv, "127.0.0.2")
	prop := strings.Repeat("x", 30000)
	big := map[string]any{"PartitionKey": "other", "RowKey": "entity"}
	for i := range 10 {
		big[fmt.Sprintf("S%d", i)] = prop
	}
	u, err := startUploadFrom(t, srv, name, len(marshal(t, big)), other)
	if err != nil {
		t.Fatal(err)
	}
	defer u.conn.Close()
	if _, err := u.conn.Write(marshal(t, big)); err != nil {
		t.Fatalf("the other client's 300 KB entity: %v", err)
	}
	if status, code, _ := u.result(30 * time.Second); status != http.StatusCreated {
		t.Errorf("the other client's 300 KB entity: %d %s, want 201", status, code)
	}

	otherSvc := newServiceClientFor(t, srv.Endpoint(acct.Name), acct.Name, acct.Key, hc)
	var actions []aztables.TransactionAction
	for i := range 33 {
		e := marshal(t, map[string]any{"PartitionKey": "batch", "RowKey": strconv.Itoa(i), "S": prop})
		actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: e})
	}
	if _, err := otherSvc.NewClient(name).SubmitTransaction(ctx(t), actions, nil); err != nil {
		t.Errorf("the other client's 1 MB $batch: %v", err)
	}

	bc := bulkClient(t, srv)
	bc.HTTP = hc
	_, elastic := newElasticTable(t, srv, bc)
	var ops []client.BulkOp
	for i := range 200 {
		ops = append(ops, client.BulkOp{Op: client.BulkInsert, Entity: marshal(t, map[string]any{"PartitionKey": "bulk", "RowKey": strconv.Itoa(i), "S": prop[:5000]})})
	}
	if res, err := bc.Bulk(ctx(t), elastic, ops); err != nil || res.Failed != 0 {
		t.Errorf("the other client's 1 MB bulk request: %v", err)
	}

	// The first client's uploads beyond its half were refused (503), the others still hold
	// theirs (no answer yet).
	close(stop)
	wg.Wait()
	stop = nil
	for _, u := range ups {
		wg.Go(func() {
			if status, code, _ := u.result(2 * time.Second); status == http.StatusServiceUnavailable && code == "ServerBusy" {
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	t.Logf("%d of the first client's %d trickling uploads were refused", refused.Load(), uploads)
	if n := refused.Load(); n < 10 {
		t.Errorf("%d of the first client's %d uploads of 1.1 MiB were refused; one client may hold 16 MiB", n, uploads)
	}
}
