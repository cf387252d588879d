package e2e

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/ceruleandb/cerulean/client"
)

// TestUniqueIndexFrontEnds: three front ends on one PostgreSQL database, an elastic table
// with a unique index on Email; in each of 30 rounds, 9 inserts of one new Email on
// distinct keys, three through each front end at once: exactly one succeeds, the others
// answer 409 UniqueIndexViolation, and the table then holds exactly one entity of that
// Email. PostgreSQL's unique index decides; no front end's memory does.
func TestUniqueIndexFrontEnds(t *testing.T) {
	srvs := startPostgresServers(t, 3)
	c := bulkClient(t, srvs[0])
	name := tableName(t)
	if err := c.CreateTable(ctx(t), name, &client.TableSettings{Elastic: true,
		Indexes: []client.Index{{Name: "ByEmail", Properties: []string{"Email"}, Unique: true}}}); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	tcs := make([]*aztables.Client, len(srvs))
	for i, s := range srvs {
		tcs[i] = newServiceClient(t, s).NewClient(name)
	}
	for round := range 30 {
		email := fmt.Sprintf("user%d@example.com", round)
		var wg sync.WaitGroup
		errs := make([]error, 9)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = tcs[i%len(tcs)].AddEntity(ctx(t), marshal(t, map[string]any{
					"PartitionKey": fmt.Sprintf("p%d", i), "RowKey": fmt.Sprintf("r%d", round), "Email": email}), nil)
			})
		}
		wg.Wait()
		ok := 0
		for i, err := range errs {
			if err == nil {
				ok++
				continue
			}
			var re *azcore.ResponseError
			if !errors.As(err, &re) || re.StatusCode != 409 || re.ErrorCode != "UniqueIndexViolation" {
				t.Fatalf("round %d insert %d: %v", round, i, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d inserts of one unique value succeeded", round, ok)
		}
		got := listAll(t, tcs[0], &aztables.ListEntitiesOptions{Filter: ptr(fmt.Sprintf("Email eq '%s'", email))})
		if len(got) != 1 {
			t.Fatalf("round %d: %d entities hold the value", round, len(got))
		}
	}
}
