package transfer

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ceruleandb/cerulean/client"
)

// Copy reads a table over several PartitionKey ranges at once. The service says nothing
// of its key distribution, so the split points are found by skip-scanning: a one-entity
// query "PartitionKey ge 'X'" returns the next partition at or after X, so the distinct
// prefixes of the partition keys can be listed one query each, deepening the prefix
// until there are a few per range. Ranges hold about the same number of prefixes; the
// split is a guess about sizes, never about correctness: the ranges [b₀, b₁), [b₁, b₂), …
// cover the whole key space whatever the guess.
//
// Split points are ASCII only. ASCII strings compare the same way in every ordering a
// service may use for keys (UTF-8 bytes, code points, UTF-16 units), so the ranges are
// disjoint and complete on Azure, Azurite and Cerulean alike.

const (
	// maxProbes bounds the one-entity queries spent finding split points per depth.
	maxProbes = 64
	// maxDepth bounds the prefix length tried.
	maxDepth = 12
)

// splitPoints returns up to n-1 increasing ASCII boundaries for table's partition keys
// (none when the table is empty or has too few distinct prefixes to split).
func splitPoints(ctx context.Context, src *client.Client, table string, n int, retry Retry) ([]string, error) {
	if n <= 1 {
		return nil, nil
	}
	var best []string
	for depth := 1; depth <= maxDepth; depth++ {
		pre, complete, err := distinctPrefixes(ctx, src, table, depth, retry)
		if err != nil {
			return nil, err
		}
		if len(pre) > len(best) {
			best = pre
		}
		if !complete || len(pre) >= 4*n {
			break
		}
	}
	if len(best) < 2 {
		return nil, nil
	}
	if n > len(best) {
		n = len(best)
	}
	var out []string
	for i := 1; i < n; i++ {
		b := best[i*len(best)/n]
		if b != "" && (len(out) == 0 || out[len(out)-1] < b) {
			out = append(out, b)
		}
	}
	return out, nil
}

// distinctPrefixes lists the distinct ASCII prefixes (of at most depth characters) of the
// table's partition keys, in order; complete is false when maxProbes ran out first.
func distinctPrefixes(ctx context.Context, src *client.Client, table string, depth int, retry Retry) (out []string, complete bool, err error) {
	lo := ""
	for range maxProbes {
		pk, ok, err := firstKeyFrom(ctx, src, table, lo, retry)
		if err != nil {
			return nil, false, err
		}
		if !ok {
			return out, true, nil
		}
		pre := asciiPrefix(pk, depth)
		if pre == "" {
			if pk != "" {
				return out, true, nil // a non-ASCII first character: no ASCII boundary above it
			}
			lo = " " // the empty key; keys of control characters are not sampled (still copied)
			continue
		}
		out = append(out, pre)
		next, ok := successor(pre)
		if !ok {
			return out, true, nil
		}
		lo = next
	}
	return out, false, nil
}

// firstKeyFrom is the first PartitionKey at or after lo.
func firstKeyFrom(ctx context.Context, src *client.Client, table, lo string, retry Retry) (string, bool, error) {
	q := client.Query{Select: "PartitionKey", Top: 1}
	if lo != "" {
		q.Filter = "PartitionKey ge " + literal(lo)
	}
	for pages := 0; pages < 100; pages++ {
		var page *client.Page
		err := retry.do(ctx, func(int) error {
			var err error
			page, err = src.QueryEntities(ctx, table, q)
			return err
		}, nil)
		if err != nil {
			return "", false, fmt.Errorf("split table %s: %w", table, err)
		}
		if len(page.Entities) > 0 {
			var e struct{ PartitionKey string }
			if err := json.Unmarshal(page.Entities[0], &e); err != nil {
				return "", false, fmt.Errorf("split table %s: %w", table, err)
			}
			return e.PartitionKey, true, nil
		}
		if page.Next.Done() {
			return "", false, nil
		}
		q.Continuation = page.Next // an empty page with a continuation: go on
	}
	return "", false, nil
}

// asciiPrefix is the longest prefix of s of at most depth characters, all printable
// ASCII.
func asciiPrefix(s string, depth int) string {
	i := 0
	for i < len(s) && i < depth && s[i] >= 0x20 && s[i] < 0x7f {
		i++
	}
	return s[:i]
}

// successor is the least printable-ASCII string greater than every string starting with
// p (p's last character incremented, dropping those that cannot be); false when none.
func successor(p string) (string, bool) {
	b := []byte(p)
	for len(b) > 0 {
		if c := b[len(b)-1]; c < 0x7e {
			b[len(b)-1] = c + 1
			return string(b), true
		}
		b = b[:len(b)-1]
	}
	return "", false
}

// literal is an OData string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// rangeFilter is the user's filter restricted to [lo, hi) ("" for unbounded ends).
func rangeFilter(filter, lo, hi string) string {
	var parts []string
	if filter != "" {
		parts = append(parts, "("+filter+")")
	}
	if lo != "" {
		parts = append(parts, "PartitionKey ge "+literal(lo))
	}
	if hi != "" {
		parts = append(parts, "PartitionKey lt "+literal(hi))
	}
	return strings.Join(parts, " and ")
}
