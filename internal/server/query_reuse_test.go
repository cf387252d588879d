package server

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/edmjson"
)

// TestConcurrentPagesKeepTheirBytes runs whole-partition queries of different partitions
// side by side, again and again: each page is written from stored bags in recycled
// buffers (table.Page.Release), and every response must hold its own partition's values
// and no other's, byte for byte as the first answer.
func TestConcurrentPagesKeepTheirBytes(t *testing.T) {
	srv, _ := pebbleServer(t, "reuse")
	parts := []string{"a", "b", "c", "d"}
	for _, pk := range parts {
		for i := 0; i < 60; i++ {
			body := benchEntityJSON(pk, fmt.Sprintf("%03d", i), i, strings.Repeat(pk, 1024))
			e, _, err := edmjson.DecodeEntity([]byte(body))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := srv.tables.InsertEntity(context.Background(), auth.DevAccount().Name, "reuse", &e); err != nil {
				t.Fatal(err)
			}
		}
	}
	query := func(pk string) []byte {
		r := benchRequest(t, "/devstoreaccount1/reuse()?$filter="+url.QueryEscape("PartitionKey eq '"+pk+"'"))
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Errorf("partition %s: status %d: %s", pk, w.Code, w.Body)
		}
		return w.Body.Bytes()
	}
	first := map[string][]byte{}
	for _, pk := range parts {
		first[pk] = query(pk)
		if n := bytes.Count(first[pk], []byte(strings.Repeat(pk, 1024))); n != 60 {
			t.Fatalf("partition %s: %d payloads in the page, want 60", pk, n)
		}
	}
	var wg sync.WaitGroup
	for _, pk := range parts {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 30 {
					if got := query(pk); !bytes.Equal(got, first[pk]) {
						t.Errorf("partition %s: the page changed between answers", pk)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
}
