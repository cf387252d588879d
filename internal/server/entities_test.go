package server

import (
	"net/http"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
)

// TestIfMatchHeaderLines: If-Match sent on several lines is one list (RFC 9110 §5.3), and
// a list is 400 like "a, b" on one line; one line, padded or not, is one condition.
func TestIfMatchHeaderLines(t *testing.T) {
	et := entity.ETag(entity.TimeToTicks(nowFunc()))
	for _, tc := range []struct {
		lines []string
		bad   bool
	}{
		{[]string{et}, false},
		{[]string{"  " + et + "\t"}, false},
		{[]string{"*"}, false},
		{[]string{""}, false},
		{[]string{et, et}, true},
		{[]string{"*", "*"}, true},
		{[]string{et + ", " + et}, true},
	} {
		cond, err := ifMatch(&http.Request{Header: http.Header{"If-Match": tc.lines}})
		e, _ := azerr.As(err)
		switch {
		case tc.bad && (err == nil || e.Code != azerr.InvalidInput):
			t.Errorf("If-Match %q: %+v, %v; want 400 InvalidInput", tc.lines, cond, err)
		case !tc.bad && (err != nil || !cond.Present):
			t.Errorf("If-Match %q: %+v, %v; want a condition", tc.lines, cond, err)
		}
	}
	if _, err := ifMatch(&http.Request{Header: http.Header{"If-None-Match": {"*"}}}); err == nil {
		t.Error("If-None-Match accepted")
	}
}
