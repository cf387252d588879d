package postgres_test

import (
	"context"
	"os"
	"testing"

	"github.com/ceruleandb/cerulean/storage"
	"github.com/ceruleandb/cerulean/storage/enginetest"
	"github.com/ceruleandb/cerulean/storage/postgres"
)

// testURL returns the database the tests use (scripts/test starts a throwaway one and
// exports CERULEAN_TEST_POSTGRES_URL). Without it the tests skip, except in CI, where a
// missing database is a failure.
func testURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("CERULEAN_TEST_POSTGRES_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CERULEAN_TEST_POSTGRES_URL is not set (scripts/test starts PostgreSQL and sets it)")
		}
		t.Skip("CERULEAN_TEST_POSTGRES_URL is not set; scripts/test starts PostgreSQL and sets it")
	}
	return url
}

func open(t testing.TB, opts postgres.Options) *postgres.Engine {
	t.Helper()
	e, err := postgres.Open(context.Background(), testURL(t), opts)
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

func TestConformance(t *testing.T) {
	testURL(t)
	enginetest.Run(t, enginetest.Harness{
		Open: func(t *testing.T) storage.Engine { return open(t, postgres.Options{}) },
		Reopen: func(t *testing.T, e storage.Engine) storage.Engine {
			if err := e.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return open(t, postgres.Options{})
		},
	})
}
