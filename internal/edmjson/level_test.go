package edmjson

import "testing"

func TestParseLevel(t *testing.T) {
	cases := []struct {
		in   string
		want Level
		ok   bool
	}{
		{"application/json", MinimalMetadata, true},
		{"Application/JSON", MinimalMetadata, true},
		{"application/json;odata=nometadata", NoMetadata, true},
		{"application/json;odata=minimalmetadata", MinimalMetadata, true},
		{"application/json;odata=fullmetadata", FullMetadata, true},
		{"application/json; odata=minimalmetadata", MinimalMetadata, true},
		{"application/json ;  odata = fullmetadata ", FullMetadata, true},
		{"APPLICATION/JSON;ODATA=NOMETADATA", NoMetadata, true},
		{"application/json;odata=\"nometadata\"", NoMetadata, true},
		{"application/json;odata=minimalmetadata;streaming=true;charset=utf-8", MinimalMetadata, true},
		{"application/json;streaming=true;charset=utf-8;odata=fullmetadata", FullMetadata, true},
		{"application/json;charset=utf-8", MinimalMetadata, true},
		{"application/json;IEEE754Compatible=true;odata=nometadata", NoMetadata, true},
		{"application/json;", MinimalMetadata, true},
		{" application/json ", MinimalMetadata, true},
		{"application/json;odata=verbose", 0, false},
		{"application/json;odata=", 0, false},
		{"application/json;odata=light", 0, false},
		{"application/atom+xml", 0, false},
		{"application/xml", 0, false},
		{"application/jsonx", 0, false},
		{"text/json", 0, false},
		{"*/*", 0, false},
		{"", 0, false},
		{";odata=nometadata", 0, false},
	}
	for _, c := range cases {
		got, ok := ParseLevel(c.in)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("ParseLevel(%q) = %s, %v; want %s, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestNegotiateLevel(t *testing.T) {
	cases := []struct {
		format, accept string
		want           Level
		ok             bool
	}{
		// Accept only.
		{"", "", MinimalMetadata, true},
		{"", "   ", MinimalMetadata, true},
		{"", "application/json;odata=minimalmetadata", MinimalMetadata, true},
		{"", "application/json", MinimalMetadata, true},
		{"", "application/json;odata=nometadata", NoMetadata, true},
		{"", "application/json;odata=fullmetadata", FullMetadata, true},
		{"", "Application/JSON;odata=nometadata", NoMetadata, true},
		{"", "application/json; odata=fullmetadata", FullMetadata, true},
		{"", "*/*", MinimalMetadata, true},
		{"", "application/*", MinimalMetadata, true},
		{"", "application/atom+xml", 0, false},
		{"", "application/xml", 0, false},
		{"", "application/atom+xml,application/xml", 0, false},
		{"", "text/html", 0, false},
		{"", "application/json;odata=verbose", 0, false},
		{"", "application/atom+xml, application/json;odata=nometadata", NoMetadata, true},
		{"", "application/json;odata=nometadata;q=0.5, application/json;odata=fullmetadata", FullMetadata, true},
		{"", "application/json;odata=nometadata;q=0.9, application/json;odata=fullmetadata;q=0.8", NoMetadata, true},
		{"", "application/json;odata=nometadata, application/json;odata=fullmetadata", NoMetadata, true},
		{"", "application/json;odata=fullmetadata;q=0, application/xml", 0, false},
		{"", "application/json;odata=fullmetadata;q=0, */*;q=0.1", MinimalMetadata, true},
		{"", "application/json;q=bogus", MinimalMetadata, true},
		{"", "application/xml;q=1, application/json;odata=nometadata;q=0.1", NoMetadata, true},
		{"", ",,application/json;odata=fullmetadata,", FullMetadata, true},
		{"", "application/json;odata=verbose, application/json;odata=nometadata;q=0.2", NoMetadata, true},
		// $format wins.
		{"application/json;odata=fullmetadata", "application/json;odata=nometadata", FullMetadata, true},
		{"application/json;odata=nometadata", "application/xml", NoMetadata, true},
		{"json", "application/atom+xml", MinimalMetadata, true},
		{"JSON", "", MinimalMetadata, true},
		{"atom", "application/json", 0, false},
		{"xml", "", 0, false},
		{"application/atom+xml", "application/json", 0, false},
		{"  ", "application/json;odata=nometadata", NoMetadata, true},
	}
	for _, c := range cases {
		got, ok := NegotiateLevel(c.format, c.accept)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("NegotiateLevel(%q, %q) = %s, %v; want %s, %v", c.format, c.accept, got, ok, c.want, c.ok)
		}
	}
}

func TestContentTypeAndString(t *testing.T) {
	for l, want := range map[Level]string{
		NoMetadata:      "application/json;odata=nometadata;streaming=true;charset=utf-8",
		MinimalMetadata: "application/json;odata=minimalmetadata;streaming=true;charset=utf-8",
		FullMetadata:    "application/json;odata=fullmetadata;streaming=true;charset=utf-8",
	} {
		if got := ContentType(l); got != want {
			t.Errorf("ContentType(%s) = %q", l, got)
		}
		// The content type we send parses back to the same level.
		if got, ok := ParseLevel(ContentType(l)); !ok || got != l {
			t.Errorf("ParseLevel(ContentType(%s)) = %s, %v", l, got, ok)
		}
	}
	var zero Level
	if zero != MinimalMetadata {
		t.Error("zero Level is not MinimalMetadata")
	}
}
