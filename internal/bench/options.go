package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ceruleandb/cerulean/internal/storage"
)

// DevConnectionString is the well-known development-storage connection string
// (the public devstoreaccount1 key that Azurite and the storage emulator
// accept) pointed at the conventional Table port on loopback. It is the
// default so that `cerulean bench` against a local server needs no flags.
const DevConnectionString = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;" +
	"AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;" +
	"TableEndpoint=http://127.0.0.1:10002/devstoreaccount1;"

// EnvConnectionString names the environment variable that, when set,
// replaces DevConnectionString as the default for --connection-string. It
// keeps account keys off the command line (and out of shell history and ps).
const EnvConnectionString = "CERULEAN_BENCH_CONNECTION_STRING"

// Default option values, applied by Run to zero fields and used as the flag
// defaults by ParseFlags.
const (
	DefaultWorkers    = 32
	DefaultDuration   = 10 * time.Second
	DefaultEntitySize = 1024
	DefaultPreload    = 10000
	DefaultPartitions = 100
	DefaultLoad       = 100_000
	// DefaultIndexEntities is the indexquery workload's table size: the million.
	DefaultIndexEntities = 1_000_000
)

// PartitionTarget is Azure Table Storage's documented scalability target for
// a single partition: 2,000 entities per second (1 KiB entities). A partition
// driven past it on real Azure is expected to see 503 ServerBusy; the bench
// reports each workload's hottest partition against it.
const PartitionTarget = 2000.0

// Workload names, in the order Run executes them.
const (
	WorkloadInsert = "insert"
	WorkloadRead   = "read"
	WorkloadUpsert = "upsert"
	WorkloadUpdate = "update"
	WorkloadQuery  = "query"
	WorkloadScan   = "scan"
	WorkloadBatch  = "batch"
	// The load workloads write Options.Load entities each and time the whole load.
	WorkloadBatchLoad = "batchload"
	WorkloadBulkLoad  = "bulkload"
	// WorkloadFeed inserts into a table with Cerulean's change feed on while a reader
	// long-polls it (feed.go); only on request, since only Cerulean serves feeds.
	WorkloadFeed = "feed"
	// WorkloadIndexInsert and WorkloadIndexQuery measure Cerulean's secondary indexes
	// (indexes.go); only on request, since only Cerulean serves them.
	WorkloadIndexInsert = "indexinsert"
	WorkloadIndexQuery  = "indexquery"
)

// AllWorkloads lists every workload in execution order.
var AllWorkloads = []string{WorkloadInsert, WorkloadRead, WorkloadUpsert, WorkloadUpdate, WorkloadQuery, WorkloadScan, WorkloadBatch, WorkloadBatchLoad, WorkloadBulkLoad, WorkloadFeed, WorkloadIndexInsert, WorkloadIndexQuery}

// DefaultWorkloads are the workloads run when none are named: every workload any Azure
// Table endpoint serves (not Cerulean's own: feed, indexinsert, indexquery).
var DefaultWorkloads = AllWorkloads[:len(AllWorkloads)-3]

// workloadHelp describes each workload for --help.
var workloadHelp = map[string]string{
	WorkloadInsert:      "AddEntity of new entities with unique keys",
	WorkloadRead:        "GetEntity of random preloaded entities",
	WorkloadUpsert:      "UpsertEntity (the SDKs' default, InsertOrMerge) of random preloaded entities: updates in place, no ETag",
	WorkloadUpdate:      "If-Match read-modify-write of one shared counter; checks for lost updates",
	WorkloadQuery:       "partition query: whole preloaded partitions (PartitionKey eq '…', ~200 entities), following continuation; entities/s = entities returned",
	WorkloadScan:        "filtered scan of all preloaded entities for the 1% with Ratio lt 0.01, following continuation; entities/s = entities examined (preload × scans / time), returned in notes; at most 4 concurrent scans",
	WorkloadBatch:       "100-entity insert transactions in one partition; skipped if the server rejects batches",
	WorkloadBatchLoad:   "loads --load new entities with 100-entity insert transactions (Workers at once); entities/s of the whole load",
	WorkloadBulkLoad:    "loads --load new entities into an elastic table with Cerulean bulk requests (?comp=bulk, ~3 MiB each, Workers/8 at once); entities/s of the whole load; skipped on other servers",
	WorkloadIndexInsert: "AddEntity of new entities, as insert does, into three elastic tables with 0, 1 and 3 secondary indexes, in turns of a sixth of --duration each: entities/s with 1 index, the three rates and their ratios in notes; only when named, skipped on other servers",
	WorkloadIndexQuery:  "loads --index-entities entities (untimed, bulk) into an elastic table with an index on Tag (about 100 entities per value) and an unindexed copy TagCopy; then queries Tag eq '…' (entities/s returned, p50) and, for comparison, a few TagCopy eq '…' scans: the speed-up is the scans' p50 over the index queries'; only when named, skipped on other servers",
	WorkloadFeed:        "AddEntity of new entities, as insert does, into a table with Cerulean's change feed on while one reader long-polls the feed: entities/s (against insert's when both run), the delay from each write's acknowledgement to the reader seeing it (p50, p99), then the feed read from its beginning (changes/s); only when named, skipped on other servers",
}

// Limits that keep generated entities and batches inside Azure's service
// limits, so a failure means the server misbehaved rather than the bench
// asking for something Azure itself would reject: an entity is at most 1 MiB
// with strings counted as UTF-16 (2 bytes per character), a string property
// at most 64 KiB (32K characters), a batch request body at most 4 MiB.
const (
	maxEntitySize    = 500_000
	maxPropertyChars = 32_000
	maxBatchBytes    = 3_500_000
	maxBatchEntities = 100
	// queryPartitionRows is how many preloaded entities each preload
	// partition should hold, so a query workload op (a whole-partition scan)
	// spans several result pages on servers that page at 1,000 and is a
	// realistic unit of work.
	queryPartitionRows = 200
)

// Options configures Run. Zero values mean "use the default"; ParseFlags
// fills in the same defaults explicitly.
type Options struct {
	// ConnectionString is an Azure Storage connection string. Either
	// AccountName+AccountKey (with TableEndpoint for non-Azure servers) or
	// AccountName+SharedAccessSignature. Empty means DevConnectionString.
	// It is never printed: output shows only the endpoint.
	ConnectionString string
	// Workers is the number of concurrent goroutines per workload, each
	// issuing one request at a time. Default 32.
	Workers int
	// Duration is how long each workload runs. Default 10s.
	Duration time.Duration
	// EntitySize is the approximate size in bytes of each entity's string
	// payload (split into several properties past 32,000 characters); a few
	// small typed properties ride along. Default 1024, at most 500,000.
	EntitySize int
	// Preload is how many entities are loaded before the read, query and
	// scan workloads (not timed). Default 10000. They are spread over
	// min(Partitions, ceil(Preload/200)) partitions so that every partition a
	// query scans holds about 200 entities (all of them in one partition with
	// HotPartition).
	Preload int
	// Partitions is how many partitions insert, read, batch and the loads spread
	// over. Default 100.
	Partitions int
	// Load is how many entities batchload and bulkload each write. Default 100,000.
	Load int
	// IndexEntities is how many entities the indexquery workload loads. Default 1,000,000.
	IndexEntities int
	// HotPartition aims each workload's whole load at a single partition:
	// the partition stress test of Azure's partitioning guide.
	HotPartition bool
	// Workloads is the subset of AllWorkloads to run; they always run in
	// AllWorkloads order. Empty means all of them.
	Workloads []string
	// Table is the table to use. Empty means "bench" plus random characters.
	// A table the bench created is deleted at the end unless Keep; a table
	// that already existed is reused and never deleted, so pointing the
	// bench at a real table cannot destroy it.
	Table string
	// Keep leaves the table in place at the end.
	Keep bool
	// JSON makes Run print a single JSON document (options and results) to
	// out instead of the text report.
	JSON bool
	// Consistency, when set, is sent as x-ms-consistency-level on every read
	// (GET) of every workload: one of Cerulean's levels (Strong,
	// BoundedStaleness, Session, ConsistentPrefix, Eventual), to measure
	// reads served by read replicas. Empty sends no header (the server's
	// default). The update workload's reads get it too: below Strong they may
	// read a stale counter and retry on 412, which is what such a client sees.
	Consistency string
	// Retry gives the measured requests the SDK's default retry policy (three
	// retries, exponential back-off from 800 ms with jitter), as an application
	// has, instead of one try: against a server enforcing scale targets
	// (cerulean serve --scale-targets, or Azure) throttled requests are then
	// retried rather than counted as errors. Either way each Result counts the
	// 503 ServerBusy answers and the retries the SDK's pipeline saw.
	Retry bool
	// Client is how the measured requests are sent: ClientSDK (the default; the official Go
	// SDK, what an application sees) or ClientRaw (the bench's light HTTP/1.1 client, so
	// that on a machine shared with the server the server's capacity shows).
	Client string
	// Floor also runs every workload against the floor — an in-process server replaying
	// the measured server's answers without doing any work (floor.go) — with the same
	// client, and reports each workload's ratio to it. bulkload has no floor.
	Floor bool
	// DurableFloor, if set, is a directory on the disk the measured server writes to:
	// every write workload (insert, upsert, update, batch, batchload) then also runs against
	// the durable floor — the floor syncing each request that changes data to a log in
	// that directory before it answers (durable.go) — and reports its ratio to it. It
	// implies Floor.
	DurableFloor string
	// EngineFloor, if set, is a directory on the disk the measured server writes to:
	// every write workload then also runs against the engine floor — the floor writing
	// each request that changes data into Cerulean's own embedded engine (Pebble), opened
	// there with a server's default options, as one synced Apply of as many entities as
	// the request carries (enginefloor.go) — and reports its ratio to it. It implies
	// Floor.
	EngineFloor string
	// Rounds runs each workload this many times (default 1) and reports the median round
	// (by entities/s), with P50 and P99 the medians over rounds; with Floor the floor runs
	// after each round of the server.
	Rounds int
	// LatencyAt, when in (0, 1], runs Rounds more rounds of each workload but the loads
	// paced at this fraction of the measured (median) rate, and reports their median
	// latencies: latency at a given load, e.g. 0.5 for half of the maximum rate. Latencies
	// of paced rounds are measured from when each request was due, so queueing behind a
	// stall counts. The load workloads are not paced.
	LatencyAt float64
	// Progress, when non-nil, receives a carriage-return-updated progress
	// line once a second (e.g. os.Stderr). It is never written to out.
	Progress io.Writer
}

// tableNameRE is Azure's table-name rule: 3-63 alphanumerics starting with a
// letter.
var tableNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]{2,62}$`)

// normalize returns a copy of o with defaults applied, or an error naming the
// first invalid field.
func (o Options) normalize() (Options, error) {
	if o.ConnectionString == "" {
		o.ConnectionString = DevConnectionString
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.Duration == 0 {
		o.Duration = DefaultDuration
	}
	if o.EntitySize == 0 {
		o.EntitySize = DefaultEntitySize
	}
	if o.Preload == 0 {
		o.Preload = DefaultPreload
	}
	if o.Partitions == 0 {
		o.Partitions = DefaultPartitions
	}
	if o.IndexEntities == 0 {
		o.IndexEntities = DefaultIndexEntities
	}
	if o.Load == 0 {
		o.Load = DefaultLoad
	}
	if o.Client == "" {
		o.Client = ClientSDK
	}
	for _, d := range []struct{ flag, dir string }{{"durable-floor", o.DurableFloor}, {"engine-floor", o.EngineFloor}} {
		if d.dir == "" {
			continue
		}
		if fi, err := os.Stat(d.dir); err != nil || !fi.IsDir() {
			return Options{}, fmt.Errorf("bench: --%s %s: not a directory", d.flag, d.dir)
		}
		if inMemory(d.dir) {
			return Options{}, fmt.Errorf("bench: --%s %s: in memory (tmpfs), where a sync writes nothing to disk: give a directory on the disk the server writes to", d.flag, d.dir)
		}
		o.Floor = true
	}
	if o.Rounds == 0 {
		o.Rounds = 1
	}
	switch {
	case o.Workers < 0:
		return o, fmt.Errorf("bench: workers must be positive, got %d", o.Workers)
	case o.Duration < 0:
		return o, fmt.Errorf("bench: duration must be positive, got %v", o.Duration)
	case o.EntitySize < 0 || o.EntitySize > maxEntitySize:
		return o, fmt.Errorf("bench: entity size must be between 1 and %d bytes, got %d", maxEntitySize, o.EntitySize)
	case o.Preload < 0:
		return o, fmt.Errorf("bench: preload must be positive, got %d", o.Preload)
	case o.Partitions < 0:
		return o, fmt.Errorf("bench: partitions must be positive, got %d", o.Partitions)
	case o.IndexEntities < 0:
		return o, fmt.Errorf("bench: index entities must be positive, got %d", o.IndexEntities)
	case o.Load < 0:
		return o, fmt.Errorf("bench: load must be positive, got %d", o.Load)
	case o.Client != ClientSDK && o.Client != ClientRaw:
		return o, fmt.Errorf("bench: client %q: want %s or %s", o.Client, ClientSDK, ClientRaw)
	case o.Rounds < 0:
		return o, fmt.Errorf("bench: rounds must be positive, got %d", o.Rounds)
	case o.LatencyAt < 0 || o.LatencyAt > 1:
		return o, fmt.Errorf("bench: latency-at must be a fraction of the measured rate in (0, 1], got %g", o.LatencyAt)
	case o.Table != "" && !tableNameRE.MatchString(o.Table):
		return o, fmt.Errorf("bench: invalid table name %q: want 3-63 letters and digits starting with a letter", o.Table)
	}
	if _, ok := storage.ParseConsistency(o.Consistency); o.Consistency != "" && !ok {
		return o, fmt.Errorf("bench: consistency %q: want Strong, BoundedStaleness, Session, ConsistentPrefix or Eventual", o.Consistency)
	}
	wl, err := normalizeWorkloads(o.Workloads)
	if err != nil {
		return o, err
	}
	o.Workloads = wl
	return o, nil
}

// normalizeWorkloads validates names, drops duplicates and returns them in
// execution order; empty means all.
func normalizeWorkloads(names []string) ([]string, error) {
	if len(names) == 0 {
		return slices.Clone(DefaultWorkloads), nil
	}
	seen := map[string]bool{}
	for _, n := range names {
		n = strings.ToLower(strings.TrimSpace(n))
		switch {
		case n == "":
			continue
		case n == "all":
			return slices.Clone(DefaultWorkloads), nil
		case !slices.Contains(AllWorkloads, n):
			return nil, fmt.Errorf("bench: unknown workload %q (want %s)", n, strings.Join(AllWorkloads, ", "))
		}
		seen[n] = true
	}
	var out []string
	for _, n := range AllWorkloads {
		if seen[n] {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("bench: no workloads selected")
	}
	return out, nil
}

// ParseFlags parses the `cerulean bench` command line (args excludes the
// subcommand name) into Options with every default filled in. -h/--help
// prints usage to stderr and returns flag.ErrHelp; other errors are returned
// after flag's own message and usage. Positional arguments are rejected.
func ParseFlags(args []string) (Options, error) {
	return parseFlags(args, os.Stderr)
}

// ParseFlagsTo is ParseFlags writing flag errors and the -h text to w instead
// of stderr, for a caller that reports them itself.
func ParseFlagsTo(args []string, w io.Writer) (Options, error) {
	return parseFlags(args, w)
}

// Usage writes the -h text of `cerulean bench` (workloads and flags) to w.
func Usage(w io.Writer) {
	_, _ = parseFlags([]string{"-h"}, w)
}

// parseFlags is ParseFlags with the usage destination as a parameter, so
// tests can keep it quiet.
func parseFlags(args []string, usage io.Writer) (Options, error) {
	var o Options
	var workloads string
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.Usage = func() { writeUsage(fs) }
	// The flag's default stays empty and is resolved after parsing: a
	// default shown in -h output would print the account key from the
	// environment.
	fs.StringVar(&o.ConnectionString, "connection-string", "",
		"Azure Storage `connection string` (default $"+EnvConnectionString+
			", else the devstoreaccount1 development account at http://127.0.0.1:10002)")
	fs.IntVar(&o.Workers, "workers", DefaultWorkers, "concurrent workers per workload")
	fs.DurationVar(&o.Duration, "duration", DefaultDuration, "how long each workload runs")
	fs.IntVar(&o.EntitySize, "entity-size", DefaultEntitySize, "approximate payload bytes per entity")
	fs.IntVar(&o.Preload, "preload", DefaultPreload, "entities loaded before the read, query and scan workloads")
	fs.IntVar(&o.Partitions, "partitions", DefaultPartitions, "partitions the load is spread over")
	fs.IntVar(&o.Load, "load", DefaultLoad, "entities batchload and bulkload each write")
	fs.IntVar(&o.IndexEntities, "index-entities", DefaultIndexEntities, "entities the indexquery workload loads (about 100 share each indexed value)")
	fs.BoolVar(&o.HotPartition, "hot-partition", false, "aim all load at a single partition (partition stress test)")
	fs.StringVar(&workloads, "workloads", strings.Join(DefaultWorkloads, ","), "comma-separated subset of "+strings.Join(AllWorkloads, ",")+" (feed, Cerulean's change feed, only when named)")
	fs.StringVar(&o.Table, "table", "", `table to use (default "bench" + random; a pre-existing table is reused and never dropped)`)
	fs.BoolVar(&o.Keep, "keep", false, "keep the table at the end")
	fs.StringVar(&o.Consistency, "consistency", "", "send x-ms-consistency-level `LEVEL` on every read (Strong, BoundedStaleness, Session, ConsistentPrefix, Eventual), e.g. to measure reads served by Cerulean's read replicas; default none (the server's default)")
	fs.BoolVar(&o.Retry, "retry", false, "give the measured requests the SDK's default retry policy (3 retries, back-off from 800ms), as an application has; throttled (503) answers and retries are reported either way")
	fs.StringVar(&o.Client, "client", ClientSDK, "how requests are sent: sdk (the official Go SDK, what applications see) or raw (the bench's light keep-alive HTTP client, SharedKeyLite or SAS signing, so the server's own capacity shows on a shared machine)")
	fs.BoolVar(&o.Floor, "floor", false, "also run each workload against an in-process server that replays the measured server's answers without doing any work (the machine's HTTP floor) and print the ratio to it")
	fs.StringVar(&o.DurableFloor, "durable-floor", "", "with a `directory` on the disk the server writes to: also run each write workload against the floor made durable — it writes each request that changes data to a log there and syncs it (group-committed) before answering, the least a durable server does — and print the ratio to it (implies --floor)")
	fs.StringVar(&o.EngineFloor, "engine-floor", "", "with a `directory` on the disk the server writes to: also run each write workload against the floor that stores each request that changes data in Cerulean's own embedded engine (Pebble, opened there with a server's defaults: existence checks, synced log, memtables, flushes, compactions) before answering, without parsing it — what the storage engine alone leaves of the durable floor — and print the ratio to it (implies --floor)")
	fs.IntVar(&o.Rounds, "rounds", 1, "run each workload this many times and report the median round")
	fs.Float64Var(&o.LatencyAt, "latency-at", 0, "after the rounds, run each workload --rounds more times paced at this `fraction` of its measured rate (e.g. 0.5) and report the median latencies")
	fs.BoolVar(&o.JSON, "json", false, "print one JSON document with the options and all results")
	if err := fs.Parse(args); err != nil {
		return Options{}, err
	}
	if fs.NArg() > 0 {
		return Options{}, fmt.Errorf("bench: unexpected argument %q", fs.Arg(0))
	}
	if o.ConnectionString == "" {
		o.ConnectionString = os.Getenv(EnvConnectionString)
	}
	// Explicit zeros are errors on the command line (in Options they mean
	// "default"), so check before normalize turns them into defaults.
	for _, c := range []struct {
		name string
		v    int64
	}{
		{"workers", int64(o.Workers)}, {"duration", int64(o.Duration)},
		{"entity-size", int64(o.EntitySize)}, {"preload", int64(o.Preload)},
		{"partitions", int64(o.Partitions)}, {"load", int64(o.Load)}, {"index_entities", int64(o.IndexEntities)}, {"rounds", int64(o.Rounds)},
	} {
		if c.v <= 0 {
			return Options{}, fmt.Errorf("bench: --%s must be positive", c.name)
		}
	}
	o.Workloads = strings.Split(workloads, ",")
	return o.normalize()
}

// writeUsage prints the --help text: what the bench does, each workload, and the flags.
func writeUsage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprint(w, "Usage: cerulean bench [flags]\n\n"+
		"Load-tests an Azure Table endpoint (Cerulean, Azurite, Azure) through the official Go SDK\n"+
		"(--client raw: the bench's own light HTTP client; --floor: also against a do-nothing server).\n\n"+
		"Workloads, run in this order:\n")
	for _, name := range AllWorkloads {
		fmt.Fprintf(w, "  %-9s", name)
		col := 11
		for _, word := range strings.Fields(workloadHelp[name]) {
			if col+1+len(word) > 80 && col > 11 {
				fmt.Fprintf(w, "\n%11s", "")
				col = 11
			}
			fmt.Fprintf(w, " %s", word)
			col += 1 + len(word)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, "\nFlags:\n")
	fs.PrintDefaults()
}
