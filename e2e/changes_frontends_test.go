package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/ceruleandb/cerulean/client"
)

// TestChangeFeedFrontEnds: the crash run on PostgreSQL with three front ends sharing the
// database and a read replica. Writers write through all three; the reader from the
// beginning reads through the first front end, the one from "now" through the second,
// and the one from a continuation through the third at Eventual consistency, so a replica
// serves it; the second front end is killed with SIGKILL and restarted, then the third.
// Each reader's sequence is the committed history, as in TestChangeFeedCrash, and the
// third reader's pages came from the replica.
func TestChangeFeedFrontEnds(t *testing.T) {
	url := postgresURL(t)
	prompt, _, promptSrc, _, _ := sharedReplicas(t)
	acct := account{"feedfe" + runID, devKey} // one account on every front end, this test's own
	fes := make([]*server, 3)
	for i := range fes {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		fes[i] = startServer(t, withAccounts(acct), withPort(port), withArgs("--engine", "postgres", "--postgres-url", url,
			"--postgres-replica-url", prompt, "--expiry-interval", "500ms"))
	}
	var writers []*aztables.Client
	var bulks []*client.Client
	name := feedCrashTable(t, bulkClient(t, fes[0]))
	for _, fe := range fes {
		writers = append(writers, newServiceClient(t, fe).NewClient(name))
		bulks = append(bulks, bulkClient(t, fe))
	}
	sources := runFeedCrash(t, feedCrashSetup{
		table: name, writers: writers, bulks: bulks,
		readers: [3]*client.Client{bulkClient(t, fes[0]), bulkClient(t, fes[1]), bulkClient(t, fes[2])},
		headers: [3]http.Header{nil, nil, {"x-ms-consistency-level": {"Eventual"}}},
		crash: func(phase int) {
			fe := fes[1+phase]
			fe.kill()
			fe.restart(t)
		},
	})
	replica := 0
	for src, n := range sources[2] {
		if strings.HasPrefix(src, "replica") {
			replica += n
		}
	}
	if replica == 0 {
		t.Errorf("the third reader read no page from the replica (%s): %v", promptSrc, sources[2])
	}
}
