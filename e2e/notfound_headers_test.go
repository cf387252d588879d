package e2e

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
)

// TestNotFoundReadHeadersGoSDK (issue 44): a read answered 404 — a missing entity, a
// missing table — carries x-ms-session-token, x-cerulean-read-source and
// x-cerulean-read-position like every other read, so that a stale 404 from a replica can
// be traced to where and at what position it was read.
func TestNotFoundReadHeadersGoSDK(t *testing.T) {
	srv := startServer(t)
	svc, rec := recordingClient(t, srv)
	c, _ := newTable(t, svc)
	missing := svc.NewClient("nosuchtable" + tableName(t)[1:8])
	reads := []struct {
		what string
		code string
		read func(cx context.Context) error
	}{
		{"get entity of a missing entity", "ResourceNotFound", func(cx context.Context) error { _, err := c.GetEntity(cx, "p", "none", nil); return err }},
		{"get entity in a missing table", "TableNotFound", func(cx context.Context) error { _, err := missing.GetEntity(cx, "p", "r", nil); return err }},
		{"query entities of a missing table", "TableNotFound", func(cx context.Context) error {
			_, err := missing.NewListEntitiesPager(nil).NextPage(cx)
			return err
		}},
		{"get table acl of a missing table", "TableNotFound", func(cx context.Context) error { _, err := missing.GetAccessPolicy(cx, nil); return err }},
	}
	for _, r := range reads {
		err := r.read(ctx(t))
		var re *azcore.ResponseError
		if !errors.As(err, &re) || re.StatusCode != http.StatusNotFound || re.ErrorCode != r.code {
			t.Errorf("%s: %v, want 404 %s", r.what, err, r.code)
			continue
		}
		got := rec.take()
		if len(got) != 1 {
			t.Fatalf("%s: %d reads recorded", r.what, len(got))
		}
		checkReadFrom(t, r.what, got[0], engineReplicas() > 0)
	}
}
