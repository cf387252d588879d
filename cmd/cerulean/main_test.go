package main

import (
	"bytes"
	"errors"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/membudget"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

// TestRunHelpAndMistakes: `cerulean help`, -h and --help with no command print the command
// list; `cerulean help CMD` and `cerulean CMD -h` print that command's usage first (its
// first line names it) and not the list; mistakes go to stderr with status 2, a command's
// with its usage, an unknown command's with the list.
func TestRunHelpAndMistakes(t *testing.T) {
	const list = "cerulean help [command]" // a line of the command list
	for _, c := range []struct {
		args     []string
		status   int
		first    string // the first line of the output (stdout for 0, stderr for 2) starts so
		has      string // the output contains this
		withList bool   // the output holds the command list
	}{
		{[]string{"help"}, 0, "Usage:", "cerulean bench [flags]", true},
		{[]string{"-h"}, 0, "Usage:", "cerulean help serve", true},
		{[]string{"--help"}, 0, "Usage:", "cerulean copy [flags]", true},
		{[]string{"help", "serve"}, 0, "Usage of cerulean serve", "-max-body-memory", false},
		{[]string{"serve", "--help"}, 0, "Usage of cerulean serve", "CERULEAN_SLOW_REQUEST", false},
		{[]string{"serve", "-h"}, 0, "Usage of cerulean serve", "-stall-timeout", false},
		{[]string{"help", "bench"}, 0, "Usage: cerulean bench", "-workers", false},
		{[]string{"bench", "-h"}, 0, "Usage: cerulean bench", "Workloads, run in this order", false},
		{[]string{"help", "table"}, 0, "Usage of cerulean table", "-ttl-property", false},
		{[]string{"table", "create", "-h"}, 0, "Usage of cerulean table", "cerulean table create NAME", false},
		{[]string{"help", "backup"}, 0, "Usage of cerulean backup", "-debug-addr", false},
		{[]string{"restore", "--help"}, 0, "Usage of cerulean restore", "-force", false},
		{[]string{"help", "export"}, 0, "Usage of cerulean export", "-select", false},
		{[]string{"import", "-h"}, 0, "Usage of cerulean import", "-skip-bad", false},
		{[]string{"copy", "--help"}, 0, "Usage of cerulean copy", "-to-table", false},
		{[]string{"help", "version"}, 0, "Usage of cerulean version", "also cerulean --version", false},
		{[]string{"version", "--help"}, 0, "Usage of cerulean version", "VCS revision", false},
		{[]string{"frob"}, 2, `cerulean: unknown command "frob"`, "cerulean bench [flags]", true},
		{[]string{"help", "frob"}, 2, `cerulean help: unknown command "frob"`, "cerulean bench [flags]", true},
		{[]string{"help", "serve", "x"}, 2, "cerulean help: unexpected arguments: x", "cerulean bench [flags]", true},
		{[]string{"serve", "--nope"}, 2, "cerulean serve: flag provided but not defined: -nope", "Usage of cerulean serve", false},
		{[]string{"--nope"}, 2, "cerulean serve: flag provided but not defined: -nope", "Usage of cerulean serve", false},
		{[]string{"bench", "--nope"}, 2, "cerulean bench: ", "Workloads, run in this order", false},
		{[]string{"serve", "--engine", "oracle"}, 2, `cerulean serve: --engine "oracle"`, "Usage of cerulean serve", false},
		{[]string{"serve", "--max-body-memory", "32MiB"}, 2, "cerulean serve: --max-body-memory", "want at least 48MiB", false},
		{[]string{"serve", "--disk-reserve", "0"}, 2, "cerulean serve: --disk-reserve 0: want at least 4MiB", "Usage of cerulean serve", false},
		{[]string{"serve", "--stall-timeout", "0s"}, 2, "cerulean serve: --stall-timeout must be positive", "Usage of cerulean serve", false},
		{[]string{"version", "x"}, 2, "cerulean version: unexpected arguments: x", "Usage of cerulean version", false},
		{[]string{"table"}, 2, "cerulean table: missing command", "Usage of cerulean table", false},
		{[]string{"serve", "--elastic-tables", "events_*:60"}, 2, `cerulean serve: --elastic-tables: item 1 "events_*:60": the pattern has '_'`, "Usage of cerulean serve", false},
		{[]string{"serve", "--expiry-interval", "0s"}, 2, "cerulean serve: --expiry-interval must be positive", "Usage of cerulean serve", false},
		{[]string{"serve", "--elastic-tables", "events*:0"}, 2, `cerulean serve: --elastic-tables: item 1 "events*:0": the time-to-live "0" is not -1 or a number of seconds`, "Usage of cerulean serve", false},
	} {
		var out, errb bytes.Buffer
		status := run(c.args, &out, &errb)
		if status != c.status {
			t.Errorf("%q: status %d, want %d (stderr %q)", c.args, status, c.status, errb.String())
			continue
		}
		got, other, name := out.String(), errb.String(), "stdout"
		if c.status != 0 {
			got, other, name = other, got, "stderr"
		}
		if other != "" {
			t.Errorf("%q: output on both streams; the other one: %q", c.args, other)
		}
		first, _, _ := strings.Cut(got, "\n")
		if !strings.HasPrefix(first, c.first) {
			t.Errorf("%q: the %s begins %q, want %q first", c.args, name, first, c.first)
		}
		if !strings.Contains(got, c.has) {
			t.Errorf("%q: the %s lacks %q:\n%s", c.args, name, c.has, got)
		}
		if strings.Contains(got, list) != c.withList {
			t.Errorf("%q: the %s holds the command list: %v, want %v:\n%s", c.args, name, !c.withList, c.withList, got)
		}
	}
}

func TestParseServeElasticTables(t *testing.T) {
	t.Setenv("CERULEAN_ELASTIC_TABLES", "events*:86400, cache*:-1:Exp ,audit*")
	o, err := parseServe(nil)
	if err != nil || len(o.elastic) != 3 || o.elastic[0].String() != "events*:86400" ||
		o.elastic[1].String() != "cache*:-1:Exp" || o.elastic[2].String() != "audit*" {
		t.Fatalf("parseServe = %+v, %v", o.elastic, err)
	}
	// The flag wins over the environment.
	if o, err = parseServe([]string{"--elastic-tables", ""}); err != nil || len(o.elastic) != 0 {
		t.Fatalf("--elastic-tables '': %+v, %v", o.elastic, err)
	}
	t.Setenv("CERULEAN_ELASTIC_TABLES", "a,,b")
	var ue usageError
	if _, err := parseServe(nil); !errors.As(err, &ue) || err.Error() != "--elastic-tables: item 2 is empty" {
		t.Fatalf("bad CERULEAN_ELASTIC_TABLES: %v", err)
	}
}

func TestParseServeLimits(t *testing.T) {
	t.Setenv("CERULEAN_MAX_BODY_MEMORY", "128MiB")
	t.Setenv("CERULEAN_STALL_TIMEOUT", "7s")
	o, err := parseServe([]string{"--body-timeout", "2m", "--slow-request", "0"})
	if err != nil {
		t.Fatal(err)
	}
	l := o.limits
	if l.MaxBodyMemory != 128<<20 || l.StallTimeout != 7*time.Second || l.BodyTimeout != 2*time.Minute || l.SlowRequest >= 0 {
		t.Errorf("limits %+v", l)
	}
	// A flag wins over its environment variable.
	o, err = parseServe([]string{"--stall-timeout", "3s", "--max-body-memory", "67108864"})
	if err != nil || o.limits.StallTimeout != 3*time.Second || o.limits.MaxBodyMemory != 64<<20 {
		t.Errorf("flags over env: %+v, %v", o.limits, err)
	}
	t.Setenv("CERULEAN_BODY_TIMEOUT", "soon")
	var ue usageError
	if _, err := parseServe(nil); !errors.As(err, &ue) || !strings.Contains(err.Error(), "CERULEAN_BODY_TIMEOUT") {
		t.Errorf("bad environment value: %v", err)
	}
}

func TestParseServeRowCache(t *testing.T) {
	o, err := parseServe(nil)
	if err != nil || o.rowCache != pebble.DefaultRowCacheSize {
		t.Fatalf("default: %d, %v", o.rowCache, err)
	}
	t.Setenv("CERULEAN_ROW_CACHE", "0")
	if o, err = parseServe(nil); err != nil || o.rowCache != 0 {
		t.Fatalf("CERULEAN_ROW_CACHE=0: %d, %v", o.rowCache, err)
	}
	if o, err = parseServe([]string{"--row-cache", "1GiB", "--memory-limit", "2GiB"}); err != nil || o.rowCache != 1<<30 || o.budget.RowCache != 1<<30 {
		t.Fatalf("--row-cache 1GiB: %d, %v", o.rowCache, err)
	}
	// The row cache given must fit in the memory limit.
	var ue usageError
	if _, err = parseServe([]string{"--row-cache", "1GiB"}); !errors.As(err, &ue) || !strings.Contains(err.Error(), "--memory-limit") {
		t.Fatalf("--row-cache 1GiB under the default limit: %v, want a usage error naming --memory-limit", err)
	}
}

// TestParseServeMemoryLimit: --memory-limit sets the budgets the finer settings do not
// (membudget.Derive), by flag or environment, and refuses a limit they do not fit in.
func TestParseServeMemoryLimit(t *testing.T) {
	o, err := parseServe(nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := membudget.Derive(membudget.DefaultLimit, membudget.Pebble, membudget.Overrides{})
	if o.budget != want || o.memTable != 32<<20 || o.rowCache != 32<<20 || o.limits.MaxBodyMemory != 64<<20 || o.budget.BlockCache != 32<<20 {
		t.Fatalf("default: budget %+v, memtables %d, row cache %d, bodies %d", o.budget, o.memTable, o.rowCache, o.limits.MaxBodyMemory)
	}
	// 1 GiB: bodies 128 MiB, R = 1024 − 64 − 128 = 832 MiB, a twelfth is 69 MiB.
	if o, err = parseServe([]string{"--memory-limit", "1GiB"}); err != nil || o.memTable != 69<<20 || o.rowCache != 69<<20 ||
		o.limits.MaxBodyMemory != 128<<20 || o.budget.BlockCache != 69<<20 || o.diskReserve != pebble.DiskReserveFor(69<<20) {
		t.Fatalf("--memory-limit 1GiB: budget %+v, memtables %d, row cache %d, bodies %d, reserve %d, %v", o.budget, o.memTable, o.rowCache, o.limits.MaxBodyMemory, o.diskReserve, err)
	}
	// A finer setting given keeps its value and takes its place in the limit.
	if o, err = parseServe([]string{"--memory-limit", "1GiB", "--memtable-size", "16MiB", "--max-body-memory", "64MiB"}); err != nil ||
		o.memTable != 16<<20 || o.limits.MaxBodyMemory != 64<<20 || o.rowCache != 74<<20 {
		t.Fatalf("--memtable-size and --max-body-memory given: budget %+v, %v", o.budget, err)
	}
	t.Setenv("CERULEAN_MEMORY_LIMIT", "160MiB")
	if o, err = parseServe(nil); err != nil || o.memTable != 4<<20 || o.limits.MaxBodyMemory != 48<<20 {
		t.Fatalf("CERULEAN_MEMORY_LIMIT=160MiB: budget %+v, %v", o.budget, err)
	}
	// PostgreSQL: no Pebble caches; the Go limit is all but the base.
	if o, err = parseServe([]string{"--engine", "postgres", "--postgres-url", "postgres://x/y"}); err != nil ||
		o.budget.BlockCache != 0 || o.budget.GoLimit != 160<<20-membudget.Base {
		t.Fatalf("--engine postgres: budget %+v, %v", o.budget, err)
	}
	var ue usageError
	for _, args := range [][]string{{"--memory-limit", "100MiB"}, {"--memtable-size", "64MiB"}} {
		if _, err := parseServe(args); !errors.As(err, &ue) || !strings.Contains(err.Error(), "--memory-limit") {
			t.Errorf("%q under CERULEAN_MEMORY_LIMIT=160MiB: %v, want a usage error naming --memory-limit", args, err)
		}
	}
}

func TestParseServeMemTable(t *testing.T) {
	o, err := parseServe(nil)
	if err != nil || o.memTable != pebble.DefaultMemTableSize || o.diskReserve != pebble.DefaultDiskReserve {
		t.Fatalf("default: memtables %d, reserve %d, %v", o.memTable, o.diskReserve, err)
	}
	// The default reserve follows the memtables: twice what two of them hold.
	if o, err = parseServe([]string{"--memtable-size", "16MiB"}); err != nil || o.memTable != 16<<20 || o.diskReserve != 64<<20 {
		t.Fatalf("--memtable-size 16MiB: memtables %d, reserve %d, %v", o.memTable, o.diskReserve, err)
	}
	// A reserve given is kept, by flag or environment; one under pebble.MinDiskReserve
	// (0, which turned the guard off, included) is refused: a full disk would fail writes.
	if o, err = parseServe([]string{"--memtable-size", "16MiB", "--disk-reserve", "1GiB"}); err != nil || o.diskReserve != 1<<30 {
		t.Fatalf("--disk-reserve 1GiB: reserve %d, %v", o.diskReserve, err)
	}
	t.Setenv("CERULEAN_DISK_RESERVE", "4MiB")
	if o, err = parseServe([]string{"--memtable-size", "16MiB"}); err != nil || o.diskReserve != 4<<20 {
		t.Fatalf("CERULEAN_DISK_RESERVE=4MiB: reserve %d, %v", o.diskReserve, err)
	}
	for _, v := range []string{"0", "1MiB"} {
		t.Setenv("CERULEAN_DISK_RESERVE", v)
		if _, err = parseServe(nil); err == nil || !strings.Contains(err.Error(), "want at least 4MiB") {
			t.Fatalf("CERULEAN_DISK_RESERVE=%s: %v, want it refused", v, err)
		}
	}
	if _, err = parseServe([]string{"--engine", "postgres", "--postgres-url", "postgres://x/y"}); err != nil {
		t.Fatalf("CERULEAN_DISK_RESERVE=1MiB with --engine postgres (where it does not apply): %v", err)
	}
	t.Setenv("CERULEAN_DISK_RESERVE", "128MiB")
	t.Setenv("CERULEAN_MEMTABLE_SIZE", "128MiB")
	if o, err = parseServe(nil); err != nil || o.memTable != 128<<20 {
		t.Fatalf("CERULEAN_MEMTABLE_SIZE=128MiB: memtables %d, %v", o.memTable, err)
	}
	var ue usageError
	for _, v := range []string{"512KiB", "2GiB"} {
		if _, err := parseServe([]string{"--memtable-size", v}); !errors.As(err, &ue) || !strings.Contains(err.Error(), "--memtable-size") {
			t.Errorf("--memtable-size %s: %v, want a usage error naming the flag", v, err)
		}
	}
}

func TestFormatVersion(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/ceruleandb/cerulean", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}}
	got := formatVersion(bi)
	for _, want := range []string{"cerulean github.com/ceruleandb/cerulean v1.2.3\n",
		"revision 0123456789abcdef0123456789abcdef01234567 (2026-01-02T03:04:05Z) with uncommitted changes\n", "go1.26.8 "} {
		if !strings.Contains(got, want) {
			t.Errorf("version text lacks %q:\n%s", want, got)
		}
	}
	bi.Settings = nil
	if got := formatVersion(bi); !strings.Contains(got, "revision unknown") {
		t.Errorf("without VCS information:\n%s", got)
	}
}

// TestParseServeHotPartition: --hot-partition-warn and --hot-partition-warn-after, their
// defaults (Azure's 2,000/s target, 30 s) and environment variables.
func TestParseServeHotPartition(t *testing.T) {
	o, err := parseServe(nil)
	if err != nil || o.hotWarn != 2000 || o.hotWarnAfter != 30*time.Second {
		t.Fatalf("defaults: %v %v, %v", o.hotWarn, o.hotWarnAfter, err)
	}
	t.Setenv("CERULEAN_HOT_PARTITION_WARN", "500")
	t.Setenv("CERULEAN_HOT_PARTITION_WARN_AFTER", "1m")
	if o, err = parseServe(nil); err != nil || o.hotWarn != 500 || o.hotWarnAfter != time.Minute {
		t.Errorf("environment: %v %v, %v", o.hotWarn, o.hotWarnAfter, err)
	}
	if o, err = parseServe([]string{"--hot-partition-warn", "0", "--hot-partition-warn-after", "20s"}); err != nil || o.hotWarn != 0 || o.hotWarnAfter != 20*time.Second {
		t.Errorf("flags: %v %v, %v", o.hotWarn, o.hotWarnAfter, err)
	}
	var ue usageError
	for _, args := range [][]string{{"--hot-partition-warn", "-1"}, {"--hot-partition-warn-after", "0s"}, {"--hot-partition-warn", "lots"}} {
		if _, err := parseServe(args); !errors.As(err, &ue) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	t.Setenv("CERULEAN_HOT_PARTITION_WARN", "lots")
	if _, err := parseServe(nil); !errors.As(err, &ue) || !strings.Contains(err.Error(), "CERULEAN_HOT_PARTITION_WARN") {
		t.Errorf("bad environment value: %v", err)
	}
}

func TestParseServeTLS(t *testing.T) {
	for _, args := range [][]string{
		{"--tls-cert", "c.pem"},
		{"--tls-key", "k.pem"},
		{"--tls-self-signed", "--tls-cert", "c.pem", "--tls-key", "k.pem"},
	} {
		var ue usageError
		if _, err := parseServe(args); !errors.As(err, &ue) {
			t.Errorf("parseServe(%q) = %v, want a usage error", args, err)
		}
	}
	t.Setenv("CERULEAN_TLS_CERT", "c.pem")
	t.Setenv("CERULEAN_TLS_KEY", "k.pem")
	o, err := parseServe(nil)
	if err != nil || o.tlsCert != "c.pem" || o.tlsKey != "k.pem" || o.tlsSelfSigned {
		t.Fatalf("parseServe with CERULEAN_TLS_CERT/KEY = %q %q %v, %v", o.tlsCert, o.tlsKey, o.tlsSelfSigned, err)
	}
	t.Setenv("CERULEAN_TLS_SELF_SIGNED", "yes")
	if _, err := parseServe(nil); err == nil {
		t.Fatal("CERULEAN_TLS_SELF_SIGNED=yes accepted")
	}
}

func TestParseServeEmulation(t *testing.T) {
	o, err := parseServe(nil)
	if err != nil || o.scaleTargets || o.partitionTarget != 2000 || o.accountTarget != 20000 || len(o.faultSpec) != 0 || o.tableDeleteDelay != 0 {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
	t.Setenv("CERULEAN_SCALE_TARGETS", "true")
	t.Setenv("CERULEAN_PARTITION_TARGET", "200")
	t.Setenv("CERULEAN_FAULTS", "insert:503:1%,*:latency:20ms±10ms")
	t.Setenv("CERULEAN_FAULTS_SEED", "42")
	t.Setenv("CERULEAN_TABLE_DELETE_DELAY", "40s")
	o, err = parseServe([]string{"--account-target", "2000"})
	if err != nil || !o.scaleTargets || o.partitionTarget != 200 || o.accountTarget != 2000 || o.faultsSeed != 42 ||
		o.faultSpec.String() != "InsertEntity:503:1%,*:latency:20ms±10ms" || o.tableDeleteDelay != 40*time.Second {
		t.Fatalf("from the environment: %+v, %v", o, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--faults", "insert:418"}, `--faults: faults: rule "insert:418": unknown kind`},
		{[]string{"--partition-target", "-5"}, "--partition-target and --account-target must be positive"},
		{[]string{"--table-delete-delay", "-1s"}, "--table-delete-delay must not be negative"},
	} {
		var ue usageError
		if _, err := parseServe(c.args); !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want a usage error containing %q", c.args, err, c.want)
		}
	}
	t.Setenv("CERULEAN_FAULTS_SEED", "lots")
	if _, err := parseServe(nil); err == nil || !strings.Contains(err.Error(), "CERULEAN_FAULTS_SEED") {
		t.Errorf("bad CERULEAN_FAULTS_SEED: %v", err)
	}
}

// The printed resume command holds no secret: the AccountKey and the SharedAccessSignature's
// sig of a connection string, a SAS URL's sig, given to --from or --to as the next
// argument or as --flag=value, are REDACTED; everything else is kept.
func TestResumeCommandRedacts(t *testing.T) {
	const key = "S2V5S2V5S2V5S2V5S2V5S2V5S2V5S2V5"
	args := []string{"cerulean", "copy",
		"--from", "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=" + key + ";EndpointSuffix=core.windows.net",
		"--to=TableEndpoint=http://127.0.0.1:10002/b;SharedAccessSignature=sv=2019-02-02&ss=t&sig=c2lnbmF0dXJl%3D&se=2030-01-01",
		"--from", "https://acct.table.core.windows.net/t?sv=2019-02-02&sig=c2lnbmF0dXJl%3D&sp=r",
		"--filter", "S eq 'a;AccountKey=b'"}
	got := resumeCommand(args)
	want := `cerulean copy --from 'DefaultEndpointsProtocol=https;AccountName=a;AccountKey=REDACTED;EndpointSuffix=core.windows.net'` +
		` '--to=TableEndpoint=http://127.0.0.1:10002/b;SharedAccessSignature=sv=2019-02-02&ss=t&sig=REDACTED&se=2030-01-01'` +
		` '--from' 'https://acct.table.core.windows.net/t?sv=2019-02-02&sig=REDACTED&sp=r' --filter 'S eq '\''a;AccountKey=b'\''' --resume`
	if got != strings.Replace(want, `'--from'`, `--from`, 1) {
		t.Errorf("resumeCommand:\n got %s\nwant %s", got, strings.Replace(want, `'--from'`, `--from`, 1))
	}
	if strings.Contains(got, key) || strings.Contains(got, "c2lnbmF0dXJl") {
		t.Errorf("resumeCommand keeps a secret: %s", got)
	}
	if secretsNote(args) == "" || secretsNote([]string{"cerulean", "copy", "--from", "UseDevelopmentStorage=true"}) != "" {
		t.Error("secretsNote")
	}
}

// TestParseServeHTTPServer: --http-server is h1 by default, net/http on request (flag or
// CERULEAN_HTTP_SERVER), and nothing else.
func TestParseServeHTTPServer(t *testing.T) {
	if o, err := parseServe(nil); err != nil || o.httpServer != "h1" {
		t.Fatalf("default: %q, %v", o.httpServer, err)
	}
	if o, err := parseServe([]string{"--http-server", "net/http"}); err != nil || o.httpServer != "net/http" {
		t.Fatalf("--http-server net/http: %q, %v", o.httpServer, err)
	}
	t.Setenv("CERULEAN_HTTP_SERVER", "net/http")
	if o, err := parseServe(nil); err != nil || o.httpServer != "net/http" {
		t.Fatalf("CERULEAN_HTTP_SERVER=net/http: %q, %v", o.httpServer, err)
	}
	var ue usageError
	if _, err := parseServe([]string{"--http-server", "nginx"}); !errors.As(err, &ue) || !strings.Contains(err.Error(), `--http-server "nginx": want h1 or net/http`) {
		t.Errorf("--http-server nginx: %v, want a usage error", err)
	}
}
