package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/postgres"
)

// Read replicas and read consistency on the command line (docs/postgres.md, "Read replicas").

// replicaURLs is --postgres-replica-url: repeatable, each occurrence one or more URLs
// (splitReplicaURLs). The environment's list is the default; the first flag given
// replaces it rather than adding to it, as every other flag replaces its variable.
type replicaURLs struct {
	urls []string
	set  bool
}

func (r *replicaURLs) String() string {
	if r == nil {
		return ""
	}
	return strings.Join(redactAll(r.urls), " ")
}

func (r *replicaURLs) Set(v string) error {
	if !r.set {
		r.urls, r.set = nil, true
	}
	urls, err := splitReplicaURLs(v)
	if err != nil {
		return err
	}
	r.urls = append(r.urls, urls...)
	return nil
}

// splitReplicaURLs reads a list of PostgreSQL connection URLs separated by whitespace or
// by commas. A comma separates two URLs only where the text after it starts a URL
// (postgres:// or postgresql://, in any case): a multi-host URL has commas of its own
// (postgres://h1:5432,h2:5432/db). Empty items are ignored; an item that is not such a
// URL is an error naming it (without its password). Key=value DSNs, which hold spaces,
// cannot be listed: give replicas as URLs.
func splitReplicaURLs(s string) ([]string, error) {
	var out []string
	for _, field := range strings.Fields(s) {
		start := 0
		for i := 0; i < len(field); i++ {
			if field[i] == ',' && startsURL(field[i+1:]) {
				out = appendURL(out, field[start:i])
				start = i + 1
			}
		}
		out = appendURL(out, field[start:])
	}
	for _, u := range out {
		if !startsURL(u) {
			return nil, fmt.Errorf("%q is not a postgres:// or postgresql:// URL", redact(u))
		}
	}
	return out, nil
}

// appendURL appends item without the commas around it, unless that leaves nothing.
func appendURL(out []string, item string) []string {
	if item = strings.Trim(item, ","); item != "" {
		out = append(out, item)
	}
	return out
}

func startsURL(s string) bool {
	for _, p := range [...]string{"postgres://", "postgresql://"} {
		if len(s) >= len(p) && strings.EqualFold(s[:len(p)], p) {
			return true
		}
	}
	return false
}

// redact is a URL without its password, for messages and logs.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		if err != nil && strings.Contains(s, "@") {
			return "(unparsable URL)"
		}
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

func redactAll(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = redact(u)
	}
	return out
}

// parseConsistency reads --read-consistency: one of the five level names, exactly.
func parseConsistency(s string) (storage.Consistency, error) {
	c, ok := storage.ParseConsistency(s)
	if !ok {
		return 0, fmt.Errorf("--read-consistency %q: want Strong, BoundedStaleness, Session, ConsistentPrefix or Eventual (exact names, as in x-ms-consistency-level)", s)
	}
	return c, nil
}

// replicaReporter is an engine that reports its replicas (postgres).
type replicaReporter interface {
	Replicas() []postgres.ReplicaStatus
}

// replicasHandler serves /debug/replicas: a JSON array of the engine's replicas'
// states (postgres.ReplicaStatus), [] for an engine without replicas.
func replicasHandler(eng storage.Engine) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		list := []postgres.ReplicaStatus{}
		if r, ok := eng.(replicaReporter); ok {
			if l := r.Replicas(); l != nil {
				list = l
			}
		}
		b, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(b, '\n'))
	}
}
