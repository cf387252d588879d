package svcprops

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

func mustTime(t *testing.T, s string) *time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	v = v.UTC()
	return &v
}

// wantCode checks err is a 400 *azerr.Error with the given code.
func wantCode(t *testing.T, err error, code azerr.Code, status int) {
	t.Helper()
	var e *azerr.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not *azerr.Error", err, err)
	}
	if e.Code != code || e.Status != status {
		t.Fatalf("got %s/%d, want %s/%d (%v)", e.Code, e.Status, code, status, e)
	}
}

func si(id, perm string) string {
	return "<SignedIdentifier><Id>" + id + "</Id><AccessPolicy><Start>2009-09-28T08:49:37Z</Start><Expiry>2009-09-29T08:49:37Z</Expiry><Permission>" + perm + "</Permission></AccessPolicy></SignedIdentifier>"
}

func TestParseACL(t *testing.T) {
	const hdr = `<?xml version="1.0" encoding="utf-8"?>`
	tests := []struct {
		name string
		body string
		want []SignedIdentifier // nil with n > 0: only the count is checked
		n    int
		code azerr.Code
	}{
		{name: "empty body", body: ""},
		{name: "whitespace body", body: " \r\n "},
		{name: "self-closing root", body: hdr + "<SignedIdentifiers />"},
		{name: "empty root", body: "<SignedIdentifiers></SignedIdentifiers>"},
		{name: "service example", body: hdr + `<SignedIdentifiers><SignedIdentifier><Id>id1</Id><AccessPolicy><Start>2009-09-28T08:49:37.0000000Z</Start><Expiry>2009-09-29T08:49:37.0000000Z</Expiry><Permission>raud</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>`,
			want: []SignedIdentifier{{ID: "id1", Start: mustTime(t, "2009-09-28T08:49:37Z"), Expiry: mustTime(t, "2009-09-29T08:49:37Z"), Permission: "raud"}}},
		{name: "js seconds precision and go nanos and offset", body: `<SignedIdentifiers><SignedIdentifier><Id>a</Id><AccessPolicy><Start>2021-07-08T09:10:09Z</Start><Expiry>2021-07-08T11:10:09.123456789+02:00</Expiry><Permission>r</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>`,
			want: []SignedIdentifier{{ID: "a", Start: mustTime(t, "2021-07-08T09:10:09Z"), Expiry: mustTime(t, "2021-07-08T09:10:09.1234567Z"), Permission: "r"}}},
		{name: "three and seven digit fractions, no zone", body: `<SignedIdentifiers><SignedIdentifier><Id>a</Id><AccessPolicy><Start>2021-07-08T09:10:09.123Z</Start><Expiry>2021-07-08T09:10:09.1234567</Expiry></AccessPolicy></SignedIdentifier></SignedIdentifiers>`,
			want: []SignedIdentifier{{ID: "a", Start: mustTime(t, "2021-07-08T09:10:09.123Z"), Expiry: mustTime(t, "2021-07-08T09:10:09.1234567Z")}}},
		{name: "policy fields all optional", body: `<SignedIdentifiers><SignedIdentifier><Id>only-id</Id></SignedIdentifier><SignedIdentifier><Id>b</Id><AccessPolicy/></SignedIdentifier></SignedIdentifiers>`,
			want: []SignedIdentifier{{ID: "only-id"}, {ID: "b"}}},
		{name: "permission any order", body: "<SignedIdentifiers>" + si("x", "dura") + "</SignedIdentifiers>",
			want: []SignedIdentifier{{ID: "x", Start: mustTime(t, "2009-09-28T08:49:37Z"), Expiry: mustTime(t, "2009-09-29T08:49:37Z"), Permission: "dura"}}},
		{name: "five identifiers", body: "<SignedIdentifiers>" + si("1", "r") + si("2", "a") + si("3", "u") + si("4", "d") + si("5", "") + "</SignedIdentifiers>", n: 5},
		{name: "64 char id", body: "<SignedIdentifiers>" + si(strings.Repeat("i", 64), "r") + "</SignedIdentifiers>", n: 1},
		{name: "six identifiers", body: "<SignedIdentifiers>" + strings.Repeat(si("1", "r"), 6) + "</SignedIdentifiers>", code: azerr.InvalidXMLDocument},
		{name: "65 char id", body: "<SignedIdentifiers>" + si(strings.Repeat("i", 65), "r") + "</SignedIdentifiers>", code: azerr.InvalidXMLDocument},
		{name: "empty id", body: "<SignedIdentifiers>" + si("", "r") + "</SignedIdentifiers>", code: azerr.InvalidXMLDocument},
		{name: "duplicate id", body: "<SignedIdentifiers>" + si("a", "r") + si("a", "d") + "</SignedIdentifiers>", code: azerr.InvalidXMLDocument},
		{name: "missing id", body: "<SignedIdentifiers><SignedIdentifier><AccessPolicy/></SignedIdentifier></SignedIdentifiers>", code: azerr.InvalidXMLDocument},
		{name: "bad permission letter", body: "<SignedIdentifiers>" + si("a", "rw") + "</SignedIdentifiers>", code: azerr.InvalidXMLDocument},
		{name: "repeated permission", body: "<SignedIdentifiers>" + si("a", "rr") + "</SignedIdentifiers>", code: azerr.InvalidXMLDocument},
		{name: "upper-case permission", body: "<SignedIdentifiers>" + si("a", "R") + "</SignedIdentifiers>", code: azerr.InvalidXMLDocument},
		{name: "bad start", body: `<SignedIdentifiers><SignedIdentifier><Id>a</Id><AccessPolicy><Start>yesterday</Start></AccessPolicy></SignedIdentifier></SignedIdentifiers>`, code: azerr.InvalidXMLDocument},
		{name: "date only expiry", body: `<SignedIdentifiers><SignedIdentifier><Id>a</Id><AccessPolicy><Expiry>2021-07-08</Expiry></AccessPolicy></SignedIdentifier></SignedIdentifiers>`, code: azerr.InvalidXMLDocument},
		{name: "ten fraction digits", body: `<SignedIdentifiers><SignedIdentifier><Id>a</Id><AccessPolicy><Expiry>2021-07-08T09:10:09.1234567891Z</Expiry></AccessPolicy></SignedIdentifier></SignedIdentifiers>`, want: []SignedIdentifier{{ID: "a", Expiry: mustTime(t, "2021-07-08T09:10:09.1234567Z")}}},
		{name: "malformed", body: "<SignedIdentifiers><SignedIdentifier>", code: azerr.InvalidXMLDocument},
		{name: "not xml", body: "raud", code: azerr.InvalidXMLDocument},
		{name: "wrong root", body: "<Foo/>", code: azerr.InvalidXMLDocument},
		{name: "trailing element", body: "<SignedIdentifiers/><SignedIdentifiers/>", code: azerr.InvalidXMLDocument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseACL([]byte(tc.body))
			if tc.code != "" {
				wantCode(t, err, tc.code, 400)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if len(got) != tc.n || (tc.n == 0 && got != nil) {
					t.Fatalf("got %v, want %d identifiers", got, tc.n)
				}
				return
			}
			if !aclEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func aclEqual(a, b []SignedIdentifier) bool {
	if len(a) != len(b) {
		return false
	}
	eq := func(x, y *time.Time) bool {
		if x == nil || y == nil {
			return x == nil && y == nil
		}
		return x.Equal(*y)
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Permission != b[i].Permission || !eq(a[i].Start, b[i].Start) || !eq(a[i].Expiry, b[i].Expiry) {
			return false
		}
	}
	return true
}

func TestAppendACL(t *testing.T) {
	if got, want := string(AppendACL(nil, nil)), `<?xml version="1.0" encoding="utf-8"?><SignedIdentifiers />`; got != want {
		t.Fatalf("empty:\n got %s\nwant %s", got, want)
	}
	ids := []SignedIdentifier{
		{ID: "id1", Start: mustTime(t, "2009-09-28T08:49:37Z"), Expiry: mustTime(t, "2009-09-29T08:49:37Z"), Permission: "raud"},
		{ID: "a<&>b", Expiry: mustTime(t, "2021-07-08T11:10:09.123456789+02:00")},
	}
	want := `<?xml version="1.0" encoding="utf-8"?><SignedIdentifiers>` +
		`<SignedIdentifier><Id>id1</Id><AccessPolicy><Start>2009-09-28T08:49:37.0000000Z</Start><Expiry>2009-09-29T08:49:37.0000000Z</Expiry><Permission>raud</Permission></AccessPolicy></SignedIdentifier>` +
		`<SignedIdentifier><Id>a&lt;&amp;&gt;b</Id><AccessPolicy><Expiry>2021-07-08T09:10:09.1234567Z</Expiry></AccessPolicy></SignedIdentifier>` +
		`</SignedIdentifiers>`
	got := AppendACL([]byte("prefix:"), ids)
	if string(got) != "prefix:"+want {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
	// The rendered document parses back to the same policies (with 100 ns truncation).
	back, err := ParseACL(got[len("prefix:"):])
	if err != nil {
		t.Fatal(err)
	}
	ids[1].Expiry = mustTime(t, "2021-07-08T09:10:09.1234567Z")
	if !aclEqual(back, ids) {
		t.Fatalf("round trip: %+v", back)
	}
}

func TestACLPersistence(t *testing.T) {
	if b := MarshalACL(nil); b != nil {
		t.Fatalf("empty marshals to %q", b)
	}
	if got, err := UnmarshalACL(nil); err != nil || got != nil {
		t.Fatalf("got %v, %v", got, err)
	}
	ids := []SignedIdentifier{
		{ID: "p1", Start: mustTime(t, "2009-09-28T08:49:37.1234567Z"), Expiry: mustTime(t, "2030-01-01T00:00:00Z"), Permission: "ra"},
		{ID: "p2"},
	}
	got, err := UnmarshalACL(MarshalACL(ids))
	if err != nil || !aclEqual(got, ids) {
		t.Fatalf("got %+v, %v", got, err)
	}
	if got[0].Start.Location() != time.UTC {
		t.Fatal("times must come back in UTC")
	}
	_, err = UnmarshalACL([]byte("{garbage"))
	wantCode(t, err, azerr.InternalError, 500)
}

func TestValidPermissionAndLookup(t *testing.T) {
	for p, ok := range map[string]bool{"": true, "r": true, "raud": true, "duar": true, "rr": false, "w": false, "raudx": false, "R": false} {
		if ValidPermission(p) != ok {
			t.Errorf("ValidPermission(%q) = %v", p, !ok)
		}
	}
	ids := []SignedIdentifier{{ID: "A"}, {ID: "b", Permission: "r"}}
	if s, ok := Lookup(ids, "b"); !ok || s.Permission != "r" {
		t.Fatal("lookup b")
	}
	if _, ok := Lookup(ids, "a"); ok {
		t.Fatal("lookup is case-sensitive")
	}
}
