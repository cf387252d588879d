package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/postgres"
)

// TestChangeFeedRefused: until this engine records change feeds (issue 45), a setting
// that turns one on is refused with 501 NotImplemented — on create and on a settings
// change — rather than accepted and left silently empty; the table is not created or
// changed.
func TestChangeFeedRefused(t *testing.T) {
	ctx := context.Background()
	e := open(t, postgres.Options{})
	acct := fmt.Sprintf("cf%016x", rand.Uint64())
	var ae *azerr.Error
	err := e.CreateTable(ctx, acct, "Feed", storage.TableSettings{ChangeFeed: 60})
	if !errors.As(err, &ae) || ae.Code != azerr.NotImplemented {
		t.Fatalf("CreateTable with a change feed = %v, want NotImplemented", err)
	}
	if _, err := e.GetTable(ctx, acct, "Feed"); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("the refused table exists: %v", err)
	}
	if err := e.CreateTable(ctx, acct, "Plain", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	err = e.SetTableSettings(ctx, acct, "Plain", storage.TableSettings{ChangeFeed: 60})
	if !errors.As(err, &ae) || ae.Code != azerr.NotImplemented {
		t.Fatalf("SetTableSettings with a change feed = %v, want NotImplemented", err)
	}
	if info, err := e.GetTable(ctx, acct, "Plain"); err != nil || !info.Settings.IsStandard() {
		t.Fatalf("after the refusal: %+v, %v", info, err)
	}
}
