package svcprops

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

// MaxSignedIdentifiers is the most stored access policies a table may have.
const MaxSignedIdentifiers = 5

// MaxIDLength is the longest signed identifier Id, in characters.
const MaxIDLength = 64

// aclPermissionLetters are the letters a table stored access policy may grant, in canonical
// order: query (read), add, update, delete.
const aclPermissionLetters = "raud"

// SignedIdentifier is one stored access policy of a table. Start, Expiry and Permission are
// each optional: a SAS naming the policy with si= supplies whatever the policy leaves out.
type SignedIdentifier struct {
	ID         string
	Start      *time.Time
	Expiry     *time.Time
	Permission string
}

type xmlAccessPolicy struct {
	Start      *string `xml:"Start"`
	Expiry     *string `xml:"Expiry"`
	Permission *string `xml:"Permission"`
}

type xmlSignedIdentifier struct {
	ID           *string          `xml:"Id"`
	AccessPolicy *xmlAccessPolicy `xml:"AccessPolicy"`
}

type xmlSignedIdentifiers struct {
	Items []xmlSignedIdentifier `xml:"SignedIdentifier"`
}

// ParseACL parses a Set Table ACL body. An empty body (or <SignedIdentifiers/>) means "no
// policies". Errors are 400 InvalidXmlDocument with a reason, as the service answers them
// (the Go SDK's TestSetInvalidAccessPolicy, recorded against the service): for malformed
// XML, a wrong root element, a SignedIdentifier without Id, more than five identifiers, an
// empty, over-long or duplicate Id, a permission outside "raud" (or repeated), or an
// unparseable Start/Expiry.
func ParseACL(body []byte) ([]SignedIdentifier, error) {
	if isBlank(body) {
		return nil, nil
	}
	var doc xmlSignedIdentifiers
	if err := decodeDoc(body, &doc, "SignedIdentifiers"); err != nil {
		return nil, err
	}
	if len(doc.Items) > MaxSignedIdentifiers {
		return nil, errDoc("At most 5 SignedIdentifier elements are allowed.")
	}
	out := make([]SignedIdentifier, 0, len(doc.Items))
	for _, it := range doc.Items {
		if it.ID == nil {
			return nil, errDoc("Element Id is required in a SignedIdentifier.")
		}
		id := strings.TrimSpace(*it.ID)
		if id == "" || len([]rune(id)) > MaxIDLength {
			return nil, errNode("Id", id)
		}
		for _, prev := range out {
			if prev.ID == id {
				return nil, errNode("Id", id)
			}
		}
		si := SignedIdentifier{ID: id}
		if ap := it.AccessPolicy; ap != nil {
			var err error
			if si.Start, err = parseACLTime("Start", ap.Start); err != nil {
				return nil, err
			}
			if si.Expiry, err = parseACLTime("Expiry", ap.Expiry); err != nil {
				return nil, err
			}
			if ap.Permission != nil {
				p := strings.TrimSpace(*ap.Permission)
				if !ValidPermission(p) {
					return nil, errNode("Permission", p)
				}
				si.Permission = p
			}
		}
		out = append(out, si)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

func parseACLTime(node string, s *string) (*time.Time, error) {
	if s == nil || strings.TrimSpace(*s) == "" {
		return nil, nil
	}
	t, ok := ParseTime(*s)
	if !ok {
		return nil, errNode(node, strings.TrimSpace(*s))
	}
	return &t, nil
}

// ValidPermission reports whether p is a valid stored-policy permission string: letters
// from "raud" only, any order, none repeated (the empty string is valid: no permissions).
func ValidPermission(p string) bool {
	var seen [4]bool
	for i := 0; i < len(p); i++ {
		k := strings.IndexByte(aclPermissionLetters, p[i])
		if k < 0 || seen[k] {
			return false
		}
		seen[k] = true
	}
	return true
}

// AppendACL appends the Get Table ACL response body for ids: the XML declaration, then
// <SignedIdentifiers>…</SignedIdentifiers>, or <SignedIdentifiers /> when there are none.
// Times use seven fraction digits; absent Start/Expiry/Permission are omitted.
func AppendACL(dst []byte, ids []SignedIdentifier) []byte {
	dst = append(dst, xmlHeader...)
	if len(ids) == 0 {
		return append(dst, "<SignedIdentifiers />"...)
	}
	dst = append(dst, "<SignedIdentifiers>"...)
	for _, si := range ids {
		dst = append(dst, "<SignedIdentifier>"...)
		dst = appendElem(dst, "Id", si.ID)
		dst = append(dst, "<AccessPolicy>"...)
		if si.Start != nil {
			dst = appendElem(dst, "Start", FormatTime(*si.Start))
		}
		if si.Expiry != nil {
			dst = appendElem(dst, "Expiry", FormatTime(*si.Expiry))
		}
		if si.Permission != "" {
			dst = appendElem(dst, "Permission", si.Permission)
		}
		dst = append(dst, "</AccessPolicy></SignedIdentifier>"...)
	}
	return append(dst, "</SignedIdentifiers>"...)
}

// Lookup returns the identifier with the given Id (case-sensitive, as the service compares
// si= values) and whether it exists.
func Lookup(ids []SignedIdentifier, id string) (SignedIdentifier, bool) {
	for _, si := range ids {
		if si.ID == id {
			return si, true
		}
	}
	return SignedIdentifier{}, false
}

// aclRecord is the persisted form of one identifier.
type aclRecord struct {
	ID         string     `json:"id"`
	Start      *time.Time `json:"st,omitempty"`
	Expiry     *time.Time `json:"se,omitempty"`
	Permission string     `json:"sp,omitempty"`
}

type aclEnvelope struct {
	V   int         `json:"v"`
	IDs []aclRecord `json:"ids"`
}

// MarshalACL encodes ids for persistence (versioned JSON). A nil or empty list encodes to
// nil, which UnmarshalACL reads back as no policies.
func MarshalACL(ids []SignedIdentifier) []byte {
	if len(ids) == 0 {
		return nil
	}
	env := aclEnvelope{V: 1, IDs: make([]aclRecord, len(ids))}
	for i, si := range ids {
		env.IDs[i] = aclRecord{ID: si.ID, Start: utcPtr(si.Start), Expiry: utcPtr(si.Expiry), Permission: si.Permission}
	}
	b, err := json.Marshal(env)
	if err != nil {
		panic("svcprops: marshal ACL: " + err.Error()) // cannot happen: plain strings and times
	}
	return b
}

// UnmarshalACL decodes what MarshalACL produced; empty input means no policies. A corrupt
// record is an InternalError.
func UnmarshalACL(b []byte) ([]SignedIdentifier, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var env aclEnvelope
	if err := json.Unmarshal(b, &env); err != nil || env.V != 1 {
		return nil, azerr.New(azerr.InternalError).WithDetail("corrupt stored access policy record")
	}
	if len(env.IDs) == 0 {
		return nil, nil
	}
	out := make([]SignedIdentifier, len(env.IDs))
	for i, r := range env.IDs {
		out[i] = SignedIdentifier{ID: r.ID, Start: utcPtr(r.Start), Expiry: utcPtr(r.Expiry), Permission: r.Permission}
	}
	return out, nil
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
