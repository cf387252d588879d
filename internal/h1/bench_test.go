package h1

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkServe compares h1 with net/http answering a table client's point read: a GET
// with the headers an SDK sends, answered with the headers Cerulean sends and a 1 KiB
// body, over one loopback keep-alive connection, one request at a time, in plain HTTP and
// in TLS. The time per request includes the client's (a minimal one, the same for both)
// and the kernel's.
//
//	go test -run '^$' -bench Serve -benchmem ./h1
func BenchmarkServe(b *testing.B) {
	entity := bytes.Repeat([]byte("x"), 1024)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Ms-Version") == "" {
			http.Error(w, "no version", http.StatusBadRequest)
			return
		}
		hd := w.Header()
		hd["Cache-Control"] = []string{"no-cache"}
		hd["Content-Type"] = []string{"application/json;odata=minimalmetadata;streaming=true;charset=utf-8"}
		hd["Etag"] = []string{`W/"datetime'2026-11-29T08%3A00%3A00.0000000Z'"`}
		hd["Server"] = []string{"Cerulean"}
		hd["X-Content-Type-Options"] = []string{"nosniff"}
		hd["X-Ms-Request-Id"] = []string{"8f9eb28e-43f6-15a3-0000-000000000003"}
		hd["X-Ms-Version"] = []string{"2019-02-02"}
		hd["Keep-Alive"] = []string{"timeout=120"}
		hd["Content-Length"] = []string{strconv.Itoa(len(entity))}
		w.Write(entity)
	})
	req := []byte("GET /devstoreaccount1/t(PartitionKey='p1',RowKey='r1') HTTP/1.1\r\n" +
		"Host: 127.0.0.1:10002\r\nUser-Agent: cerulean-bench\r\n" +
		"Accept: application/json;odata=nometadata\r\nDataserviceversion: 3.0\r\n" +
		"X-Ms-Version: 2019-02-02\r\nX-Ms-Date: Sun, 29 Nov 2026 08:00:00 GMT\r\n" +
		"Authorization: SharedKeyLite devstoreaccount1:0123456789abcdefghijklmnopqrstuvwxyzABCDEFG=\r\n\r\n")
	srvTLS, cliTLS := testTLS()
	for _, name := range []string{"h1", "net-http", "h1/tls", "net-http/tls"} {
		b.Run(name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			useTLS := strings.HasSuffix(name, "/tls")
			if useTLS {
				ln = tls.NewListener(ln, srvTLS)
			}
			hs := &http.Server{Handler: h}
			if strings.HasPrefix(name, "h1") {
				s := &Server{HTTP: hs}
				go s.Serve(ln)
				defer s.Close()
			} else {
				go hs.Serve(ln)
				defer hs.Close()
			}
			var c net.Conn
			if useTLS {
				c, err = tls.Dial("tcp", ln.Addr().String(), cliTLS)
			} else {
				c, err = net.Dial("tcp", ln.Addr().String())
			}
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReaderSize(c, 8192)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if err := readResponse(br); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// readResponse reads one response with a Content-Length, checking for a 200.
func readResponse(br *bufio.Reader) error {
	length := -1
	for first := true; ; first = false {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if first && !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
			return io.ErrUnexpectedEOF
		}
		if len(line) == 2 {
			break
		}
		if k, v, ok := bytes.Cut(line, []byte(": ")); ok && bytes.EqualFold(k, []byte("Content-Length")) {
			length, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	if length < 0 {
		return io.ErrUnexpectedEOF
	}
	_, err := br.Discard(length)
	return err
}
