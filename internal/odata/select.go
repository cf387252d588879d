package odata

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
)

// MaxSelect is the most items a $select list may have. No entity has more than 255
// properties (PartitionKey, RowKey, Timestamp and 252 others), so a longer list can only
// name properties that no entity has; each of them would be written as null on every
// entity of every page, which is how a read-only caller could make a page cost minutes
// and tens of megabytes.
const MaxSelect = entity.MaxProperties + 3

// ParseSelect parses a $select list: property names separated by commas, with blanks
// around each name ignored (the Go SDK documents "PartitionKey, RowKey"). It returns nil,
// meaning every property, for an empty or all-blank list (Storage Explorer sends
// "$select=") and for a list containing "*". A name given twice is returned once, in the
// position of its first occurrence. An empty item or an invalid name is a 400
// InvalidInput whose Detail names it. A list of more than MaxSelect items is a 400
// InvalidQueryParameterValue (the code Cerulean gives any query parameter whose value is
// out of range, as for $top), refused before any item is looked at.
//
// System properties may be selected like any other; what a selection of an absent
// property returns (null on the service) is the caller's concern.
func ParseSelect(s string) ([]string, error) {
	if strings.Trim(s, " \t") == "" {
		return nil, nil
	}
	if n := strings.Count(s, ",") + 1; n > MaxSelect {
		return nil, azerr.New(azerr.InvalidQueryParameterValue).WithDetail(
			fmt.Sprintf("$select lists %d items; an entity has at most %d properties, so at most %d may be selected", n, MaxSelect, MaxSelect))
	}
	var names []string
	seen := make(map[string]struct{}, min(strings.Count(s, ",")+1, MaxSelect))
	star := false
	for i, item := range strings.Split(s, ",") {
		name := strings.Trim(item, " \t")
		switch {
		case name == "*":
			star = true
			continue
		case name == "":
			return nil, selectError("item %d of $select is empty", i+1)
		case !isIdent(name):
			return nil, selectError("%q is not a valid property name", name)
		case utf8.RuneCountInString(name) > entity.MaxPropertyNameLen:
			return nil, selectError("property name %.20q… is longer than %d characters", name, entity.MaxPropertyNameLen)
		}
		if _, dup := seen[name]; !dup {
			seen[name] = struct{}{}
			names = append(names, name)
		}
	}
	if star {
		return nil, nil
	}
	return names, nil
}

func selectError(format string, args ...any) *azerr.Error {
	return azerr.New(azerr.InvalidInput).WithDetail("$select: " + fmt.Sprintf(format, args...))
}
