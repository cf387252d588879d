package svcprops

import (
	"errors"
	"reflect"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

// check400 fails unless err is a 400 InvalidXmlDocument *azerr.Error with a reason.
func check400(t *testing.T, err error) {
	var e *azerr.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not *azerr.Error", err, err)
	}
	if e.Status != 400 || e.Code != azerr.InvalidXMLDocument || len(e.Fields) != 1 || e.Fields[0].Name != "Reason" || e.Fields[0].Value == "" {
		t.Fatalf("unexpected error %s/%d %v", e.Code, e.Status, e.Fields)
	}
}

// FuzzParseProperties: no panics; errors are 400 InvalidXmlDocument with a reason;
// whatever parses renders, re-parses and persists to the same properties.
func FuzzParseProperties(f *testing.F) {
	f.Add([]byte(defaultPropsXML))
	f.Add([]byte(`<StorageServiceProperties><Cors><CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods><MaxAgeInSeconds>1</MaxAgeInSeconds></CorsRule></Cors></StorageServiceProperties>`))
	f.Fuzz(func(t *testing.T, body []byte) {
		u, err := ParseProperties(body)
		if err != nil {
			check400(t, err)
			return
		}
		p := DefaultProperties().Apply(u)
		out := AppendProperties(nil, p)
		u2, err := ParseProperties(out)
		if err != nil {
			t.Fatalf("own output does not parse: %v\n%s", err, out)
		}
		if p2 := DefaultProperties().Apply(u2); !reflect.DeepEqual(p, p2) {
			t.Fatalf("render round trip:\n%+v\n%+v", p, p2)
		}
		p3, err := UnmarshalProperties(MarshalProperties(p))
		if err != nil || !reflect.DeepEqual(p, p3) {
			t.Fatalf("persistence round trip: %v\n%+v\n%+v", err, p, p3)
		}
	})
}

// FuzzParseACL: no panics; errors are 400 InvalidXmlDocument with a reason; whatever
// parses has at most 5 valid identifiers and renders, re-parses and persists unchanged.
func FuzzParseACL(f *testing.F) {
	f.Add([]byte(`<SignedIdentifiers><SignedIdentifier><Id>id1</Id><AccessPolicy><Start>2009-09-28T08:49:37.0000000Z</Start><Expiry>2009-09-29T08:49:37Z</Expiry><Permission>raud</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, body []byte) {
		ids, err := ParseACL(body)
		if err != nil {
			check400(t, err)
			return
		}
		if len(ids) > MaxSignedIdentifiers {
			t.Fatalf("%d identifiers accepted", len(ids))
		}
		for _, si := range ids {
			if si.ID == "" || len([]rune(si.ID)) > MaxIDLength || !ValidPermission(si.Permission) {
				t.Fatalf("invalid identifier accepted: %+v", si)
			}
		}
		out := AppendACL(nil, ids)
		ids2, err := ParseACL(out)
		if err != nil {
			t.Fatalf("own output does not parse: %v\n%s", err, out)
		}
		if !aclEqual(ids, ids2) {
			t.Fatalf("render round trip:\n%+v\n%+v", ids, ids2)
		}
		ids3, err := UnmarshalACL(MarshalACL(ids))
		if err != nil || !aclEqual(ids, ids3) {
			t.Fatalf("persistence round trip: %v", err)
		}
	})
}
