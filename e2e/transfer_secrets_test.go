package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// What the data tools print holds no secret (issue 42): the command that resumes a
// failed or interrupted run shows account keys and SAS signatures as REDACTED, and a
// transport error names the URL without its sig. An export to something that is not a
// regular file (/dev/null, through a symbolic link or not) keeps no checkpoint: it could
// neither be cut back nor read again.
func TestTransferSecrets(t *testing.T) {
	a := account{Name: "secret" + runID, Key: randomKey(t)}
	srv := startServer(t, withAccounts(a))
	svc := newServiceClientFor(t, srv.Endpoint(a.Name), a.Name, a.Key, nil)
	cs := fmt.Sprintf("DefaultEndpointsProtocol=%s;AccountName=%s;AccountKey=%s;TableEndpoint=%s", srv.scheme, a.Name, a.Key, srv.Endpoint(a.Name))
	// The copies' target: another server, so that a missing source table stays missing.
	b := account{Name: "target" + runID, Key: randomKey(t)}
	dst := startServer(t, withAccounts(b))
	dstCS := fmt.Sprintf("DefaultEndpointsProtocol=%s;AccountName=%s;AccountKey=%s;TableEndpoint=%s", dst.scheme, b.Name, b.Key, dst.Endpoint(b.Name))
	tc, name := newTable(t, svc)
	fillEntities(t, tc, []string{`{"PartitionKey":"p","RowKey":"1"}`})
	sasURL, err := svc.GetAccountSASURL(aztables.AccountSASResourceTypes{Service: true, Container: true, Object: true},
		aztables.AccountSASPermissions{Read: true, Write: true, List: true, Add: true, Create: true, Update: true}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, sasQuery, _ := strings.Cut(sasURL, "?")
	sasCS := "TableEndpoint=" + srv.Endpoint(a.Name) + ";SharedAccessSignature=" + sasQuery
	dstSAS, err := newServiceClientFor(t, dst.Endpoint(b.Name), b.Name, b.Key, nil).GetAccountSASURL(aztables.AccountSASResourceTypes{Service: true, Container: true, Object: true},
		aztables.AccountSASPermissions{Read: true, Write: true, List: true, Add: true, Create: true, Update: true}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, dstSASQuery, _ := strings.Cut(dstSAS, "?")
	dstSASCS := "TableEndpoint=" + dst.Endpoint(b.Name) + ";SharedAccessSignature=" + dstSASQuery
	dir := t.TempDir()

	// A port nothing listens on: every call fails to connect, and is retried.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	deadSAS := "http://" + closed + "/" + a.Name + "/" + name + "?" + sasQuery

	for _, c := range []struct {
		name string
		args []string
		want []string // in stderr
	}{
		{"failed copy, keys", []string{"copy", "--from", cs, "--to", dstCS, "--table", "NoSuchTable" + runID}, []string{"to resume", "AccountKey=REDACTED", "REDACTED: give them as in the first run"}},
		{"failed copy, SAS connection string", []string{"copy", "--from=" + sasCS, "--to", dstSASCS, "--table", "NoSuchTable" + runID}, []string{"to resume", "sig=REDACTED"}},
		{"unreachable SAS URL", []string{"export", "--from", deadSAS, "--retries", "2", "--out", filepath.Join(dir, "dead.jsonl")}, []string{"connection refused", "sig=REDACTED"}},
		{"unreachable target", []string{"import", "--to", "DefaultEndpointsProtocol=http;AccountName=x;AccountKey=" + a.Key + ";TableEndpoint=http://" + closed + "/x", "--retries", "2", "--in", "-"}, []string{"connection refused"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append(c.args, "--checkpoint", filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".checkpoint"))
			st, out, errOut := runTool(t, time.Minute, []byte(`{"PartitionKey":"p","RowKey":"1"}`+"\n"), args...)
			if st != 1 {
				t.Errorf("status %d, want 1: %s", st, errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			noSecrets(t, "cerulean "+c.args[0], out+errOut, a.Key, b.Key, sasQuery, dstSASQuery)
		})
	}

	t.Run("not a regular file", func(t *testing.T) {
		link := filepath.Join(dir, "null")
		if err := os.Symlink(os.DevNull, link); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(os.DevNull + ".checkpoint") })
		for _, out := range []string{link, os.DevNull} {
			// A failed export (the table does not exist) and a finished one.
			for _, table := range []string{"NoSuchTable" + runID, name} {
				st, _, errOut := runTool(t, time.Minute, nil, "export", "--from", cs, "--table", table, "--out", out)
				if want := map[bool]int{true: 0, false: 1}[table == name]; st != want {
					t.Errorf("export of %s to %s: status %d, want %d: %s", table, out, st, want, errOut)
				}
				for _, cp := range []string{link + ".checkpoint", os.DevNull + ".checkpoint"} {
					if _, err := os.Lstat(cp); err == nil {
						t.Errorf("export of %s to %s left %s", table, out, cp)
						os.Remove(cp)
					}
				}
				if strings.Contains(errOut, "to resume") {
					t.Errorf("export to %s offers to resume: %s", out, errOut)
				}
				noSecrets(t, "cerulean export", errOut, a.Key)
			}
			if st, _, errOut := runTool(t, time.Minute, nil, "export", "--from", cs, "--table", name, "--out", out, "--resume"); st != 2 || !strings.Contains(errOut, "regular file") {
				t.Errorf("--resume of an export to %s: status %d: %s", out, st, errOut)
			}
		}
	})
}
