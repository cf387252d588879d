package azerr

import "testing"

func TestCatalogueComplete(t *testing.T) {
	for code, ent := range catalogue {
		if ent.status < 400 || ent.status > 599 {
			t.Errorf("%s: status %d is not an error status", code, ent.status)
		}
		if ent.message == "" {
			t.Errorf("%s: empty message", code)
		}
	}
	if got := New(TableNotFound); got.Status != 404 || got.Code != TableNotFound {
		t.Fatalf("New(TableNotFound) = %+v", got)
	}
}

func TestAsWrapsUnknownAsInternal(t *testing.T) {
	e, ok := As(errTest{})
	if ok || e.Code != InternalError || e.Status != 500 {
		t.Fatalf("As(foreign) = %+v, %v", e, ok)
	}
}

type errTest struct{}

func (errTest) Error() string { return "x" }

func TestInvalidHeaderNamesHeader(t *testing.T) {
	e := InvalidHeader("x-ms-version", "bogus")
	if e.Code != InvalidHeaderValue || e.Status != 400 || e.Message != "The value for one of the HTTP headers is not in the correct format." {
		t.Fatalf("InvalidHeader = %+v", e)
	}
	want := []Field{{"HeaderName", "x-ms-version"}, {"HeaderValue", "bogus"}}
	if len(e.Fields) != 2 || e.Fields[0] != want[0] || e.Fields[1] != want[1] {
		t.Fatalf("fields %v, want %v", e.Fields, want)
	}
}
