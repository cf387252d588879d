package postgres_test

import (
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// countingProxy forwards TCP connections to target and counts the bytes that come back.
type countingProxy struct {
	ln   net.Listener
	down atomic.Int64 // bytes from the database to the engine
	wg   sync.WaitGroup
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}

func startProxy(t *testing.T, target string) *countingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{ln: ln}
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(s, c); s.Close() }()
			go func() {
				defer p.wg.Done()
				io.Copy(c, countingReader{s, &p.down})
				c.Close()
			}()
		}
	}()
	return p
}

// TestScanMaxBytesTransfer pages through large rows with a small MaxBytes and counts what
// the database sends: about the table once. A statement that is not capped by size in the
// database sends every row up to its LIMIT however few a page keeps (the rest are read
// and dropped), which for pages of two 200 KB rows is the rest of the table per page.
func TestScanMaxBytesTransfer(t *testing.T) {
	u, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	e, err := postgres.Open(t.Context(), u.String(), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ctx, acct := t.Context(), newAccount()
	if err := e.CreateTable(ctx, acct, "Large", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	db, err := pgxpool.New(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var id int64
	if err := db.QueryRow(ctx, `SELECT id FROM cerulean_tables WHERE account = $1 AND key = 'large'::BYTEA`, []byte(acct)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	// 100 rows of one 200,000-byte Binary property each (entity.AppendProps encoding:
	// count 1, name "B", type 8, uvarint length 200000, bytes), 20 MB in all.
	const rows, payload = 100, 200_000
	if _, err := db.Exec(ctx, `INSERT INTO cerulean_entities (table_id, pk, rk, version, props)
		SELECT $1, 'p'::BYTEA, convert_to(lpad(i::TEXT, 4, '0'), 'UTF8'), 1,
			'\x010142'::BYTEA || '\x08c09a0c'::BYTEA || decode(repeat(md5(i::TEXT), $2 / 32), 'hex') || decode(repeat('00', $2 % 32 + $2 / 32 * 16), 'hex')
		FROM generate_series(1, $3) i`, id, payload, rows); err != nil {
		t.Fatal(err)
	}
	for _, filtered := range []bool{false, true} {
		before := proxy.down.Load()
		start, got, pages, total := storage.Key{}, 0, 0, 0
		for {
			req := storage.ScanRequest{Start: start, Limit: 1000, MaxBytes: 2*payload + 100}
			if filtered {
				req.Filter = func(*storage.Record) bool { return true }
			}
			res, err := e.Scan(ctx, acct, "Large", req)
			if err != nil {
				t.Fatal(err)
			}
			for i := range res.Records {
				if b, ok := res.Records[i].Entity.Get("B"); !ok || len(b.Bytes) != payload {
					t.Fatalf("row %q: property B of %d bytes", res.Records[i].Entity.RowKey, len(b.Bytes))
				}
				total += storage.RecordSize(&res.Records[i])
			}
			got += len(res.Records)
			pages++
			if res.Next == nil {
				break
			}
			start = *res.Next
		}
		sent := proxy.down.Load() - before
		t.Logf("filtered=%v: %d rows in %d pages, %d bytes of records; the database sent %d bytes", filtered, got, pages, total, sent)
		if got != rows || pages < rows/2 {
			t.Fatalf("filtered=%v: %d rows in %d pages; want %d rows, two per page", filtered, got, pages, rows)
		}
		// Each page reads its two rows and at most one more, which it drops.
		if sent > 2*int64(total) {
			t.Fatalf("filtered=%v: the database sent %d bytes for %d bytes of records: statements are not capped by size", filtered, sent, total)
		}
	}
}
