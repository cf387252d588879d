package server

import (
	"strings"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

// Kind is the family of operation a URL addresses (docs/protocol.md §1.1).
type Kind uint8

// Resource kinds, after the account segment.
const (
	KindService  Kind = iota + 1 // "" or "/": service properties and stats
	KindTables                   // "Tables" or "Tables()"
	KindTable                    // "Tables('name')"
	KindBatch                    // "$batch"
	KindEntities                 // "name" or "name()"
	KindEntity                   // "name(PartitionKey='pk',RowKey='rk')"
)

// Resource is a parsed resource path.
type Resource struct {
	Kind         Kind
	Table        string
	PartitionKey string
	RowKey       string
}

// ParseResource parses the part of a decoded URL path that follows the account, e.g.
// "mytable(PartitionKey='a”b',RowKey=”)". The path must already be percent-decoded
// exactly once; inside the parentheses, keys are OData string literals (” is a quote).
// Either key order and spaces around the comma and '=' are accepted.
func ParseResource(p string) (Resource, error) {
	p = strings.TrimPrefix(p, "/")
	p = strings.TrimSuffix(p, "/")
	switch {
	case p == "":
		return Resource{Kind: KindService}, nil
	case p == "$batch":
		return Resource{Kind: KindBatch}, nil
	}
	name, args, hasParen := strings.Cut(p, "(")
	if hasParen {
		if !strings.HasSuffix(args, ")") {
			return Resource{}, badURI()
		}
		args = args[:len(args)-1]
	}
	if name == "" || strings.ContainsAny(name, "/()'") {
		return Resource{}, badURI()
	}
	if strings.EqualFold(name, "Tables") {
		if !hasParen || strings.TrimSpace(args) == "" {
			return Resource{Kind: KindTables}, nil
		}
		tn, rest, err := parseLiteral(strings.TrimSpace(args))
		if err != nil || strings.TrimSpace(rest) != "" {
			return Resource{}, badURI()
		}
		return Resource{Kind: KindTable, Table: tn}, nil
	}
	if !hasParen || strings.TrimSpace(args) == "" {
		return Resource{Kind: KindEntities, Table: name}, nil
	}
	pk, rk, err := parseKeyPredicate(args)
	if err != nil {
		return Resource{}, err
	}
	return Resource{Kind: KindEntity, Table: name, PartitionKey: pk, RowKey: rk}, nil
}

func badURI() error { return azerr.New(azerr.InvalidURI) }

func badKey() error {
	return azerr.Newf(azerr.InvalidInput, "The key predicate in the request URI is not valid.")
}

// parseKeyPredicate parses "PartitionKey='a',RowKey='b'" in either order.
func parseKeyPredicate(s string) (pk, rk string, err error) {
	var havePK, haveRK bool
	for i := 0; i < 2; i++ {
		s = strings.TrimLeft(s, " ")
		name, rest, ok := strings.Cut(s, "=")
		if !ok {
			return "", "", badKey()
		}
		name = strings.TrimSpace(name)
		val, rest, err := parseLiteral(strings.TrimLeft(rest, " "))
		if err != nil {
			return "", "", err
		}
		switch {
		case name == "PartitionKey" && !havePK:
			pk, havePK = val, true
		case name == "RowKey" && !haveRK:
			rk, haveRK = val, true
		default:
			return "", "", badKey()
		}
		rest = strings.TrimLeft(rest, " ")
		if i == 0 {
			if !strings.HasPrefix(rest, ",") {
				return "", "", badKey()
			}
			rest = rest[1:]
		} else if rest != "" {
			return "", "", badKey()
		}
		s = rest
	}
	return pk, rk, nil
}

// parseLiteral reads an OData string literal at the start of s: a quote, characters with
// ” standing for ', and a closing quote. It returns the value and what follows.
func parseLiteral(s string) (string, string, error) {
	if !strings.HasPrefix(s, "'") {
		return "", "", badKey()
	}
	// Most keys hold no quote: the value is then a substring of s.
	if i := strings.IndexByte(s[1:], '\''); i >= 0 && !strings.HasPrefix(s[i+2:], "'") {
		return s[1 : i+1], s[i+2:], nil
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		if s[i] != '\'' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '\'' {
			b.WriteByte('\'')
			i++
			continue
		}
		return b.String(), s[i+1:], nil
	}
	return "", "", badKey()
}
