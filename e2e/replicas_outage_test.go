package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/pgtest"
)

// TestReplicaWrongDatabaseRefused (issue 44): `cerulean serve` with a replica URL that
// names the right standby but the wrong database (/postgres instead of the Cerulean
// database) does not start, and says which replica, which database and what is wrong.
func TestReplicaWrongDatabaseRefused(t *testing.T) {
	primary := postgresURL(t)
	prompt, _, promptSrc, _, _ := sharedReplicas(t)
	wrong, err := pgtest.DatabaseURL(prompt, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cerulean(t, nil, "serve", "--engine", "postgres", "--postgres-url", primary, "--postgres-replica-url", wrong,
		"--addr", fmt.Sprintf("127.0.0.1:%d", port), "--data", t.TempDir())
	if err == nil {
		t.Fatalf("cerulean serve started with a wrong-database replica URL:\n%s", out)
	}
	for _, want := range []string{strings.TrimPrefix(promptSrc, "replica "), `database "postgres"`, "no Cerulean schema", "another database"} {
		if !strings.Contains(out, want) {
			t.Errorf("the start-up error does not say %q:\n%s", want, out)
		}
	}
	t.Logf("refused (%v):\n%s", err, out)
}
