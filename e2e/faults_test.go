package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// faultsServer starts a server with --faults spec (seeded), at debug level, with /metrics.
func faultsServer(t *testing.T, args ...string) (*server, string) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args = append(args, "--debug-addr", addr, "--log-level", "debug")
	return startServer(t, withArgs(args...)), addr
}

func entityJSON(t *testing.T, pk, rk string, props map[string]any) []byte {
	t.Helper()
	b, err := aztables.EDMEntity{Entity: aztables.Entity{PartitionKey: pk, RowKey: rk}, Properties: props}.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func isCode(err error, status int, code string) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == status && re.ErrorCode == code
}

// TestResetAfterApplyExposesNonIdempotentWrites: with 5% of requests applied and then
// answered by a closed connection (--faults *:reset-after:5%), through the Go SDK and its
// default retry policy,
//   - an application written idempotently — insert-or-replace for its rows, and a counter
//     bumped by read, then update with If-Match, recording the operation's id so that a
//     412 on retry is checked against the stored entity — ends in exactly the right
//     state;
//   - an application using plain inserts sees 409 EntityAlreadyExists on the retries of
//     inserts that had happened: the bug the mode exists to expose.
func TestResetAfterApplyExposesNonIdempotentWrites(t *testing.T) {
	srv, debug := faultsServer(t, "--faults", "*:reset-after:5%", "--faults-seed", "16")
	svc := newServiceClient(t, srv)
	_, name := newTable(t, svc) // no retries in this client: it may be reset, and it is seeded to not be
	var c pipelineCounts
	tc := retryingTable(t, srv, name, &c)
	const rows, bumps = 100, 60

	// The idempotent application.
	for i := range rows {
		if _, err := tc.UpsertEntity(ctx(t), entityJSON(t, "orders", fmt.Sprintf("%04d", i), map[string]any{"Status": "new"}), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace}); err != nil {
			t.Fatalf("upsert %d: %v", i, err)
		}
	}
	if _, err := tc.UpsertEntity(ctx(t), entityJSON(t, "counter", "c", map[string]any{"N": int32(0), "LastOp": ""}), nil); err != nil {
		t.Fatal(err)
	}
	recovered := 0 // bumps whose retry got 412 because the first try had applied
	for op := 1; op <= bumps; op++ {
		opID := fmt.Sprint("op-", op)
		for attempt := 0; ; attempt++ {
			if attempt > 20 {
				t.Fatalf("bump %d: no progress", op)
			}
			got, err := tc.GetEntity(ctx(t), "counter", "c", nil)
			if err != nil {
				t.Fatalf("bump %d: get: %v", op, err)
			}
			e := decodeEDM(t, got.Value)
			if e.Properties["LastOp"] == opID {
				recovered++ // the update happened; the answer was lost
				break
			}
			n := e.Properties["N"].(int32)
			_, err = tc.UpdateEntity(ctx(t), entityJSON(t, "counter", "c", map[string]any{"N": n + 1, "LastOp": opID}),
				&aztables.UpdateEntityOptions{IfMatch: to.Ptr(got.ETag), UpdateMode: aztables.UpdateModeReplace})
			if err == nil {
				break
			}
			if !isCode(err, http.StatusPreconditionFailed, "UpdateConditionNotSatisfied") {
				t.Fatalf("bump %d: %v", op, err)
			}
		}
	}
	got, err := tc.GetEntity(ctx(t), "counter", "c", nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := decodeEDM(t, got.Value).Properties["N"]; n != int32(bumps) {
		t.Fatalf("idempotent counter: N = %v after %d bumps", n, bumps)
	}
	if all := listAll(t, tc, &aztables.ListEntitiesOptions{Filter: to.Ptr("PartitionKey eq 'orders'")}); len(all) != rows {
		t.Fatalf("idempotent rows: %d of %d", len(all), rows)
	}
	resetsIdempotent := c.transport.Load()
	t.Logf("idempotent application: %d resets retried, %d bumps recovered by their operation id", resetsIdempotent, recovered)
	if resetsIdempotent == 0 || recovered == 0 {
		t.Fatalf("the idempotent application met %d resets and recovered %d bumps: the mode did not exercise it", resetsIdempotent, recovered)
	}

	// The plain-insert application.
	var conflicts []string
	for i := range rows {
		rk := fmt.Sprintf("%04d", i)
		_, err := tc.AddEntity(ctx(t), entityJSON(t, "plain", rk, map[string]any{"Status": "new"}), nil)
		switch {
		case err == nil:
		case isCode(err, http.StatusConflict, "EntityAlreadyExists"):
			conflicts = append(conflicts, rk)
		default:
			t.Fatalf("insert %s: %v", rk, err)
		}
	}
	t.Logf("plain inserts: %d resets, 409 EntityAlreadyExists for %v", c.transport.Load()-resetsIdempotent, conflicts)
	if len(conflicts) == 0 {
		t.Fatal("no plain insert saw 409 on its retry: reset-after did not expose the non-idempotent write")
	}
	for _, rk := range conflicts { // each 409 is the application's own write, applied before the reset
		if _, err := tc.GetEntity(ctx(t), "plain", rk, nil); err != nil {
			t.Fatalf("insert %s answered 409 but the entity is not there: %v", rk, err)
		}
	}

	// Counted and logged.
	m := scrape(t, debug)
	if v := m[`cerulean_faults_injected_total{fault="reset-after"}`]; v < float64(c.transport.Load()) {
		t.Fatalf("cerulean_faults_injected_total{fault=\"reset-after\"} = %v, the SDK saw %d resets", v, c.transport.Load())
	}
	if !strings.Contains(srv.logs.Tail(1<<20), `msg="fault injected" fault=reset-after`) {
		t.Fatal("no debug line for an injected fault")
	}
}

// TestFaultKindsThroughSDK: injected 503s, 500s and timeouts are retried by the SDK's
// default policy; a write reset before it runs is retried (insert-or-merge: reset-before); a query whose pages are cut
// short (every page, at a random entity, possibly before the first) still yields every
// entity once, in order, over more pages; and a deleted table's
// name is taken for --table-delete-delay.
func TestFaultKindsThroughSDK(t *testing.T) {
	srv, debug := faultsServer(t, "--faults", "insert:503:10%,insert:500:10%,insert:timeout:10%,insertormerge:reset-before:20%,query:cut,insertorreplace:reset-before,merge:reset-after,get:latency:200ms±50ms",
		"--faults-seed", "3", "--table-delete-delay", "2s")
	svc := newServiceClient(t, srv)
	_, name := newTable(t, svc)
	var c pipelineCounts
	// The SDK's default policy, but retrying after 20 ms rather than 800: many faults.
	tc := retryingTableWith(t, srv, name, &c, policy.RetryOptions{RetryDelay: 20 * time.Millisecond, MaxRetries: 10})
	const n = 40
	for i := range n {
		if _, err := tc.AddEntity(ctx(t), entityJSON(t, "p", fmt.Sprintf("%04d", i), nil), nil); err != nil {
			t.Fatalf("insert %d through 503/500/timeout faults: %v", i, err)
		}
	}
	for i := range 20 {
		if _, err := tc.UpsertEntity(ctx(t), entityJSON(t, "q", fmt.Sprintf("%04d", i), nil), nil); err != nil {
			t.Fatalf("upsert %d through reset-before: %v", i, err)
		}
	}
	pages, seen := 0, []string{}
	pager := tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: to.Ptr("PartitionKey eq 'p'")})
	for pager.More() {
		p, err := pager.NextPage(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, b := range p.Entities {
			seen = append(seen, decodeEDM(t, b).RowKey)
		}
	}
	if len(seen) != n || pages < 2 {
		t.Fatalf("cut pages: %d entities over %d pages, want %d over several", len(seen), pages, n)
	}
	for i, rk := range seen {
		if rk != fmt.Sprintf("%04d", i) {
			t.Fatalf("cut pages: entity %d is %s", i, rk)
		}
	}
	t.Logf("%d pages for %d entities; SDK tries %d, 503s %d, resets %d", pages, n, c.tries.Load(), c.busy.Load(), c.transport.Load())

	// Without retries, the two resets as an application sees them: reset-before never
	// applied the write, reset-after did.
	plain := svc.NewClient(name)
	_, err := plain.UpsertEntity(ctx(t), entityJSON(t, "r", "before", nil), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
	var re *azcore.ResponseError
	if err == nil || errors.As(err, &re) {
		t.Fatalf("insert-or-replace under reset-before: %v, want a transport error", err)
	}
	if _, err := plain.GetEntity(ctx(t), "r", "before", nil); !isCode(err, http.StatusNotFound, "ResourceNotFound") {
		t.Fatalf("the write reset before it ran: get %v, want 404", err)
	}
	_, err = plain.UpdateEntity(ctx(t), entityJSON(t, "q", "0001", map[string]any{"Merged": true}), &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge})
	if err == nil || errors.As(err, &re) {
		t.Fatalf("merge under reset-after: %v, want a transport error", err)
	}
	began := time.Now()
	got, err := plain.GetEntity(ctx(t), "q", "0001", nil)
	if err != nil || decodeEDM(t, got.Value).Properties["Merged"] != true {
		t.Fatalf("the write reset after it ran is not applied: %v", err)
	}
	if took := time.Since(began); took < 150*time.Millisecond {
		t.Fatalf("a get with 200ms±50ms of latency injected took %v", took)
	}

	m := scrape(t, debug)
	for _, k := range []string{"503", "500", "timeout", "reset-before", "cut", "reset-after", "latency"} {
		if m[`cerulean_faults_injected_total{fault="`+k+`"}`] == 0 {
			t.Errorf("no %s fault counted in /metrics", k)
		}
	}
	// The deleted table's name, as the service keeps it for about 40 s.
	if _, err := svc.DeleteTable(ctx(t), name, nil); err != nil {
		t.Fatal(err)
	}
	_, err = svc.CreateTable(ctx(t), name, nil)
	if !isCode(err, http.StatusConflict, "TableBeingDeleted") {
		t.Fatalf("create after delete: %v, want 409 TableBeingDeleted", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err = svc.CreateTable(ctx(t), name, nil)
		if err == nil {
			break
		}
		if !isCode(err, http.StatusConflict, "TableBeingDeleted") || time.Now().After(deadline) {
			t.Fatalf("create once the delay is over: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// On stopping, the run's tally with its seed.
	if err, inTime := srv.terminate(15 * time.Second); err != nil || !inTime {
		t.Fatalf("stop: %v (in time: %v)", err, inTime)
	}
	if logs := srv.logs.Tail(1 << 20); !strings.Contains(logs, `msg="faults injected" seed=3 500=`) {
		t.Fatalf("no tally of the injected faults at stop:\n%s", logs[max(0, len(logs)-2000):])
	}
}
