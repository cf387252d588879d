package e2e

// Online backup and restore (issue 13, item 5): a backup taken while 8 writers insert and
// run batches holds every write acknowledged before it began and no partial batch; the
// offline backup; restore's refusals, by exit status and message.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

const backupBatchSize = 10

// backupWrites records every write the writers sent and when each was acknowledged.
type backupWrites struct {
	mu      sync.Mutex
	sent    map[string]bool      // insert RowKey or batch id → sent
	ackedAt map[string]time.Time // → when its success response arrived
	failed  atomic.Int64
	acks    atomic.Int64
}

// run starts 8 writers, each alternating a single insert (partition "s-…") and a batch of
// backupBatchSize inserts into a fresh partition "b-ID" whose entities carry Batch=ID,
// until stop is closed. Every failure is a test error: the server must keep serving
// while it is being backed up.
func (bw *backupWrites) run(t *testing.T, c *aztables.Client, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%06d", w, seq)
				var err error
				cx, cancel := ctxWithTimeout(20 * time.Second)
				bw.mu.Lock()
				bw.sent[id] = true
				bw.mu.Unlock()
				if seq%2 == 0 {
					_, err = c.AddEntity(cx, marshal(t, map[string]any{"PartitionKey": "s-" + id[:2], "RowKey": id, "V": id}), nil)
				} else {
					actions := make([]aztables.TransactionAction, backupBatchSize)
					for i := range actions {
						actions[i] = aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: marshal(t, map[string]any{
							"PartitionKey": "b-" + id, "RowKey": fmt.Sprintf("%03d", i), "Batch": id,
						})}
					}
					_, err = c.SubmitTransaction(cx, actions, nil)
				}
				cancel()
				if err != nil {
					bw.failed.Add(1)
					t.Errorf("write %s during the backup: %v", id, egtFirstLine(err))
					return
				}
				bw.mu.Lock()
				bw.ackedAt[id] = time.Now()
				bw.mu.Unlock()
				bw.acks.Add(1)
			}
		}()
	}
	return &wg
}

// verify reads every entity of the table and checks: everything found was sent, every
// batch is whole (backupBatchSize entities) or absent, and every write acknowledged before
// began is present. It returns the inserts and batches found.
func (bw *backupWrites) verify(t *testing.T, c *aztables.Client, began time.Time) (inserts, batches int) {
	t.Helper()
	found := map[string]int{} // insert RowKey → 1, batch id → entities
	for _, b := range listAll(t, c, nil) {
		var e struct{ PartitionKey, RowKey, V, Batch string }
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("entity %s: %v", b, err)
		}
		switch {
		case strings.HasPrefix(e.PartitionKey, "s-") && e.V == e.RowKey:
			found[e.RowKey]++
			inserts++
		case e.PartitionKey == "b-"+e.Batch:
			if found[e.Batch] == 0 {
				batches++
			}
			found[e.Batch]++
		default:
			t.Errorf("unexpected entity %s", b)
		}
	}
	bw.mu.Lock()
	defer bw.mu.Unlock()
	var partial, missing, unsent []string
	for id, n := range found {
		isBatch := strings.Contains(id, "-") && isOdd(id)
		switch {
		case !bw.sent[id]:
			unsent = append(unsent, id)
		case isBatch && n != backupBatchSize:
			partial = append(partial, fmt.Sprintf("%s (%d of %d)", id, n, backupBatchSize))
		case !isBatch && n != 1:
			partial = append(partial, fmt.Sprintf("%s (%d times)", id, n))
		}
	}
	for id, at := range bw.ackedAt {
		if at.Before(began) && found[id] == 0 {
			missing = append(missing, id)
		}
	}
	for what, l := range map[string][]string{"partial batches (or duplicated inserts)": partial,
		"writes acknowledged before the backup began are missing": missing, "entities never sent": unsent} {
		if len(l) > 0 {
			sort.Strings(l)
			t.Errorf("%d %s, e.g. %v", len(l), what, l[:min(len(l), 10)])
		}
	}
	return inserts, batches
}

// isOdd reports whether a writer's id ("wN-SEQ") has an odd sequence number: a batch.
func isOdd(id string) bool {
	return (id[len(id)-1]-'0')%2 == 1
}

// debugServer starts a server with --debug-addr (bound before the server answers) and
// returns it with that address.
func debugServer(t *testing.T, opts ...serverOption) (*server, string) {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	return startServer(t, append(opts, withArgs("--debug-addr", addr))...), addr
}

func skipPostgres(t *testing.T) {
	if strings.Contains(os.Getenv("CERULEAN_TEST_ENGINE_ARGS"), "postgres") {
		t.Skip("cerulean backup is the pebble engine's; the database backs up postgres")
	}
}

func TestOnlineBackupUnderLoad(t *testing.T) {
	skipPostgres(t)
	srv, debug := debugServer(t)
	table := tableName(t)
	if _, err := newServiceClient(t, srv).CreateTable(ctx(t), table, nil); err != nil {
		t.Fatal(err)
	}
	c := newServiceClient(t, srv).NewClient(table)
	bw := &backupWrites{sent: map[string]bool{}, ackedAt: map[string]time.Time{}}
	stop := make(chan struct{})
	wg := bw.run(t, c, stop)
	var once sync.Once
	halt := func() { once.Do(func() { close(stop); wg.Wait() }) }
	defer halt()
	for bw.acks.Load() < 400 && bw.failed.Load() == 0 { // some data before the backup
		time.Sleep(20 * time.Millisecond)
	}

	dir := filepath.Join(t.TempDir(), "backup")
	began := time.Now()
	status, out, errOut := runCLI(t, "backup", "--to", dir, "--debug-addr", debug)
	ended := time.Now()
	if status != 0 || !strings.Contains(out, "backup written to "+dir) {
		t.Fatalf("cerulean backup: status %d, stdout %q, stderr %q", status, out, errOut)
	}
	// The server keeps serving: every writer goes on succeeding after the backup (a
	// failed write, during it or after, is a test error in run).
	after := bw.acks.Load()
	for bw.acks.Load() < after+16 && bw.failed.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	halt()
	bw.mu.Lock()
	before, during := 0, 0
	for _, at := range bw.ackedAt {
		if at.Before(began) {
			before++
		} else if at.Before(ended) {
			during++
		}
	}
	bw.mu.Unlock()
	t.Logf("%s: %d writes acknowledged before the backup began, %d while it ran (%v)", strings.TrimSpace(out), before, during, ended.Sub(began).Round(time.Millisecond))

	data := filepath.Join(t.TempDir(), "restored")
	status, out, errOut = runCLI(t, "restore", "--from", dir, "--data", data)
	if status != 0 || !strings.Contains(out, "restored ") {
		t.Fatalf("cerulean restore: status %d, stdout %q, stderr %q", status, out, errOut)
	}
	restored := startServer(t, withDataDir(data))
	rc := newServiceClient(t, restored).NewClient(table)
	inserts, batches := bw.verify(t, rc, began)
	// The restored store takes writes.
	if _, err := rc.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "after", "RowKey": "restore"}), nil); err != nil {
		t.Errorf("insert into the restored store: %v", err)
	}
	t.Logf("restored: %d inserts and %d whole batches of %d", inserts, batches, backupBatchSize)
	if inserts+batches < before {
		t.Errorf("restored %d writes, fewer than the %d acknowledged before the backup", inserts+batches, before)
	}
}

// TestOfflineBackupAndRestoreRefusals: the backup of a stopped server's data directory,
// and what restore and backup refuse, by exit status and message.
func TestOfflineBackupAndRestoreRefusals(t *testing.T) {
	skipPostgres(t)
	srv, debug := debugServer(t)
	table := tableName(t)
	svc := newServiceClient(t, srv)
	if _, err := svc.CreateTable(ctx(t), table, nil); err != nil {
		t.Fatal(err)
	}
	c := svc.NewClient(table)
	for i := range 20 {
		if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": fmt.Sprint(i)}), nil); err != nil {
			t.Fatal(err)
		}
	}
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "backup")
	expect := func(what string, wantStatus int, wantMsg string, args ...string) string {
		t.Helper()
		status, out, errOut := runCLI(t, args...)
		if status != wantStatus || !strings.Contains(out+errOut, wantMsg) {
			t.Errorf("%s: cerulean %s: status %d, stdout %q, stderr %q; want status %d and %q", what, strings.Join(args, " "),
				status, out, errOut, wantStatus, wantMsg)
		}
		return out + errOut
	}

	// A server holds the directory: no offline backup, and nothing left behind; no
	// restore over it, even with --force.
	expect("offline backup of a running server", 1, "--debug-addr", "backup", "--to", dir, "--data", srv.DataDir)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a refused backup left %s behind (%v)", dir, err)
	}
	online := filepath.Join(tmp, "online")
	expect("online backup", 0, "1 tables", "backup", "--to", online, "--debug-addr", debug)
	expect("restore over a running server", 1, "in use by a running server",
		"restore", "--from", online, "--data", srv.DataDir, "--force")

	if err, _ := srv.terminate(stopTimeout); err != nil {
		t.Fatalf("stop: %v", err)
	}
	expect("offline backup", 0, "1 tables", "backup", "--to", dir, "--data", srv.DataDir)
	expect("backup into a non-empty directory", 1, "not empty", "backup", "--to", dir, "--data", srv.DataDir)

	expect("restore over a non-empty data directory", 1, "not empty", "restore", "--from", dir, "--data", srv.DataDir)
	garbage := filepath.Join(tmp, "garbage")
	if err := os.MkdirAll(filepath.Join(garbage, "pebble"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(garbage, "pebble", "000001.sst"), []byte("not a table"), 0o644); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(tmp, "fresh")
	expect("restore of a directory without a manifest", 1, "not a Cerulean backup", "restore", "--from", garbage, "--data", fresh)
	if err := os.WriteFile(filepath.Join(garbage, "cerulean-backup.json"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect("restore with an unreadable manifest", 1, "unreadable manifest", "restore", "--from", garbage, "--data", fresh)
	m, err := os.ReadFile(filepath.Join(dir, "cerulean-backup.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(garbage, "cerulean-backup.json"), m, 0o644); err != nil {
		t.Fatal(err)
	}
	expect("restore of a store that does not open", 1, "does not open", "restore", "--from", garbage, "--data", fresh)
	if err := os.WriteFile(filepath.Join(garbage, "cerulean-backup.json"), []byte(strings.Replace(string(m), `"format": 1`, `"format": 99`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	expect("restore of a newer backup format", 1, "backup format 99 is not supported", "restore", "--from", garbage, "--data", fresh)
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("refused restores left %s behind (%v)", fresh, err)
	}
	expect("restore without --data", 2, "--from and --data are required", "restore", "--from", dir)
	expect("backup without --to", 2, "--to is required", "backup", "--data", srv.DataDir)
	expect("backup of postgres", 1, "docs/operations.md", "backup", "--to", filepath.Join(tmp, "pg"), "--engine", "postgres")

	// The refusals changed nothing: the backup restores, with --force over the original.
	if err := os.WriteFile(filepath.Join(srv.DataDir, "marker"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	expect("restore --force", 0, "restored", "restore", "--from", dir, "--data", srv.DataDir, "--force")
	if _, err := os.Stat(filepath.Join(srv.DataDir, "marker")); !os.IsNotExist(err) {
		t.Errorf("restore --force kept a file of the old data directory (%v)", err)
	}
	expect("restore into a new directory", 0, "restored", "restore", "--from", dir, "--data", fresh)
	for _, d := range []string{srv.DataDir, fresh} {
		s := startServer(t, withDataDir(d))
		if n := len(listAll(t, newServiceClient(t, s).NewClient(table), nil)); n != 20 {
			t.Errorf("restored into %s: %d entities, want 20", d, n)
		}
		s.terminate(stopTimeout)
	}
}

// backup and restore print their usage first with -h (status 0), without the command list,
// and exit 2 on a mistake with their usage on stderr.
func TestBackupRestoreHelp(t *testing.T) {
	for _, c := range [][]string{{"backup", "-h"}, {"help", "backup"}, {"restore", "--help"}, {"help", "restore"}} {
		cmd := c[0]
		if cmd == "help" {
			cmd = c[1]
		}
		status, out, errOut := runCLI(t, c...)
		if status != 0 || !strings.HasPrefix(out, "Usage of cerulean "+cmd+":\n") || strings.Contains(out, "cerulean help [command]") || errOut != "" {
			t.Errorf("cerulean %s: status %d, stdout %q, stderr %q", strings.Join(c, " "), status, out, errOut)
		}
	}
	for _, c := range [][]string{{"backup", "--bogus"}, {"backup", "--to", "x", "extra"}, {"restore", "--from", "x"},
		{"backup", "--to", "x", "--data", "d", "--debug-addr", "127.0.0.1:1"}} {
		status, out, errOut := runCLI(t, c...)
		if status != 2 || out != "" || !strings.Contains(errOut, "Usage of cerulean "+c[0]+":") {
			t.Errorf("cerulean %s: status %d, stdout %q, stderr %q; want 2 with the usage", strings.Join(c, " "), status, out, errOut)
		}
	}
}
