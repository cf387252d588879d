package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A real Azurite (compat/azurite, npm, pinned; CERULEAN_TEST_AZURITE_TABLE names another
// version's azurite-table script) filled through the Go SDK: `cerulean copy`
// from it into Cerulean, and, once it is stopped, `cerulean import --azurite` of the
// database file it wrote into a fresh Cerulean; both checked entity by entity through
// the SDK against what Azurite served.
func TestTransferAzurite(t *testing.T) {
	root := compatRepoRoot(t)
	bin := filepath.Join(root, "compat", "azurite", "node_modules", ".bin", "azurite-table")
	if b := os.Getenv("CERULEAN_TEST_AZURITE_TABLE"); b != "" {
		bin = b // another Azurite version's azurite-table, to try it
	}
	if _, err := os.Stat(bin); err != nil {
		compatUnavailable(t, "%s is missing (run: cd compat/azurite && npm ci --no-audit --no-fund): %v", bin, err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		compatUnavailable(t, "node is not installed: %v", err)
	}
	loc := t.TempDir()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	az := exec.Command(bin, "--location", loc, "--tableHost", "127.0.0.1", "--tablePort", fmt.Sprint(port), "--skipApiVersionCheck")
	az.Env = filterEnv(os.Environ())
	var azOut lockedBuffer
	az.Stdout, az.Stderr = &azOut, &azOut
	if err := az.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- az.Wait() }()
	t.Cleanup(func() {
		az.Process.Kill()
		if t.Failed() {
			t.Logf("azurite output:\n%s", azOut.String())
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("azurite did not listen on %s:\n%s", addr, azOut.String())
		}
	}
	endpoint := "http://" + addr + "/" + devAccount
	azSvc := newServiceClientFor(t, endpoint, devAccount, devKey, nil)
	azCS := fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;TableEndpoint=%s", devAccount, devKey, endpoint)

	// Fill: the edge entities, and enough numbered ones for several pages.
	tables := []string{"edge", "numbered"}
	for _, name := range tables {
		if _, err := azSvc.CreateTable(ctx(t), name, nil); err != nil {
			t.Fatalf("azurite CreateTable %s: %v", name, err)
		}
	}
	fillEntities(t, azSvc.NewClient("edge"), edgeEntities)
	// Keys with doubled quotes only: Azurite stores and answers them as written, and
	// so must the import (issue 42: they were undoubled).
	fillEntities(t, azSvc.NewClient("edge"), []string{`{"PartitionKey":"q''q","RowKey":"''"}`})
	var numbered []string
	for i := 0; i < 2500; i++ {
		numbered = append(numbered, fmt.Sprintf(`{"PartitionKey":"p%d","RowKey":"r%05d","N@odata.type":"Edm.Int64","N":"%d","When@odata.type":"Edm.DateTime","When":"2024-05-06T07:08:09.%07dZ"}`, i%7, i, i, i))
	}
	fillEntities(t, azSvc.NewClient("numbered"), numbered)
	want := map[string]map[string]map[string]any{}
	for _, name := range tables {
		want[name] = sdkEntities(t, azSvc.NewClient(name))
	}
	if len(want["edge"]) != len(edgeEntities)+1 || len(want["numbered"]) != 2500 {
		t.Fatalf("azurite holds %d and %d entities", len(want["edge"]), len(want["numbered"]))
	}

	// copy from the running Azurite.
	viaCopy := startOwnServer(t)
	if st, _, errOut := runTool(t, 2*time.Minute, nil, "copy", "--from", azCS, "--to", connString(viaCopy), "--quiet"); st != 0 {
		t.Fatalf("copy from azurite: status %d: %s", st, errOut)
	}
	for _, name := range tables {
		sameEntities(t, "copied "+name, want[name], sdkEntities(t, newServiceClient(t, viaCopy).NewClient(name)))
	}

	// Stop Azurite: on SIGINT it writes its database and says so; the node process may
	// linger on idle keep-alive sockets after that, so it is then killed.
	az.Process.Signal(syscall.SIGINT)
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(azOut.String(), "successfully closed"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("azurite did not close on SIGINT")
		}
	}
	// Some versions save only on their 5-second autosave: wait for the last entity.
	db := filepath.Join(loc, "__azurite_db_table__.json")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if b, err := os.ReadFile(db); err == nil && json.Valid(b) && strings.Contains(string(b), `"r02499"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("azurite did not write its database")
		}
	}
	az.Process.Kill()
	<-exited
	viaFile := startOwnServer(t)
	st, _, errOut := runTool(t, 2*time.Minute, nil, "import", "--to", connString(viaFile), "--azurite", db)
	if st != 0 || !strings.Contains(errOut, fmt.Sprintf("imported 2,%03d entities", 501+len(edgeEntities))) {
		t.Fatalf("import --azurite: status %d: %s", st, errOut)
	}
	for _, name := range tables {
		sameEntities(t, "imported "+name, want[name], sdkEntities(t, newServiceClient(t, viaFile).NewClient(name)))
	}
}
