package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ceruleandb/cerulean/internal/accesslog"
	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/backup"
	"github.com/ceruleandb/cerulean/internal/console"
	"github.com/ceruleandb/cerulean/internal/faults"
	"github.com/ceruleandb/cerulean/internal/gcfloor"
	"github.com/ceruleandb/cerulean/internal/hotpart"
	"github.com/ceruleandb/cerulean/internal/membudget"
	"github.com/ceruleandb/cerulean/internal/metrics"
	"github.com/ceruleandb/cerulean/internal/observe"
	"github.com/ceruleandb/cerulean/internal/server"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
	"github.com/ceruleandb/cerulean/internal/storage/postgres"
	"github.com/ceruleandb/cerulean/internal/table"
	"github.com/ceruleandb/cerulean/internal/throttle"
	"github.com/ceruleandb/cerulean/internal/tlsconf"
)

// serveOptions are the flags of `cerulean serve`, each with an environment variable.
type serveOptions struct {
	addr     string
	data     string
	accounts string
	logLevel string
	debug    string

	engine         string
	diskReserve    int64
	diskReserveSet bool // --disk-reserve or CERULEAN_DISK_RESERVE given (else it follows memTable)
	memTable       int64
	rowCache       int64

	// memoryLimit is --memory-limit, from which budget derives; memTableSet, rowCacheSet
	// and bodyMemorySet say which finer settings were given (flag or environment) and
	// override the derived ones.
	memoryLimit                             int64
	memTableSet, rowCacheSet, bodyMemorySet bool
	budget                                  membudget.Budget

	postgresURL      string
	postgresPool     int
	postgresStmtTime time.Duration
	// syncCommitTimeout bounds a commit's wait for the synchronous standby (0: none).
	syncCommitTimeout time.Duration

	// replicas is --postgres-replica-url; maxStaleness, replicaMaxLag and
	// replicaReadTimeout tune routing to them; replicaFlags names those of them that were
	// set (flag or environment), which --engine pebble refuses.
	replicas           replicaURLs
	maxStaleness       time.Duration
	replicaMaxLag      time.Duration
	replicaReadTimeout time.Duration
	replicaFlags       []string
	// readConsistency is --read-consistency as given; consistency its parsed level.
	readConsistency string
	consistency     storage.Consistency

	// elasticTables is --elastic-tables as given; elastic its parsed rules.
	elasticTables string
	elastic       []table.ElasticRule
	// feedTables is --change-feed-tables as given; feeds its parsed rules.
	feedTables string
	feeds      []table.ElasticRule
	// expiryInterval is how often the engine removes expired entities.
	expiryInterval time.Duration

	limits server.Limits
	// slowRequest is --slow-request as given (0 disables the lines).
	slowRequest time.Duration

	// hotWarn is --hot-partition-warn, entities per second (0 disables the lines), and
	// hotWarnAfter --hot-partition-warn-after.
	hotWarn      float64
	hotWarnAfter time.Duration
	// accessLog is --access-log: a file path, "-" for standard output, "" for none.
	accessLog string
	// tlsCert and tlsKey are --tls-cert and --tls-key (PEM files, reloaded when they
	// change); tlsSelfSigned is --tls-self-signed. Either way --addr serves HTTPS only.
	tlsCert, tlsKey string
	tlsSelfSigned   bool
	// id are the flags of bearer tokens, role assignments and shared key access
	// (identity.go).
	id identityOptions
	// console is --console: serve the web console (package console); consoleAddr is
	// --console-addr, its own listener ("" : /-/ on --addr).
	console     bool
	consoleAddr string

	// scaleTargets is --scale-targets; partitionTarget and accountTarget its targets
	// (entity operations per second).
	scaleTargets                   bool
	partitionTarget, accountTarget float64
	// faults is --faults as given, faultSpec its parsed rules, faultsSeed --faults-seed
	// (0: drawn at start and logged).
	faults     string
	faultSpec  faults.Spec
	faultsSeed uint64
	// tableDeleteDelay is --table-delete-delay (0: off).
	tableDeleteDelay time.Duration
	// httpServer is --http-server: "h1" or "net/http".
	httpServer string
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// serveUsage writes the flags of `cerulean serve`.
func serveUsage(w io.Writer) {
	fs, _, err := serveFlags()
	if err != nil {
		fmt.Fprintf(w, "(flags unavailable: %v)\n", err)
		return
	}
	fmt.Fprint(w, `Usage of cerulean serve (the default command):
  cerulean [serve] [flags]

Serves the Azure Table API on --addr with the development account devstoreaccount1 (or
--accounts), printing each account's connection string and the web console's URL. Data is
kept in --data on the embedded engine (pebble), or in a PostgreSQL-wire database with
--engine postgres. Every flag may also be set by the environment variable named at the end
of its description; a flag given on the command line wins. SIGINT or SIGTERM stop the server
gracefully. Exit status: 0 stopped, 1 failed to start or serve, 2 a command-line mistake.

Flags of cerulean serve:
`)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func parseServe(args []string) (serveOptions, error) {
	fs, o, err := serveFlags()
	if err != nil {
		return *o, usageError{err}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return *o, err
		}
		return *o, usageError{err}
	}
	if fs.NArg() > 0 {
		return *o, usageErrorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "disk-reserve":
			o.diskReserveSet = true
		case "memtable-size":
			o.memTableSet = true
		case "row-cache":
			o.rowCacheSet = true
		case "max-body-memory":
			o.bodyMemorySet = true
		case "postgres-replica-url", "max-staleness", "replica-max-lag", "replica-read-timeout":
			if !slices.Contains(o.replicaFlags, "--"+f.Name) {
				o.replicaFlags = append(o.replicaFlags, "--"+f.Name)
			}
		}
	})
	if err := o.check(); err != nil {
		return *o, usageError{err}
	}
	if err := o.deriveBudget(); err != nil {
		return *o, usageError{err}
	}
	if !o.diskReserveSet {
		o.diskReserve = pebble.DiskReserveFor(uint64(o.memTable))
	}
	return *o, nil
}

// serveFlags defines the flags of `cerulean serve`, with defaults from the environment.
func serveFlags() (*flag.FlagSet, *serveOptions, error) {
	o := &serveOptions{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.addr, "addr", env("CERULEAN_ADDR", "127.0.0.1:10002"), "host:port the table API (and the web console) listens on; a busy address fails the start before anything is created on disk (CERULEAN_ADDR)")
	fs.StringVar(&o.data, "data", env("CERULEAN_DATA", "./data"), "data directory of the pebble engine, created if missing; one server at a time (with --engine postgres it holds only --tls-self-signed's certificate and --dev-issuer's key) (CERULEAN_DATA)")
	fs.StringVar(&o.accounts, "accounts", env("CERULEAN_ACCOUNTS", ""), "accounts as name:base64key pairs separated by ';', each seeing only its own tables; a name given twice gets a second key (or name:key1:key2); "+
		"not set: the development account devstoreaccount1 with its well-known key (CERULEAN_ACCOUNTS)")
	fs.StringVar(&o.logLevel, "log-level", env("CERULEAN_LOG_LEVEL", "info"), "debug, info, warn or error: the level of the structured logs on standard error (CERULEAN_LOG_LEVEL)")
	fs.StringVar(&o.debug, "debug-addr", env("CERULEAN_DEBUG_ADDR", ""), "if set, serve diagnostics on this address: /healthz (200, or 503 while the storage engine is unreachable), /metrics (Prometheus), "+
		"/debug/replicas (read replicas' state, JSON), /debug/partitions (hot partitions, JSON), /debug/backup (POST, for cerulean backup) and Go's pprof profiles (/debug/pprof/). "+
		"It has no authentication: keep it on loopback or a private network (any other address is logged as a warning); a busy address fails the start, as --addr does (CERULEAN_DEBUG_ADDR)")
	// Access log (package accesslog).
	fs.StringVar(&o.accessLog, "access-log", env("CERULEAN_ACCESS_LOG", ""), "write one JSON line per request to this file, or to standard output if '-', which then holds nothing else (the start-up banner goes to standard error, without keys); "+
		"it records requests, never credentials; "+
		"on SIGHUP the file is reopened at the path, for logrotate (CERULEAN_ACCESS_LOG)")
	fs.StringVar(&o.elasticTables, "elastic-tables", env("CERULEAN_ELASTIC_TABLES", ""), "make tables elastic when they are created, by name: a comma-separated list of PATTERN[:TTL[:PROPERTY]], "+
		"e.g. 'events*:86400,cache*:-1,audit*'. PATTERN is a glob (* ? [a-z]) matched case-insensitively against the whole table name; the first match wins. "+
		"TTL is the table's default time-to-live in seconds (1 to 2147483647), or -1 for on without a default (only entities with their own TTL expire); "+
		"empty or omitted, time-to-live is off. PROPERTY names the per-entity TTL property (default TTLInSeconds). "+
		"A Create Table request that gives settings itself wins; existing tables keep theirs (CERULEAN_ELASTIC_TABLES)")
	fs.StringVar(&o.feedTables, "change-feed-tables", env("CERULEAN_CHANGE_FEED_TABLES", ""), "turn tables' change feeds on when they are created, by name: a comma-separated list of PATTERN:RETENTION, "+
		"e.g. 'orders*:7d,audit*:86400'. PATTERN is as in --elastic-tables; RETENTION is how long the feed keeps its records: seconds, or a duration such as 36h or 7d. "+
		"Applies to standard and elastic tables alike; a Create Table request that gives settings itself wins; existing tables keep theirs (CERULEAN_CHANGE_FEED_TABLES)")
	fs.StringVar(&o.engine, "engine", env("CERULEAN_ENGINE", "pebble"), "storage engine: pebble (embedded, in --data) or postgres (a PostgreSQL-wire database at --postgres-url) (CERULEAN_ENGINE)")
	fs.StringVar(&o.postgresURL, "postgres-url", env("CERULEAN_POSTGRES_URL", ""), "connection URL (postgres://...) or key=value DSN of the database, required with --engine postgres (CERULEAN_POSTGRES_URL)")
	pool, err := envInt("CERULEAN_POSTGRES_POOL_SIZE", postgres.DefaultPoolSize)
	if err != nil {
		return fs, o, err
	}
	fs.IntVar(&o.postgresPool, "postgres-pool-size", pool, "most database connections one process opens, for --engine postgres (CERULEAN_POSTGRES_POOL_SIZE)")
	stmt, err := envDuration("CERULEAN_POSTGRES_STATEMENT_TIMEOUT", postgres.DefaultStatementTimeout)
	if err != nil {
		return fs, o, err
	}
	fs.DurationVar(&o.postgresStmtTime, "postgres-statement-timeout", stmt, "server-side timeout of each statement for --engine postgres; a statement that hits it is answered 503; 0 disables it (CERULEAN_POSTGRES_STATEMENT_TIMEOUT)")
	syncWait, err := envDuration("CERULEAN_SYNC_COMMIT_TIMEOUT", postgres.DefaultSyncCommitTimeout)
	if err != nil {
		return fs, o, err
	}
	fs.DurationVar(&o.syncCommitTimeout, "sync-commit-timeout", syncWait, "for --engine postgres with synchronous replication: the longest a commit waits for the synchronous standby; "+
		"past it the wait is cancelled and the write answered 503 (committed on the primary only, outcome unknown); 0 disables it (CERULEAN_SYNC_COMMIT_TIMEOUT)")

	if v, ok := os.LookupEnv("CERULEAN_POSTGRES_REPLICA_URLS"); ok {
		urls, err := splitReplicaURLs(v)
		if err != nil {
			return fs, o, fmt.Errorf("CERULEAN_POSTGRES_REPLICA_URLS: %w", err)
		}
		o.replicas.urls = urls
		if len(urls) > 0 {
			o.replicaFlags = append(o.replicaFlags, "CERULEAN_POSTGRES_REPLICA_URLS")
		}
	}
	fs.Var(&o.replicas, "postgres-replica-url", "a hot standby (streaming replica) of the --postgres-url database, as a postgres:// URL, that reads may go to as their consistency level allows; "+
		"repeat the flag for several; the environment variable lists URLs separated by spaces or commas (a comma inside a multi-host URL stays in it); URLs only, not key=value DSNs (CERULEAN_POSTGRES_REPLICA_URLS)")
	fs.StringVar(&o.readConsistency, "read-consistency", env("CERULEAN_READ_CONSISTENCY", "Strong"), "consistency level of reads that do not send x-ms-consistency-level: "+
		"Strong, BoundedStaleness, Session, ConsistentPrefix or Eventual (CERULEAN_READ_CONSISTENCY)")
	for _, f := range []struct {
		name, env, usage string
		p                *time.Duration
		def              time.Duration
	}{
		{"max-staleness", "CERULEAN_MAX_STALENESS", "how far behind the primary a replica serving a BoundedStaleness read may be", &o.maxStaleness, postgres.DefaultMaxStaleness},
		{"replica-max-lag", "CERULEAN_REPLICA_MAX_LAG", "a replica further behind the primary than this serves no reads until it catches up", &o.replicaMaxLag, postgres.DefaultReplicaMaxLag},
		{"replica-read-timeout", "CERULEAN_REPLICA_READ_TIMEOUT", "the longest a read waits for a replica's answer (each round trip): past it the replica leaves rotation and the read runs again on another replica or the primary, in the same request; " +
			"the replica is back once it answers a poll within it", &o.replicaReadTimeout, postgres.DefaultReplicaReadTimeout},
	} {
		v, err := envDuration(f.env, f.def)
		if err != nil {
			return fs, o, err
		}
		if _, ok := os.LookupEnv(f.env); ok {
			o.replicaFlags = append(o.replicaFlags, f.env)
		}
		fs.DurationVar(f.p, f.name, v, f.usage+"; for --postgres-replica-url ("+f.env+")")
	}

	// HTTPS (package tlsconf).
	fs.StringVar(&o.tlsCert, "tls-cert", env("CERULEAN_TLS_CERT", ""), "serve HTTPS on --addr with this PEM certificate (chain), with --tls-key; "+
		"the files are read again when they change, so a rotated certificate is served without a restart (CERULEAN_TLS_CERT)")
	fs.StringVar(&o.tlsKey, "tls-key", env("CERULEAN_TLS_KEY", ""), "the PEM private key of --tls-cert (CERULEAN_TLS_KEY)")
	selfSigned, err := envBool("CERULEAN_TLS_SELF_SIGNED", false)
	if err != nil {
		return fs, o, err
	}
	fs.BoolVar(&o.tlsSelfSigned, "tls-self-signed", selfSigned, "serve HTTPS on --addr with a self-signed certificate for 127.0.0.1, ::1 and localhost, "+
		"created once in --data and reused; the start-up message says how to make each SDK trust it (CERULEAN_TLS_SELF_SIGNED)")

	// Bearer tokens, role assignments, shared key access (identity.go).
	if err := addIdentityFlags(fs, &o.id); err != nil {
		return fs, o, err
	}

	// Web console (package console).
	con, err := envBool("CERULEAN_CONSOLE", true)
	if err != nil {
		return fs, o, err
	}
	fs.BoolVar(&o.console, "console", con, "serve the web console at /-/ on --addr: browse and edit tables and entities, access policies, CORS, "+
		"SAS URLs, and watch request rates and hot partitions, signed in with an account key, a connection string or a SAS (CERULEAN_CONSOLE)")
	fs.StringVar(&o.consoleAddr, "console-addr", env("CERULEAN_CONSOLE_ADDR", ""), "serve the web console on this address instead of --addr (at /-/, with the table API beside it so the page "+
		"stays same-origin with what it calls; HTTPS when --addr is) (CERULEAN_CONSOLE_ADDR)")

	expiry, err := envDuration("CERULEAN_EXPIRY_INTERVAL", pebble.DefaultExpiryInterval)
	if err != nil {
		return fs, o, err
	}
	fs.DurationVar(&o.expiryInterval, "expiry-interval", expiry, "how often expired entities of elastic tables are removed from storage; they are invisible from the moment they expire whatever this is, so it only bounds how long they take space (CERULEAN_EXPIRY_INTERVAL)")

	d := server.DefaultLimits
	mem, err := envSize("CERULEAN_MAX_BODY_MEMORY", d.MaxBodyMemory)
	if err != nil {
		return fs, o, err
	}
	o.limits.MaxBodyMemory = mem
	if o.diskReserve, err = envSize("CERULEAN_DISK_RESERVE", pebble.DefaultDiskReserve); err != nil {
		return fs, o, err
	}
	_, o.diskReserveSet = os.LookupEnv("CERULEAN_DISK_RESERVE")
	if o.memTable, err = envSize("CERULEAN_MEMTABLE_SIZE", pebble.DefaultMemTableSize); err != nil {
		return fs, o, err
	}
	if o.rowCache, err = envSize("CERULEAN_ROW_CACHE", pebble.DefaultRowCacheSize); err != nil {
		return fs, o, err
	}
	if o.memoryLimit, err = envSize("CERULEAN_MEMORY_LIMIT", membudget.DefaultLimit); err != nil {
		return fs, o, err
	}
	_, o.memTableSet = os.LookupEnv("CERULEAN_MEMTABLE_SIZE")
	_, o.rowCacheSet = os.LookupEnv("CERULEAN_ROW_CACHE")
	_, o.bodyMemorySet = os.LookupEnv("CERULEAN_MAX_BODY_MEMORY")
	fs.Var((*byteSize)(&o.memoryLimit), "memory-limit", "memory the server process may take in all, e.g. 512MiB (at least 160MiB): the pebble engine's block cache, memtables and row cache, the request bodies in flight and the Go runtime's soft limit derive from it so that the resident memory stays under it; "+
		"--memtable-size, --row-cache and --max-body-memory, if given, take their place in it (a GOMEMLIMIT in the environment replaces the Go runtime's limit) (CERULEAN_MEMORY_LIMIT)")
	fs.Var((*byteSize)(&o.rowCache), "row-cache", "memory for the pebble engine's row cache, e.g. 32MiB: the entities point reads read, so reading one again skips the storage engine's search; always exact (a write invalidates what it writes); 0 turns it off; default a twelfth of what --memory-limit leaves to the caches, 32MiB at its default (CERULEAN_ROW_CACHE)")
	fs.Var((*byteSize)(&o.diskReserve), "disk-reserve", "free space kept on the volume of --data for the pebble engine, e.g. 128MiB: writes are refused (503) below it and accepted again once space returns; at least 4MiB; default twice what the memtables hold (CERULEAN_DISK_RESERVE)")
	fs.Var((*byteSize)(&o.memTable), "memtable-size", "size of each of the pebble engine's two memtables, where writes gather before they are flushed to disk, e.g. 32MiB (1MiB to 1GiB): larger ones flush less often, which sustained writes spread over many partitions need, and take more memory and more free space to restart; default a twelfth of what --memory-limit leaves to the caches, 32MiB at its default (CERULEAN_MEMTABLE_SIZE)")
	fs.Var((*byteSize)(&o.limits.MaxBodyMemory), "max-body-memory", "most memory request bodies may hold, as received and as decoded, all requests together, e.g. 64MiB; past it requests get 503 ServerBusy with Retry-After, and one client (a remote address) may hold half of it; "+
		"a bulk request's body may take a quarter (at most 32MiB); at least 48MiB, since a 4 MiB $batch takes up to 12 MiB; default an eighth of --memory-limit, at least 48MiB (CERULEAN_MAX_BODY_MEMORY)")
	for _, f := range []struct {
		name, env, usage string
		p                *time.Duration
		def              time.Duration
	}{
		{"body-timeout", "CERULEAN_BODY_TIMEOUT", "longest a client may take to send one request body", &o.limits.BodyTimeout, d.BodyTimeout},
		{"stall-timeout", "CERULEAN_STALL_TIMEOUT", "longest a client may pause while sending a request body or reading a response", &o.limits.StallTimeout, d.StallTimeout},
		{"write-timeout", "CERULEAN_WRITE_TIMEOUT", "longest the sending of one response may take", &o.limits.WriteTimeout, d.WriteTimeout},
		{"idle-timeout", "CERULEAN_IDLE_TIMEOUT", "how long an idle keep-alive connection stays open (advertised in Keep-Alive: timeout=N)", &o.limits.IdleTimeout, d.IdleTimeout},
		{"shutdown-grace", "CERULEAN_SHUTDOWN_GRACE", "on SIGINT/SIGTERM, how long running requests may take to finish", &o.limits.ShutdownGrace, d.ShutdownGrace},
		{"slow-request", "CERULEAN_SLOW_REQUEST", "log requests slower than this at info level; 0 disables", &o.slowRequest, d.SlowRequest},
	} {
		v, err := envDuration(f.env, f.def)
		if err != nil {
			return fs, o, err
		}
		fs.DurationVar(f.p, f.name, v, f.usage+" ("+f.env+")")
	}

	// Hot partitions (package hotpart).
	warn, err := envFloat("CERULEAN_HOT_PARTITION_WARN", hotpart.Target)
	if err != nil {
		return fs, o, err
	}
	fs.Float64Var(&o.hotWarn, "hot-partition-warn", warn, "log a warning when a partition takes more than this many entity operations per second for --hot-partition-warn-after "+
		"(Azure's target for one partition is 2,000); 0 disables (CERULEAN_HOT_PARTITION_WARN)")
	after, err := envDuration("CERULEAN_HOT_PARTITION_WARN_AFTER", 30*time.Second)
	if err != nil {
		return fs, o, err
	}
	fs.DurationVar(&o.hotWarnAfter, "hot-partition-warn-after", after, "how long a partition must stay above --hot-partition-warn to be logged, in steps of 10 s (CERULEAN_HOT_PARTITION_WARN_AFTER)")

	// Scale targets (package throttle) and the service's failures (package faults).
	scale, err := envBool("CERULEAN_SCALE_TARGETS", false)
	if err != nil {
		return fs, o, err
	}
	fs.BoolVar(&o.scaleTargets, "scale-targets", scale, "emulate Azure's scalability targets: entity operations over --partition-target per partition or --account-target per account get 503 ServerBusy, as on the service (CERULEAN_SCALE_TARGETS)")
	if o.partitionTarget, err = envFloat("CERULEAN_PARTITION_TARGET", throttle.PartitionTarget); err != nil {
		return fs, o, err
	}
	fs.Float64Var(&o.partitionTarget, "partition-target", o.partitionTarget, "with --scale-targets: entity operations per second one partition serves (1 KiB entities; a batch of n costs n, a query the entities it scans) (CERULEAN_PARTITION_TARGET)")
	if o.accountTarget, err = envFloat("CERULEAN_ACCOUNT_TARGET", throttle.AccountTarget); err != nil {
		return fs, o, err
	}
	fs.Float64Var(&o.accountTarget, "account-target", o.accountTarget, "with --scale-targets: entity operations per second one account serves; per front end when several share a database (CERULEAN_ACCOUNT_TARGET)")
	fs.StringVar(&o.faults, "faults", env("CERULEAN_FAULTS", ""), "inject failures, e.g. insert:503:1%,query:timeout:0.5%,*:latency:20ms±10ms,*:reset-after:5%,query:cut:10% (kinds 503, 500, timeout, reset-before, reset-after, latency, cut) (CERULEAN_FAULTS)")
	seed, err := envUint("CERULEAN_FAULTS_SEED", 0)
	if err != nil {
		return fs, o, err
	}
	fs.Uint64Var(&o.faultsSeed, "faults-seed", seed, "seed of --faults' draws, to repeat a run; 0 draws one and logs it (CERULEAN_FAULTS_SEED)")
	delDelay, err := envDuration("CERULEAN_TABLE_DELETE_DELAY", 0)
	if err != nil {
		return fs, o, err
	}
	fs.DurationVar(&o.tableDeleteDelay, "table-delete-delay", delDelay, "how long a deleted table's name stays taken (Create Table gets 409 TableBeingDeleted), as on the service (about 40s); 0 frees it at once (CERULEAN_TABLE_DELETE_DELAY)")
	fs.StringVar(&o.httpServer, "http-server", env("CERULEAN_HTTP_SERVER", "h1"), "what answers HTTP requests: h1 (Cerulean's own HTTP/1.1 server for the plain requests table clients send, Go's net/http for any other) "+
		"or net/http (Go's for every request, to compare or to rule h1 out); the limits on request heads and the answers to malformed requests are the same (CERULEAN_HTTP_SERVER)")
	return fs, o, nil
}

// check validates option combinations the flag package cannot.
func (o *serveOptions) check() error {
	switch o.engine {
	case "pebble":
		if len(o.replicaFlags) > 0 {
			return fmt.Errorf("%s: read replicas need --engine postgres (the pebble engine has none; it serves every consistency level from its own store)", strings.Join(o.replicaFlags, ", "))
		}
	case "postgres":
		if o.postgresURL == "" {
			return fmt.Errorf("--engine postgres needs --postgres-url (or CERULEAN_POSTGRES_URL)")
		}
		if o.postgresPool <= 0 {
			return fmt.Errorf("--postgres-pool-size must be positive")
		}
		if o.postgresStmtTime < 0 {
			return fmt.Errorf("--postgres-statement-timeout must not be negative")
		}
		if o.syncCommitTimeout < 0 {
			return fmt.Errorf("--sync-commit-timeout must not be negative")
		}
		if o.maxStaleness <= 0 {
			return fmt.Errorf("--max-staleness must be positive")
		}
		if o.replicaMaxLag <= 0 {
			return fmt.Errorf("--replica-max-lag must be positive")
		}
		if o.replicaReadTimeout <= 0 {
			return fmt.Errorf("--replica-read-timeout must be positive")
		}
	default:
		return fmt.Errorf("--engine %q: want pebble or postgres", o.engine)
	}
	if o.httpServer != "h1" && o.httpServer != "net/http" {
		return fmt.Errorf("--http-server %q: want h1 or net/http", o.httpServer)
	}
	c, err := parseConsistency(o.readConsistency)
	if err != nil {
		return err
	}
	o.consistency = c
	if o.partitionTarget <= 0 || o.accountTarget <= 0 {
		return fmt.Errorf("--partition-target and --account-target must be positive")
	}
	if o.tableDeleteDelay < 0 {
		return fmt.Errorf("--table-delete-delay must not be negative")
	}
	spec, err := faults.Parse(o.faults)
	if err != nil {
		return fmt.Errorf("--faults: %w", err)
	}
	o.faultSpec = spec
	rules, err := table.ParseElasticRules(o.elasticTables)
	if err != nil {
		return fmt.Errorf("--elastic-tables: %w", err)
	}
	o.elastic = rules
	if o.feeds, err = table.ParseFeedRules(o.feedTables); err != nil {
		return fmt.Errorf("--change-feed-tables: %w", err)
	}
	if o.engine != "postgres" && o.diskReserveSet && o.diskReserve < pebble.MinDiskReserve {
		// Without a reserve the engine cannot refuse writes on a full disk: they fail
		// with 500 and Pebble's commit path breaks (pebble.MinDiskReserve).
		return fmt.Errorf("--disk-reserve %d: want at least %s: without a reserve a full disk fails writes instead of refusing them (503) until space is freed; the default is twice what the memtables hold (%s)",
			o.diskReserve, formatSize(pebble.MinDiskReserve), formatSize(pebble.DiskReserveFor(uint64(o.memTable))))
	}
	l := o.limits
	if l.MaxBodyMemory < 48<<20 {
		// One client may hold a quarter of it in large bodies (server/body.go), and a
		// 4 MiB batch holds up to 12 MiB while it is received, decoded and answered.
		return fmt.Errorf("--max-body-memory %d: want at least 48MiB (one client may hold a quarter of it for bodies over 64 KiB, and a 4 MiB batch takes up to 12 MiB)", l.MaxBodyMemory)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"body-timeout", l.BodyTimeout}, {"stall-timeout", l.StallTimeout}, {"write-timeout", l.WriteTimeout}, {"idle-timeout", l.IdleTimeout}, {"shutdown-grace", l.ShutdownGrace}} {
		if d.v <= 0 {
			return fmt.Errorf("--%s must be positive", d.name)
		}
	}
	if o.slowRequest < 0 {
		return fmt.Errorf("--slow-request must not be negative")
	}
	if o.expiryInterval <= 0 {
		return fmt.Errorf("--expiry-interval must be positive")
	}
	if o.memTable < 1<<20 || o.memTable > 1<<30 {
		return fmt.Errorf("--memtable-size must be between 1MiB and 1GiB")
	}
	if o.hotWarn < 0 || o.hotWarnAfter <= 0 {
		return fmt.Errorf("--hot-partition-warn must not be negative and --hot-partition-warn-after must be positive")
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return fmt.Errorf("--tls-cert and --tls-key go together")
	}
	if o.tlsSelfSigned && o.tlsCert != "" {
		return fmt.Errorf("--tls-self-signed and --tls-cert: choose one")
	}
	if o.id.devIssuer && !o.tlsSelfSigned && o.tlsCert == "" {
		// Tokens need HTTPS: `cerulean --dev-issuer` alone is one command that works.
		o.tlsSelfSigned, o.id.autoTLS = true, true
	}
	if err := o.id.check(o.tlsSelfSigned || o.tlsCert != "", o.addr, o.consoleAddr); err != nil {
		return err
	}
	if !o.console && o.consoleAddr != "" {
		return fmt.Errorf("--console-addr with --console=false: the console is off, so it has no address")
	}
	o.limits.SlowRequest = o.slowRequest
	if o.slowRequest == 0 {
		o.limits.SlowRequest = -1 // server.Limits: negative disables
	}
	return nil
}

func envInt(name string, def int) (int, error) {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not a number", name, v)
	}
	return n, nil
}

func envFloat(name string, def float64) (float64, error) {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not a number", name, v)
	}
	return f, nil
}

func envUint(name string, def uint64) (uint64, error) {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def, nil
	}
	n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want a non-negative integer", name, v)
	}
	return n, nil
}

func envBool(name string, def bool) (bool, error) {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", name, v)
	}
	return b, nil
}

func envDuration(name string, def time.Duration) (time.Duration, error) {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not a duration", name, v)
	}
	return d, nil
}

// openEngine opens the engine the options choose and describes where its data lives
// (for the start-up log line; never the database password).
func openEngine(o serveOptions, log *slog.Logger) (storage.Engine, string, error) {
	if o.engine == "postgres" {
		timeout := o.postgresStmtTime
		if timeout == 0 {
			timeout = -1 // Options: negative disables
		}
		syncCommitTimeout := o.syncCommitTimeout
		if syncCommitTimeout == 0 {
			syncCommitTimeout = -1
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		eng, err := postgres.Open(ctx, o.postgresURL, postgres.Options{
			PoolSize:           o.postgresPool,
			StatementTimeout:   timeout,
			ExpiryInterval:     o.expiryInterval,
			ReplicaURLs:        o.replicas.urls,
			MaxStaleness:       o.maxStaleness,
			ReplicaMaxLag:      o.replicaMaxLag,
			ReplicaReadTimeout: o.replicaReadTimeout,
			SyncCommitTimeout:  syncCommitTimeout,
			Logger:             log.With("component", "postgres"),
		})
		if err != nil {
			return nil, "", err
		}
		return eng, eng.Dialect(), nil
	}
	if err := os.MkdirAll(o.data, 0o755); err != nil {
		return nil, "", fmt.Errorf("data directory: %w", err)
	}
	plog := log.With("component", "pebble")
	reserve := o.diskReserve // at least pebble.MinDiskReserve (check)
	if need := pebble.DiskReserveFor(uint64(o.memTable)); reserve < need {
		plog.Warn("--disk-reserve is under twice what the memtables hold: on a full disk a flush may not fit, and writes may stay refused after space is freed",
			"disk_reserve", formatSize(reserve), "memtable_size", formatSize(o.memTable), "suggested", formatSize(need))
	}
	rowCache := o.rowCache
	if rowCache == 0 {
		rowCache = -1 // Options: negative turns the cache off
	}
	eng, err := pebble.Open(o.data, pebble.Options{Logger: pebbleLogger{plog}, Log: plog, DiskReserve: reserve, ExpiryInterval: o.expiryInterval,
		CacheSize: o.budget.BlockCache, RowCacheSize: rowCache, MemTableSize: uint64(o.memTable)})
	if errors.Is(err, storage.ErrNoSpace) {
		return nil, "", fmt.Errorf("%w, or lower --disk-reserve (now %s)", err, formatSize(reserve))
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		// Pebble's LOCK file is held: flock(2) refuses with EWOULDBLOCK.
		dir := o.data
		if abs, aerr := filepath.Abs(dir); aerr == nil {
			dir = abs
		}
		return nil, "", fmt.Errorf("data directory %s is in use by another process (another cerulean serving it?): %w", dir, err)
	}
	if err != nil {
		return nil, "", err
	}
	raiseProcs(log)
	return eng, o.data, nil
}

// raiseProcs raises GOMAXPROCS for Pebble's background work (pebble.RaiseProcs), so
// that flushes and compactions cannot take the Ps requests need (see
// pebble.BackgroundProcs).
func raiseProcs(log *slog.Logger) {
	if from, to, ok := pebble.RaiseProcs(); ok {
		log.Debug("GOMAXPROCS raised for Pebble's background work", "from", from, "to", to)
	}
}

// floorGC keeps the budget's headroom (gcfloor.DefaultHeadroom at the default
// --memory-limit) of heap growth between garbage collections, so a small live heap does
// not make the collector run dozens of times a second under load (see internal/gcfloor),
// and sets the Go runtime's soft memory limit to the budget's, so that the heap, whatever
// the floor allows, stays within what --memory-limit leaves it. A GOGC or GOMEMLIMIT in
// the environment is the operator's choice and is kept.
func floorGC(log *slog.Logger, b membudget.Budget) {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(b.GoLimit)
	}
	if os.Getenv("GOGC") != "" {
		return
	}
	gcfloor.Start(uint64(b.GCHeadroom))
	log.Debug("GC heap floor set", "headroom", formatSize(b.GCHeadroom))
}

// deriveBudget derives the memory budget from --memory-limit, with the finer settings
// given in place of the derived ones, and sets those not given from it.
func (o *serveOptions) deriveBudget() error {
	e, ov := membudget.Pebble, membudget.Overrides{}
	if o.engine == "postgres" {
		e = membudget.External
	}
	if o.memTableSet {
		ov.MemTableSize = o.memTable
	}
	if o.rowCacheSet {
		ov.RowCache = cmp.Or(o.rowCache, membudget.Off)
	}
	if o.bodyMemorySet {
		ov.Bodies = o.limits.MaxBodyMemory
	}
	b, err := membudget.Derive(o.memoryLimit, e, ov)
	if err != nil {
		return fmt.Errorf("--memory-limit: %w", err)
	}
	o.budget = b
	if e == membudget.Pebble {
		o.memTable, o.rowCache = b.MemTableSize, b.RowCache
	}
	o.limits.MaxBodyMemory = b.Bodies
	return nil
}

// logBudget reports the memory budget at start.
func logBudget(log *slog.Logger, b membudget.Budget) {
	attrs := make([]any, 0, 16)
	for _, h := range b.Holders() {
		attrs = append(attrs, h.Name, formatSize(h.Bytes))
	}
	if os.Getenv("GOMEMLIMIT") != "" {
		attrs = append(attrs, "go_limit_from", "GOMEMLIMIT")
	}
	log.Info("memory budget", attrs...)
}

func runServe(args []string) error {
	o, err := parseServe(args)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("log level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	floorGC(log, o.budget)
	accounts := []auth.Account{auth.DevAccount()}
	if o.accounts != "" {
		if accounts, err = auth.ParseAccounts(o.accounts); err != nil {
			return fmt.Errorf("accounts: %w", err)
		}
		if len(accounts) == 0 {
			return fmt.Errorf("accounts: %q names no account", o.accounts)
		}
	}
	if err := o.id.applySharedKeyOff(accounts); err != nil {
		return err
	}
	start := time.Now()
	// Listen first: a busy address fails before anything is created on disk.
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	ln, https, trustHelp, err := listenTLS(o, ln, log)
	if err != nil {
		return err
	}
	var debugLn net.Listener
	if o.debug != "" {
		if debugLn, err = listenDebug(o.debug, log); err != nil {
			return err
		}
		defer debugLn.Close()
	}
	var consoleLn net.Listener
	if o.consoleAddr != "" {
		cl, err := net.Listen("tcp", o.consoleAddr)
		if err != nil {
			return fmt.Errorf("console listen: %w", err)
		}
		defer cl.Close()
		// The same scheme as --addr: the page there is served as the API is.
		if consoleLn, _, _, err = listenTLS(o, cl, log); err != nil {
			return err
		}
	}
	var observers observe.Observers
	if o.accessLog != "" {
		al, err := accesslog.Open(o.accessLog, accesslog.Options{Logger: log})
		if err != nil {
			return err
		}
		// Closing writes the lines still buffered (deferred calls run before the exit).
		defer al.Close()
		observers = append(observers, al)
		defer reopenOnHangup(al, log)()
	}
	eng, where, err := openEngine(o, log)
	if err != nil {
		return fmt.Errorf("open engine: %w", err)
	}
	hot := hotPartitions(o, log)
	// What watches the requests: the hot-partition sketch always; metrics only with a
	// diagnostics address to serve them on, so that without one the request path pays
	// nothing for them.
	observers = append(observers, hot)
	var con *console.Console
	if o.console {
		// Watch's request series per account and operation (bounded: see console.Rates).
		names := make([]string, len(accounts))
		for i, a := range accounts {
			names[i] = a.Name
		}
		rates := console.NewRates(names, nil)
		observers = append(observers, rates)
		con = console.New(console.Options{Accounts: accounts, Rates: rates, Hot: hot})
	}
	var met *metrics.Metrics
	if o.debug != "" {
		names := make([]string, len(accounts))
		for i, a := range accounts {
			names[i] = a.Name
		}
		if met, err = metrics.New(metrics.Options{Accounts: names, Engine: eng}); err != nil {
			eng.Close()
			return fmt.Errorf("metrics: %w", err)
		}
		if err := met.Register(hot.Collector()); err != nil {
			eng.Close()
			return fmt.Errorf("metrics: %w", err)
		}
		if err := met.Register(o.budget.Collector()); err != nil {
			eng.Close()
			return fmt.Errorf("metrics: %w", err)
		}
		observers = append(observers, met)
	}
	thr, inj, dels := emulation(o, log)
	// The role assignments are watched while the server runs.
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	id, err := o.id.build(watchCtx, scheme(https)+"://"+displayHost(ln.Addr().String()), o.data, log, met)
	if err != nil {
		eng.Close()
		return err
	}
	srv, err := server.New(server.Options{Engine: eng, Accounts: accounts, Logger: log, Bearer: id.tokens, Roles: id.roles, Limits: o.limits, ElasticTables: o.elastic, ChangeFeedTables: o.feeds, ReadConsistency: o.consistency, Observer: observers,
		// Over HTTPS a SAS signed spr=https holds as the service holds it.
		StrictProtocol: https, Throttle: thr, Faults: inj, Deletions: dels, NetHTTP: o.httpServer == "net/http"})
	if err != nil {
		eng.Close()
		return err
	}
	log.Info("cerulean serving", "addr", ln.Addr().String(), "https", https, "engine", o.engine, "data", where, "read_consistency", o.consistency.String(), "startup", time.Since(start).Round(time.Millisecond))
	if r, ok := eng.(replicaReporter); ok {
		for _, st := range r.Replicas() {
			// Names are host:port, never credentials.
			log.Info("read replica", "name", st.Name, "max_staleness", o.maxStaleness, "max_lag", o.replicaMaxLag, "read_timeout", o.replicaReadTimeout)
		}
	}
	for _, r := range o.elastic {
		log.Info("elastic tables", "pattern", r.Pattern, "default_ttl", r.Settings.DefaultTTL, "ttl_property", r.Settings.TTLPropertyName())
	}
	logBudget(log, o.budget)
	// The start-up banner goes to standard output, unless that is the access log: then
	// standard output stays JSON Lines from its first line, the banner goes to standard
	// error, and it names no key, since both streams are then collected as logs.
	banner, withKeys := os.Stdout, true
	if o.accessLog == accesslog.Stdout {
		banner, withKeys = os.Stderr, false
	}
	printConnectionStrings(banner, ln.Addr().String(), accounts, https, withKeys)
	if con != nil {
		addr := ln.Addr().String()
		if consoleLn != nil {
			addr = consoleLn.Addr().String()
		}
		fmt.Fprintf(banner, "Web console (sign in with an account name and key, a connection string or a SAS URL):\n  %s://%s%s\n", scheme(https), displayHost(addr), console.Prefix)
	}
	fmt.Fprint(banner, trustHelp)
	if id.dev != nil {
		printDevIssuer(banner, id.dev, o)
	}

	if o.debug != "" {
		// /healthz answers 200 while the storage engine answers and 503 while it is
		// unreachable, for load balancers in front of several Cerulean processes.
		http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if ok, since := srv.Health(); !ok {
				http.Error(w, "storage unavailable since "+since.UTC().Format(time.RFC3339), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		// /debug/replicas: each read replica's state (postgres.ReplicaStatus), [] without.
		http.HandleFunc("/debug/replicas", replicasHandler(eng))
		// /metrics: the Prometheus exposition (package metrics; docs/operations.md, "Metrics").
		http.Handle("/metrics", met.Handler())
		// /debug/partitions: the busiest partitions per table over the last minute.
		http.Handle("/debug/partitions", hot.Handler())
		// /debug/backup (POST): a checkpoint of the pebble store, streamed as a tar for
		// cerulean backup; with postgres, 501 and where to read about backing it up.
		{
			pe, _ := eng.(*pebble.Engine)
			http.Handle("/debug/backup", backup.Handler(pe, o.data, log.With("component", "backup")))
		}
		go func() {
			// net/http/pprof registers on the default mux, which nothing else uses.
			if err := http.Serve(debugLn, nil); err != nil && !errors.Is(err, net.ErrClosed) {
				log.Error("debug server", "err", err)
			}
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go hot.Run(ctx)
	var handler http.Handler = srv
	if id.dev != nil {
		// The issuer's discovery and keys, on the API's listener, ahead of account routing.
		handler = id.dev.Mount(handler)
	}
	consoleDone := make(chan error, 1)
	switch {
	case con != nil && consoleLn != nil:
		// Its own listener serves the console and the same table API, so the page calls
		// the API on its own origin (no CORS rule needed).
		go func() {
			err := srv.ServeHandler(ctx, consoleLn, console.Mount(con, srv))
			if ctx.Err() == nil {
				log.Error("console listener stopped; shutting down", "err", err)
				stop()
			}
			consoleDone <- err
		}()
	case con != nil:
		handler = console.Mount(con, handler)
		consoleDone <- nil
	default:
		consoleDone <- nil
	}
	serveErr := srv.ServeHandler(ctx, ln, handler)
	// Whyever --addr stopped, the console's own listener stops with it.
	stop()
	if cerr := <-consoleDone; serveErr == nil {
		serveErr = cerr
	}
	if inj != nil {
		// The run's tally, for a test run without --debug-addr's metrics; with the seed
		// logged at start, enough to repeat it.
		counts := inj.Counts()
		attrs := []any{"seed", inj.Seed()}
		for _, k := range slices.Sorted(maps.Keys(counts)) {
			attrs = append(attrs, k, counts[k])
		}
		log.Info("faults injected", attrs...)
	}
	if errors.Is(serveErr, server.ErrRequestsRunning) {
		// Closing the engine under running requests could fail them mid-write; every
		// acknowledged write is already synced, so leaving it unclosed loses nothing.
		return serveErr
	}
	// No request is running any more: close the engine, so every acknowledged write is on
	// disk and the directory is cleanly released.
	if err := eng.Close(); err != nil {
		return fmt.Errorf("close engine: %w", err)
	}
	return serveErr
}

// emulation makes what --scale-targets, --faults and --table-delete-delay ask for (nil
// for each that is off), and logs it: the server pays one nil check for each that is off.
func emulation(o serveOptions, log *slog.Logger) (*throttle.Limiter, *faults.Injector, *faults.Deletions) {
	var thr *throttle.Limiter
	if o.scaleTargets {
		thr = throttle.New(throttle.Options{Partition: o.partitionTarget, Account: o.accountTarget})
		log.Info("scale targets", "partition_per_s", o.partitionTarget, "account_per_s", o.accountTarget, "scope", "this front end")
	}
	var inj *faults.Injector
	if len(o.faultSpec) > 0 {
		seed := o.faultsSeed
		for seed == 0 {
			seed = rand.Uint64()
		}
		inj = faults.New(o.faultSpec, seed)
		log.Info("fault injection", "faults", o.faultSpec.String(), "seed", seed)
	}
	var dels *faults.Deletions
	if o.tableDeleteDelay > 0 {
		dels = faults.NewDeletions(o.tableDeleteDelay, nil)
		log.Info("table delete delay", "delay", o.tableDeleteDelay)
	}
	return thr, inj, dels
}

// hotPartitions makes the hot-partition tracker (package hotpart): the server's observer,
// /debug/partitions, the warning lines. Its Collector() is for the metrics registry.
func hotPartitions(o serveOptions, log *slog.Logger) *hotpart.Tracker {
	warn := o.hotWarn
	if warn == 0 {
		warn = -1 // hotpart.Options: negative disables the lines
	}
	return hotpart.New(hotpart.Options{Warn: warn, WarnAfter: o.hotWarnAfter, Logger: log.With("component", "hotpart")})
}

// listenDebug listens on the diagnostics address (--debug-addr) before anything is
// created, so that a busy or malformed address fails the start, as --addr does. The address
// has no authentication — metrics, /debug/backup and profiles are for the operator — so
// one that is not loopback gets a warning.
func listenDebug(addr string, log *slog.Logger) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("debug address: %w", err)
	}
	if a, ok := ln.Addr().(*net.TCPAddr); ok && !a.IP.IsLoopback() {
		log.Warn("the diagnostics address has no authentication (metrics, backups, profiles): keep it on loopback or a private network", "debug_addr", ln.Addr().String())
	}
	return ln, nil
}

// reopenOnHangup reopens the access log on each SIGHUP, for rotation tools (logrotate's
// create mode renames the file, then signals). Without an access log SIGHUP keeps its
// default action. The function returned stops it.
func reopenOnHangup(al *accesslog.Log, log *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			if err := al.Reopen(); err != nil {
				log.Error("access log: reopen failed; still writing to the previous file", "path", al.Path(), "err", err)
				continue
			}
			log.Info("access log reopened", "path", al.Path())
		}
	}()
	return func() { signal.Stop(hup); close(hup) }
}

// listenTLS wraps ln in TLS when the options ask for HTTPS (https reports it). help says
// how to trust the certificate of --tls-self-signed ("" otherwise).
func listenTLS(o serveOptions, ln net.Listener, log *slog.Logger) (_ net.Listener, https bool, help string, _ error) {
	certFile, keyFile := o.tlsCert, o.tlsKey
	switch {
	case o.tlsSelfSigned:
		c, k, created, err := tlsconf.SelfSigned(o.data)
		if err != nil {
			return nil, false, "", err
		}
		if created {
			log.Info("created a self-signed certificate", "cert", c)
		}
		certFile, keyFile = c, k
		abs, err := filepath.Abs(c)
		if err != nil {
			abs = c
		}
		help = tlsconf.TrustHelp(abs)
	case certFile == "":
		return ln, false, "", nil
	}
	r, err := tlsconf.NewReloader(certFile, keyFile, 0, log.With("component", "tls"))
	if err != nil {
		return nil, false, "", err
	}
	return tls.NewListener(ln, r.Config()), true, help, nil
}

// printConnectionStrings tells the user how to connect each SDK; https when TLS is on.
// Without withKeys it names each account's endpoint only.
func printConnectionStrings(w *os.File, addr string, accounts []auth.Account, https, withKeys bool) {
	host := displayHost(addr)
	for _, a := range accounts {
		if !withKeys {
			fmt.Fprintf(w, "Account %s at %s://%s/%s (its key is not printed while standard output is the access log)\n", a.Name, scheme(https), host, a.Name)
			continue
		}
		cs := fmt.Sprintf("DefaultEndpointsProtocol=%[1]s;AccountName=%[2]s;AccountKey=%[3]s;TableEndpoint=%[1]s://%[4]s/%[2]s;",
			scheme(https), a.Name, base64.StdEncoding.EncodeToString(a.Keys[0]), host)
		fmt.Fprintf(w, "Account %s — connection string for Go (aztables.NewServiceClientFromConnectionString), JavaScript (TableServiceClient.fromConnectionString), Python (TableServiceClient.from_connection_string) and .NET (new TableServiceClient(...)):\n  %s\n", a.Name, cs)
	}
}

// scheme is the URL scheme of the listeners: https when TLS is on.
func scheme(https bool) string {
	if https {
		return "https"
	}
	return "http"
}

// displayHost is a listener's address as a client reaches it: a wildcard address
// ("0.0.0.0:10002", ":10002") becomes 127.0.0.1.
func displayHost(addr string) string {
	if h, p, err := net.SplitHostPort(addr); err == nil && (h == "" || h == "0.0.0.0" || h == "::") {
		return net.JoinHostPort("127.0.0.1", p)
	}
	return addr
}

// pebbleLogger routes Pebble's background reports into the structured log.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
	os.Exit(1)
}
