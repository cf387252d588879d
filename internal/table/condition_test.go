package table_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/table"
)

// TestParseCondition: what each If-Match value becomes. Only a value that is not one
// entity-tag is 400 InvalidInput (with the service's message naming the value); every
// other value is a condition, and a condition that names no version can only fail (412).
func TestParseCondition(t *testing.T) {
	v, err := entity.ParseDateTime("2024-05-01T10:00:01.0000001Z")
	if err != nil {
		t.Fatal(err)
	}
	et := entity.ETag(v)
	type want struct {
		any     bool
		version int64 // -1: can never match
		bad     bool
	}
	cases := []struct {
		in   string
		want want
	}{
		{"*", want{any: true}},
		{" * ", want{any: true}},
		{"\t*", want{any: true}},
		{"", want{version: -1}},
		{"   ", want{version: -1}},
		{et, want{version: v}},
		{" " + et + " ", want{version: v}},
		{strings.ReplaceAll(et, "%3A", ":"), want{version: v}},
		{strings.ReplaceAll(et, "%3A", "%3a"), want{version: v}},
		{"w" + et[1:], want{version: v}}, // lower-case w/ names the same version
		{`W/"wrong"`, want{version: -1}},
		{`w/"wrong"`, want{version: -1}},
		{et[2:], want{bad: true}}, // the same tag, strong: the service takes weak tags only
		{`"x"`, want{bad: true}},
		{`W/"datetime'2024-05-01T10%3A00%3A01Z'"`, want{version: -1}}, // not the 7-digit spelling
		{`W/`, want{bad: true}},
		{`W/"x`, want{bad: true}},
		{`abc`, want{bad: true}},
		{`datetime'2024-05-01T10%3A00%3A01.0000001Z'`, want{bad: true}},
		{`"a", "b"`, want{bad: true}},
		{et + ", " + et, want{bad: true}},
		{`*, *`, want{bad: true}},
		{`W/*`, want{bad: true}},
	}
	for _, c := range cases {
		got, err := table.ParseCondition(c.in, true)
		if c.want.bad {
			var ae *azerr.Error
			if !errors.As(err, &ae) || ae.Code != azerr.InvalidInput || ae.Status != 400 {
				t.Errorf("ParseCondition(%q) = %+v, %v; want 400 InvalidInput", c.in, got, err)
				continue
			}
			if !strings.Contains(ae.Message, "The etag value '"+c.in+"' specified in one of the request headers is not valid.") {
				t.Errorf("ParseCondition(%q): message %q does not name the value", c.in, ae.Message)
			}
			continue
		}
		if err != nil || !got.Present || got.Any != c.want.any || (!c.want.any && got.Version != c.want.version) {
			t.Errorf("ParseCondition(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	if got, err := table.ParseCondition("", false); err != nil || got.Present {
		t.Errorf("no If-Match: %+v, %v", got, err)
	}
}
