package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5/pgconn"
)

// The database's answers map to the engine's errors: a full disk is storage.ErrNoSpace
// (503 with the disk-full message, as on Pebble), a database that cannot serve now is
// storage.ErrUnavailable, and anything else stays an error of its own (a bug: 500).
func TestMapErrCodes(t *testing.T) {
	e := &Engine{}
	for _, c := range []struct {
		code string
		want error
	}{
		{"53100", storage.ErrNoSpace},     // disk_full
		{"53300", storage.ErrUnavailable}, // too_many_connections
		{"57P01", storage.ErrUnavailable}, // admin_shutdown
		{"08006", storage.ErrUnavailable}, // connection_failure
		{"40001", storage.ErrUnavailable}, // serialization_failure, after retries
		{"42P01", nil},                    // undefined_table: a bug
	} {
		err := e.mapErr(context.Background(), "apply", &pgconn.PgError{Code: c.code, Message: "m"})
		switch {
		case c.want == nil && (errors.Is(err, storage.ErrNoSpace) || errors.Is(err, storage.ErrUnavailable)):
			t.Errorf("%s: %v, want an error of its own", c.code, err)
		case c.want != nil && !errors.Is(err, c.want):
			t.Errorf("%s: %v, want %v", c.code, err, c.want)
		}
	}
}
