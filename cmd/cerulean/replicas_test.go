package main

import (
	"errors"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

func TestSplitReplicaURLs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{" \t\n", nil},
		{",", nil},
		{"postgres://r1/db", []string{"postgres://r1/db"}},
		{"postgres://r1/db postgres://r2/db", []string{"postgres://r1/db", "postgres://r2/db"}},
		{"postgres://r1/db\n\tpostgresql://r2/db", []string{"postgres://r1/db", "postgresql://r2/db"}},
		{"postgres://r1/db,postgres://r2/db", []string{"postgres://r1/db", "postgres://r2/db"}},
		{"postgres://r1/db, postgres://r2/db", []string{"postgres://r1/db", "postgres://r2/db"}},
		{"postgres://r1/db ,postgres://r2/db,", []string{"postgres://r1/db", "postgres://r2/db"}},
		{",,postgres://r1/db,,postgres://r2/db,,", []string{"postgres://r1/db", "postgres://r2/db"}},
		// Multi-host URLs keep their commas.
		{"postgres://h1,h2/db", []string{"postgres://h1,h2/db"}},
		{"postgres://u:p@h1:5432,h2:5433/db?target_session_attrs=any,postgresql://h3/db",
			[]string{"postgres://u:p@h1:5432,h2:5433/db?target_session_attrs=any", "postgresql://h3/db"}},
		{"POSTGRES://h1,h2/db,PostgreSQL://h3/db", []string{"POSTGRES://h1,h2/db", "PostgreSQL://h3/db"}},
		{"postgres://h1/db?options=a,b postgres://h2/db", []string{"postgres://h1/db?options=a,b", "postgres://h2/db"}},
	} {
		got, err := splitReplicaURLs(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("splitReplicaURLs(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"r1:5432", "host=r1 dbname=x", "postgres://r1/db mysql://r2/db", "http://r1/db"} {
		if got, err := splitReplicaURLs(in); err == nil {
			t.Errorf("splitReplicaURLs(%q) = %q, want an error", in, got)
		}
	}
	// Errors never show a password.
	if _, err := splitReplicaURLs("postgres://r1/db mysql://u:secret@r2/db"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("error %v shows the password", err)
	}
}

func TestParseServeReplicas(t *testing.T) {
	var ue usageError
	// Defaults.
	o, err := parseServe(nil)
	if err != nil || o.consistency != storage.Strong || o.maxStaleness != 5*time.Second || o.replicaMaxLag != 30*time.Second || len(o.replicas.urls) != 0 {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
	// The environment, with the postgres engine.
	t.Setenv("CERULEAN_ENGINE", "postgres")
	t.Setenv("CERULEAN_POSTGRES_URL", "postgres://primary/db")
	t.Setenv("CERULEAN_POSTGRES_REPLICA_URLS", "postgres://r1/db,postgres://h1,h2/db postgresql://r3/db")
	t.Setenv("CERULEAN_READ_CONSISTENCY", "Session")
	t.Setenv("CERULEAN_MAX_STALENESS", "2s")
	t.Setenv("CERULEAN_REPLICA_MAX_LAG", "1m")
	o, err = parseServe(nil)
	if err != nil || !slices.Equal(o.replicas.urls, []string{"postgres://r1/db", "postgres://h1,h2/db", "postgresql://r3/db"}) ||
		o.consistency != storage.Session || o.maxStaleness != 2*time.Second || o.replicaMaxLag != time.Minute {
		t.Fatalf("from the environment: %q %v %v %v, %v", o.replicas.urls, o.consistency, o.maxStaleness, o.replicaMaxLag, err)
	}
	// Flags replace the environment; the replica flag repeats.
	o, err = parseServe([]string{"--postgres-replica-url", "postgres://a/db", "--postgres-replica-url", "postgres://b/db,postgres://c/db",
		"--read-consistency", "BoundedStaleness", "--max-staleness", "500ms"})
	if err != nil || !slices.Equal(o.replicas.urls, []string{"postgres://a/db", "postgres://b/db", "postgres://c/db"}) ||
		o.consistency != storage.BoundedStaleness || o.maxStaleness != 500*time.Millisecond {
		t.Fatalf("flags: %q %v %v, %v", o.replicas.urls, o.consistency, o.maxStaleness, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--read-consistency", "strong"}, `--read-consistency "strong": want Strong, BoundedStaleness`},
		{[]string{"--read-consistency", ""}, `--read-consistency "": want`},
		{[]string{"--postgres-replica-url", "r1:5432"}, `invalid value "r1:5432" for flag -postgres-replica-url: "r1:5432" is not a postgres:// or postgresql:// URL`},
		{[]string{"--max-staleness", "0s"}, "--max-staleness must be positive"},
		{[]string{"--replica-max-lag", "-1s"}, "--replica-max-lag must be positive"},
	} {
		if _, err := parseServe(tc.args); !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
	t.Setenv("CERULEAN_READ_CONSISTENCY", "eventual")
	if _, err := parseServe(nil); !errors.As(err, &ue) || !strings.Contains(err.Error(), `--read-consistency "eventual"`) {
		t.Errorf("bad CERULEAN_READ_CONSISTENCY: %v", err)
	}
	t.Setenv("CERULEAN_READ_CONSISTENCY", "Eventual")
	t.Setenv("CERULEAN_POSTGRES_REPLICA_URLS", "postgres://r1/db mysql://u:pw@r2/db")
	if _, err := parseServe(nil); !errors.As(err, &ue) || !strings.Contains(err.Error(), "CERULEAN_POSTGRES_REPLICA_URLS") || strings.Contains(err.Error(), ":pw@") {
		t.Errorf("bad CERULEAN_POSTGRES_REPLICA_URLS: %v", err)
	}

	// With the pebble engine every replica setting is refused, by name; the read
	// consistency is not (pebble serves every level).
	t.Setenv("CERULEAN_ENGINE", "pebble")
	for _, k := range []string{"CERULEAN_POSTGRES_REPLICA_URLS", "CERULEAN_MAX_STALENESS", "CERULEAN_REPLICA_MAX_LAG"} {
		unsetenv(t, k)
	}
	if o, err := parseServe(nil); err != nil || o.consistency != storage.Eventual {
		t.Fatalf("pebble with a read consistency: %v, %v", o.consistency, err)
	}
	for _, tc := range []struct {
		args []string
		env  [2]string
		want string
	}{
		{[]string{"--postgres-replica-url", "postgres://r1/db"}, [2]string{}, "--postgres-replica-url: read replicas need --engine postgres"},
		{[]string{"--max-staleness", "1s", "--replica-max-lag", "1m"}, [2]string{}, "--max-staleness, --replica-max-lag: read replicas need --engine postgres"},
		{nil, [2]string{"CERULEAN_POSTGRES_REPLICA_URLS", "postgres://r1/db"}, "CERULEAN_POSTGRES_REPLICA_URLS: read replicas need --engine postgres"},
		{nil, [2]string{"CERULEAN_REPLICA_MAX_LAG", "1m"}, "CERULEAN_REPLICA_MAX_LAG: read replicas need --engine postgres"},
	} {
		if tc.env[0] != "" {
			t.Setenv(tc.env[0], tc.env[1])
		}
		if _, err := parseServe(tc.args); !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pebble with %q %q: %v, want %q", tc.args, tc.env, err, tc.want)
		}
		if tc.env[0] != "" {
			unsetenv(t, tc.env[0])
		}
	}
}

// TestDebugReplicasPebble: /debug/replicas answers an empty JSON array on an engine
// without replicas.
func TestDebugReplicasPebble(t *testing.T) {
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	rec := httptest.NewRecorder()
	replicasHandler(eng)(rec, httptest.NewRequest("GET", "/debug/replicas", nil))
	if rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != "[]" || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("/debug/replicas on pebble: %d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
	}
}

// unsetenv removes an environment variable for the rest of the test (t.Setenv restores
// it after).
func unsetenv(t *testing.T, name string) {
	t.Helper()
	t.Setenv(name, "")
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}
