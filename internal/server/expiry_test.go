package server

import (
	"net/http"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

func TestParseExpiry(t *testing.T) {
	base := entity.TimeToTicks(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))
	for _, c := range []struct {
		in   []string
		want int64
		ok   bool
	}{
		{nil, storage.ExpiryComputed, true},
		{[]string{"never"}, storage.ExpiryNever, true},
		{[]string{" never "}, storage.ExpiryNever, true},
		{[]string{"2026-12-05T10:00:00.1234567Z"}, base + 1234567, true},
		{[]string{"2026-12-05T10:00:00Z"}, base, true},
		{[]string{"2026-12-05T10:00:00.5Z"}, base + 5000000, true},
		{[]string{"2026-12-05T10:00:00.123456700Z"}, base + 1234567, true}, // zeros past 7 digits lose nothing
		{[]string{"1970-01-01T00:00:00Z"}, 1, true},                        // past: expired at once
		{[]string{"1601-01-01T00:00:00Z"}, 1, true},
		{[]string{"9999-12-31T23:59:59.9999999Z"}, entity.MaxDateTime, true},
		{[]string{"Never"}, 0, false},
		{[]string{""}, 0, false},
		{[]string{"2026-12-05T10:00:00.12345678Z"}, 0, false},
		{[]string{"2026-12-05T10:00:00+00:00"}, 0, false},
		{[]string{"2026-12-05T10:00:00"}, 0, false},
		{[]string{"2026-12-05T10:00Z"}, 0, false},
		{[]string{"2026-12-05 10:00:00Z"}, 0, false},
		{[]string{"2026-12-05T25:00:00Z"}, 0, false},
		{[]string{"1600-12-31T23:59:59Z"}, 0, false},
		{[]string{"+10000-01-01T00:00:00Z"}, 0, false},
		{[]string{"never", "never"}, 0, false},
	} {
		got, err := parseExpiry(c.in)
		if c.ok && (err != nil || got != c.want) {
			t.Errorf("parseExpiry(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
		if !c.ok {
			e, _ := azerr.As(err)
			if err == nil || e.Code != azerr.InvalidHeaderValue || len(e.Fields) == 0 || e.Fields[0].Value != "x-cerulean-expiry" {
				t.Errorf("parseExpiry(%q) = %d, %v; want 400 InvalidHeaderValue naming the header", c.in, got, err)
			}
		}
	}
	if _, err := writeExpiry(http.MethodDelete, []string{"never"}); err == nil {
		t.Error("a delete took an expiry")
	} else if e, _ := azerr.As(err); e.Code != azerr.UnsupportedHeader {
		t.Errorf("a delete with an expiry: %v, want UnsupportedHeader", err)
	}
	if v, err := writeExpiry(http.MethodDelete, nil); err != nil || v != 0 {
		t.Errorf("a delete without: %d, %v", v, err)
	}
}

func TestExpiryPreference(t *testing.T) {
	for _, c := range []struct {
		prefer  []string
		want    bool
		applied string
	}{
		{nil, false, ""},
		{[]string{"return-no-content"}, false, ""},
		{[]string{`odata.include-annotations="cerulean.expiry"`}, true, `odata.include-annotations="cerulean.expiry"`},
		{[]string{`odata.include-annotations=*`}, true, `odata.include-annotations=*`},
		{[]string{`return-content, odata.include-annotations="odata.*,cerulean.*"`}, true, `odata.include-annotations="odata.*,cerulean.*"`},
		{[]string{"return-content", `ODATA.INCLUDE-ANNOTATIONS="Cerulean.Expiry"`}, true, `ODATA.INCLUDE-ANNOTATIONS="Cerulean.Expiry"`},
		{[]string{`include-annotations="cerulean.expiry"`}, true, `include-annotations="cerulean.expiry"`},
		{[]string{`odata.include-annotations="*,-cerulean.expiry"`}, false, ""},
		{[]string{`odata.include-annotations="*,-cerulean.*"`}, false, ""},
		{[]string{`odata.include-annotations="cerulean.*,-cerulean.*"`}, false, ""}, // a tie: exclusion wins
		{[]string{`odata.include-annotations="-cerulean.*,cerulean.expiry"`}, true, `odata.include-annotations="-cerulean.*,cerulean.expiry"`},
		{[]string{`odata.include-annotations="odata.*"`}, false, ""},
		{[]string{`odata.include-annotations="cerulean.expiryx"`}, false, ""},
		{[]string{`odata.include-annotations`}, false, ""},
		{[]string{`odata.include-annotations=""`}, false, ""},
	} {
		applied, ok := expiryPreference(c.prefer)
		if ok != c.want || applied != c.applied {
			t.Errorf("expiryPreference(%q) = %q, %v; want %q, %v", c.prefer, applied, ok, c.applied, c.want)
		}
	}
}
