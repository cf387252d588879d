package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/ceruleandb/cerulean/client"
)

// TestCopyFollow: `cerulean copy --follow` copies a table while a writer inserts,
// merges, replaces, deletes and writes batches into it, then keeps applying the source's
// changes; interrupted (status 0, the command to carry on) and resumed in the middle; once
// the writer stops and the follower catches up, source and target are equal entity by
// entity, and a table deleted at the source ends the follow.
func TestCopyFollow(t *testing.T) {
	src, dst := startOwnServer(t), startOwnServer(t)
	bc := bulkClient(t, src)
	const table = "Orders"
	if err := bc.CreateTable(ctx(t), table, &client.TableSettings{ChangeFeedRetention: 3600}); err != nil {
		t.Fatal(err)
	}
	tc := newServiceClient(t, src).NewClient(table)
	// A first load, so the copy has something to scan while the writer writes.
	for i := range 3000 {
		if _, err := tc.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": fmt.Sprintf("p%02d", i%30), "RowKey": fmt.Sprintf("r%05d", i),
			"N": i, "Big": fmt.Sprint(int64(1) << 40), "Big@odata.type": "Edm.Int64"}), nil); err != nil {
			t.Fatal(err)
		}
	}

	stopWriter := make(chan struct{})
	var writes atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rnd := rand.New(rand.NewPCG(45, 6))
		for i := 0; ; i++ {
			select {
			case <-stopWriter:
				return
			default:
			}
			pk, rk := fmt.Sprintf("p%02d", rnd.IntN(30)), fmt.Sprintf("r%05d", rnd.IntN(4000))
			c := ctx(t)
			var err error
			switch r := rnd.IntN(10); {
			case r < 3:
				_, err = tc.UpsertEntity(c, marshal(t, map[string]any{"PartitionKey": pk, "RowKey": rk, "N": -i, "W": "upsert"}), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
			case r < 5:
				_, err = tc.UpsertEntity(c, marshal(t, map[string]any{"PartitionKey": pk, "RowKey": rk, "M": i}), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeMerge})
			case r < 7:
				_, err = tc.DeleteEntity(c, pk, rk, &aztables.DeleteEntityOptions{IfMatch: to.Ptr(azcore.ETagAny)})
			default:
				var actions []aztables.TransactionAction
				for k := range 5 {
					actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeInsertReplace,
						Entity: marshal(t, map[string]any{"PartitionKey": pk, "RowKey": fmt.Sprintf("b%05d-%d", i, k), "K": k})})
				}
				_, err = tc.SubmitTransaction(c, actions, nil)
			}
			if err == nil || statusOf(err) == 404 {
				writes.Add(1)
			}
		}
	}()

	dir := t.TempDir()
	checkpoint := filepath.Join(dir, "follow.checkpoint")
	args := []string{"copy", "--from", connString(src), "--to", connString(dst), "--table", table, "--follow", "--checkpoint", checkpoint, "--progress-interval", "200ms"}
	run := func(args []string, until func() bool) string {
		t.Helper()
		cmd := exec.Command(binaryPath, args...)
		cmd.Env = filterEnv(os.Environ())
		cmd.Dir = dir
		var stderr lockedBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		for deadline := time.Now().Add(2 * time.Minute); !until(); time.Sleep(100 * time.Millisecond) {
			select {
			case err := <-exited:
				t.Fatalf("copy --follow exited by itself: %v\n%s", err, stderr.String())
			default:
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("copy --follow: condition not reached in 2 minutes\n%s", stderr.String())
			}
		}
		cmd.Process.Signal(syscall.SIGINT)
		if err := <-exited; err != nil {
			t.Fatalf("copy --follow interrupted: %v, want status 0\n%s", err, stderr.String())
		}
		out := stderr.String()
		if !strings.Contains(out, "stopped following") || !strings.Contains(out, "--resume") {
			t.Fatalf("copy --follow interrupted does not say how to carry on:\n%s", out)
		}
		return out
	}
	following := func() bool {
		b, err := os.ReadFile(checkpoint)
		if err != nil {
			return false
		}
		var cp struct {
			Tables []struct {
				Done bool
				Feed string
			}
		}
		return json.Unmarshal(b, &cp) == nil && len(cp.Tables) == 1 && cp.Tables[0].Done && cp.Tables[0].Feed != ""
	}
	// First run: until the copy is done and following, plus a while.
	var since time.Time
	run(args, func() bool {
		if !following() {
			return false
		}
		if since.IsZero() {
			since = time.Now()
		}
		return time.Since(since) > 2*time.Second
	})
	// Carry on following while the writer writes, then stop the writer and let the
	// follower catch up.
	dtc := newServiceClient(t, dst).NewClient(table)
	equal := false
	out := run(append(args, "--resume"), func() bool {
		select {
		case <-stopWriter:
		default:
			time.Sleep(2 * time.Second)
			close(stopWriter)
			wg.Wait()
		}
		want, got := sdkEntities(t, tc), sdkEntities(t, dtc)
		equal = len(want) == len(got)
		if equal {
			for k, v := range want {
				if fmt.Sprint(v) != fmt.Sprint(got[k]) {
					equal = false
					break
				}
			}
		}
		return equal
	})
	sameEntities(t, "target after following", sdkEntities(t, tc), sdkEntities(t, dtc))
	t.Logf("%d writes during the copy and the follow; %d entities at the end; last run:\n%s", writes.Load(), len(sdkEntities(t, tc)), lastLine(out))

	// A source table deleted ends the follow by itself, with status 0.
	if _, err := tc.Delete(ctx(t), nil); err != nil {
		t.Fatal(err)
	}
	if st, _, errOut := runTool(t, time.Minute, nil, append(args, "--resume")...); st != 0 {
		t.Errorf("follow of a deleted table: status %d\n%s", st, errOut)
	}
}
