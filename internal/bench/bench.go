package bench

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/ceruleandb/cerulean/client"
)

// httpTimeout bounds a single HTTP exchange so that a wedged server ends a
// workload with errors instead of hanging the bench.
const httpTimeout = 60 * time.Second

// cleanupTimeout bounds table deletion, which runs even after ctx is done.
const cleanupTimeout = 30 * time.Second

// bench is the state of one Run.
type bench struct {
	opts     Options
	endpoint string
	text     io.Writer // text report; io.Discard in JSON mode
	hc       *http.Client
	// pipeline counts what the measured client's SDK pipeline sees (Result.Throttled,
	// Result.Retries).
	pipeline *pipelineCounts

	table      *aztables.Client // measured operations: no SDK retries
	setupTable *aztables.Client // setup, verification, teardown: SDK default retries
	rawEP      *rawEndpoint     // --client raw: the measured endpoint

	// --floor: the server's answers, recorded, and the floor that replays them.
	rec        *recorder
	floor      *floor
	floorRawEP *rawEndpoint
	floorTable *aztables.Client
	floorHC    *http.Client
	onFloor    bool    // the workload being run goes to the floor
	rate       float64 // ops/s the workload being run is paced at; 0 runs flat out
	// alt, when set, is where the workload being run sends its measured requests instead
	// of the bench table: the table of a workload that needs its own (feed.go,
	// indexes.go). measuredClient makes the SDK clients for such tables.
	alt            *altTable
	measuredClient func(table string) (*aztables.Client, error)
	// lastInsert is the insert workload's result in this run, which the feed workload
	// compares its inserts with.
	lastInsert *Result
	round      int // counts rounds, so that each round's keys are new

	runID   string   // distinguishes this run's keys from earlier runs on a reused table
	payload []string // the string payload, in ≤32,000-character properties
	pkWidth int      // digits in generated partition keys

	preloadParts int   // partitions the preloaded entities are spread over
	preloadErr   error // why preloading failed, if it did
	preloaded    bool

	tableGenerated bool // the table name is ours, not the caller's

	// indexQuery is the indexquery workload's loaded table, kept across its rounds.
	indexQuery *indexQueryTable
	// cleanups run at the end of Run, last first (tables workloads kept across rounds).
	cleanups []func()
}

// Run executes the selected workloads against opts.ConnectionString and
// returns one Result per workload, in AllWorkloads order. In text mode it
// writes a report to out as it goes; with opts.JSON it writes exactly one
// JSON document (options, results, and an error string if any) to out and
// nothing else.
//
// Run fails early, with no results, if the options are invalid or the table
// cannot be created (in JSON mode the latter still prints a document, with
// the error and no results). Otherwise it runs every workload and returns the joined
// errors of those that could not run or whose checks failed (a lost update,
// a failed preload), of cancellation, and of cleanup. Individual failed
// requests are not errors of Run: they are counted in Result.Errors, since
// on real Azure throttling is an expected outcome of the test.
func Run(ctx context.Context, opts Options, out io.Writer) ([]Result, error) {
	opts, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	b, err := newBench(opts, out)
	if err != nil {
		return nil, err
	}
	defer b.hc.CloseIdleConnections()
	if b.floorHC != nil {
		defer b.floorHC.CloseIdleConnections()
	}

	results := []Result{}
	var errs []error
	created, err := b.createTable(ctx)
	if err != nil {
		b.writeJSON(out, results, err)
		return nil, err
	}
	if b.opts.Floor {
		if err := b.startFloor(); err != nil {
			errs = append(errs, err)
			b.opts.Floor = false
		} else {
			defer b.floor.close()
		}
	}
	b.writeHeader(created)

	for _, name := range b.opts.Workloads {
		if ctx.Err() != nil {
			break
		}
		r, err := b.runRounds(ctx, name)
		if name == WorkloadInsert {
			b.lastInsert = &r
		}
		results = append(results, r)
		writeResultText(b.text, r)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	for _, f := range slices.Backward(b.cleanups) {
		f()
	}

	switch {
	case !created:
		fmt.Fprintf(b.text, "table %s existed before the run: left in place\n", b.opts.Table)
	case b.opts.Keep:
		fmt.Fprintf(b.text, "table %s kept\n", b.opts.Table)
	default:
		// Delete even when ctx is cancelled (Ctrl-C): a stray bench table
		// on real Azure costs money.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		_, err := b.setupTable.Delete(dctx, nil)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("bench: deleting table %s: %s", b.opts.Table, summarize(err)))
		} else {
			fmt.Fprintf(b.text, "table %s deleted\n", b.opts.Table)
		}
	}

	err = errors.Join(errs...)
	b.writeJSON(out, results, err)
	return results, err
}

// newBench builds the HTTP client and the two SDK clients.
func newBench(opts Options, out io.Writer) (*bench, error) {
	b := &bench{opts: opts, endpoint: endpointOf(opts.ConnectionString), text: out, pipeline: &pipelineCounts{}}
	if opts.JSON {
		b.text = io.Discard
	}
	b.runID = randomID(8)
	if b.opts.Table == "" {
		b.opts.Table = "bench" + b.runID
		b.tableGenerated = true
	}
	b.pkWidth = max(4, len(strconv.Itoa(max(opts.Partitions, 1)-1)))
	b.payload = makePayload(opts.EntitySize)

	b.hc = &http.Client{Timeout: httpTimeout, Transport: newTransport(opts.Workers, nil)}
	measuredHC := b.hc
	if opts.Floor {
		b.rec = newRecorder()
		measuredHC = &http.Client{Timeout: httpTimeout, Transport: recordingTransport{b.hc.Transport, b.rec}}
	}
	var perCall []policy.Policy
	if opts.Consistency != "" {
		perCall = append(perCall, consistencyPolicy(opts.Consistency))
	}
	mk := func(table string, retry policy.RetryOptions, counted bool) (*aztables.Client, error) {
		co := azcore.ClientOptions{Transport: b.hc, Retry: retry, PerCallPolicies: perCall}
		if counted {
			co.Transport = measuredHC
			co.PerCallPolicies = append(slices.Clip(perCall), callCounter{b.pipeline})
			co.PerRetryPolicies = []policy.Policy{tryCounter{b.pipeline}}
		}
		svc, err := sdkServiceClient(opts.ConnectionString, &aztables.ClientOptions{ClientOptions: co})
		if err != nil {
			// The SDK's message can echo the string; keep keys out of output.
			return nil, errors.New("bench: invalid connection string: want AccountName plus AccountKey or SharedAccessSignature")
		}
		return svc.NewClient(table), nil
	}
	var err error
	// MaxRetries < 0 means one try. Setup retries 3 times but starts at
	// 200ms instead of the SDK's 800ms, so a wrong port fails in about a
	// second and a half rather than six; Retry-After from a throttling
	// server is honoured either way.
	measured := policy.RetryOptions{MaxRetries: -1}
	if opts.Retry {
		measured = policy.RetryOptions{} // the SDK's defaults
	}
	if b.table, err = mk(b.opts.Table, measured, true); err != nil {
		return nil, err
	}
	b.measuredClient = func(table string) (*aztables.Client, error) { return mk(table, measured, true) }
	if b.setupTable, err = mk(b.opts.Table, policy.RetryOptions{MaxRetries: 3, RetryDelay: 200 * time.Millisecond, MaxRetryDelay: 5 * time.Second}, false); err != nil {
		return nil, err
	}
	if opts.Client == ClientRaw {
		if b.rawEP, err = newRawEndpoint(opts.ConnectionString, b.opts.Table, nil); err != nil {
			return nil, errors.New("bench: invalid connection string: want AccountName plus AccountKey or SharedAccessSignature")
		}
		b.rawEP.rec = b.rec
		b.rawEP.consistency = opts.Consistency
	}
	return b, nil
}

// sdkServiceClient is aztables.NewServiceClientFromConnectionString, except that a SAS
// with a TableEndpoint goes to that endpoint: the SDK sends SAS connection strings to
// https://<account>.table.core.windows.net whatever TableEndpoint says, which would put a
// local server (Cerulean, Azurite) out of reach with a SAS.
func sdkServiceClient(cs string, o *aztables.ClientOptions) (*aztables.ServiceClient, error) {
	f, err := client.ParseConnectionString(cs)
	if err != nil {
		return nil, err
	}
	if sas, ep := f["sharedaccesssignature"], f["tableendpoint"]; sas != "" && ep != "" {
		return aztables.NewServiceClientWithNoCredential(strings.TrimSuffix(ep, "/")+"/?"+strings.TrimPrefix(sas, "?"), o)
	}
	return aztables.NewServiceClientFromConnectionString(cs, o)
}

// newTransport is the SDK clients' HTTP transport: one idle connection per worker plus
// headroom for setup calls (MaxIdleConns 0: no global cap); the default of two idle
// connections would make most requests open a fresh connection and measure TCP setup
// instead of the server.
func newTransport(workers int, tlsConf *tls.Config) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   workers + 8,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
		TLSClientConfig:       tlsConf,
	}
}

// startFloor starts the floor (floor.go) and the clients that reach it: the same kind of
// client as the measured one, with the same account, workers and connections.
func (b *bench) startFloor() error {
	u, err := url.Parse(b.endpoint)
	if err != nil {
		return fmt.Errorf("bench: floor: endpoint: %w", err)
	}
	f, err := startFloor(b.rec, u.Scheme == "https", strings.TrimSuffix(u.EscapedPath(), "/"))
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	cs, err := f.connectionString(b.opts.ConnectionString)
	if err == nil {
		if b.opts.Client == ClientRaw {
			b.floorRawEP, err = newRawEndpoint(cs, b.opts.Table, f.clientTLS)
		} else {
			b.floorHC = &http.Client{Timeout: httpTimeout, Transport: newTransport(b.opts.Workers, f.clientTLS)}
			var svc *aztables.ServiceClient
			svc, err = sdkServiceClient(cs, &aztables.ClientOptions{ClientOptions: azcore.ClientOptions{
				Transport: b.floorHC, Retry: policy.RetryOptions{MaxRetries: -1}}})
			if err == nil {
				b.floorTable = svc.NewClient(b.opts.Table)
			}
		}
	}
	if err != nil {
		f.close()
		return errors.New("bench: floor: cannot point the connection string at the floor")
	}
	if b.opts.DurableFloor != "" {
		if f.log, err = openDurableLog(b.opts.DurableFloor, durableRingSize); err != nil {
			f.close()
			return fmt.Errorf("bench: %w", err)
		}
	}
	if b.opts.EngineFloor != "" {
		if f.engine, err = openEngineLog(b.opts.EngineFloor); err != nil {
			f.close()
			return fmt.Errorf("bench: %w", err)
		}
	}
	b.floor = f
	return nil
}

// newTarget returns a target for one worker: the measured client kind, aimed at the server
// or, while b.onFloor, at the floor.
func (b *bench) newTarget() target {
	switch {
	case b.alt != nil && b.alt.raw != nil:
		return newRawTarget(b.alt.raw)
	case b.alt != nil:
		return sdkTarget{b.alt.sdk}
	case b.opts.Client == ClientRaw && b.onFloor:
		return newRawTarget(b.floorRawEP)
	case b.opts.Client == ClientRaw:
		return newRawTarget(b.rawEP)
	case b.onFloor:
		return sdkTarget{b.floorTable}
	}
	return sdkTarget{b.table}
}

// altTable is a workload's own table through the measured client kind (bench.alt).
type altTable struct {
	sdk *aztables.Client
	raw *rawEndpoint // --client raw
}

// altTable makes the measured clients for table name.
func (b *bench) altTable(name string) (*altTable, error) {
	sdk, err := b.measuredClient(name)
	if err != nil {
		return nil, err
	}
	a := &altTable{sdk: sdk}
	if b.opts.Client == ClientRaw {
		if a.raw, err = newRawEndpoint(b.opts.ConnectionString, name, nil); err != nil {
			return nil, errors.New("bench: invalid connection string: want AccountName plus AccountKey or SharedAccessSignature")
		}
		a.raw.consistency = b.opts.Consistency
	}
	return a, nil
}

// createTable creates the table, reporting whether this run created it. A
// pre-existing table is accepted only when the caller named it; a collision
// on a generated name is an error (it would mean someone else's table).
func (b *bench) createTable(ctx context.Context) (bool, error) {
	_, err := b.setupTable.CreateTable(ctx, nil)
	if err == nil {
		return true, nil
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.ErrorCode == string(aztables.TableAlreadyExists) && !b.tableGenerated {
		return false, nil
	}
	return false, fmt.Errorf("bench: creating table %s at %s: %s", b.opts.Table, b.endpoint, summarize(err))
}

func (b *bench) writeHeader(created bool) {
	state := "created for this run"
	if !created {
		state = "existing, reused"
	}
	hot := fmt.Sprintf("%d partitions", b.opts.Partitions)
	if b.opts.HotPartition {
		hot = "one hot partition"
	}
	fmt.Fprintf(b.text, "cerulean bench: %s, table %s (%s)\n", b.endpoint, b.opts.Table, state)
	retries := "SDK retries off"
	if b.opts.Retry {
		retries = "SDK default retries (3)"
	}
	fmt.Fprintf(b.text, "  %d workers, %v per workload, %s-byte payloads, %s; workloads %s; %s\n",
		b.opts.Workers, b.opts.Duration, commas(float64(b.opts.EntitySize)), hot, strings.Join(b.opts.Workloads, ","), retries)
	if b.opts.Consistency != "" {
		fmt.Fprintf(b.text, "  reads sent with x-ms-consistency-level: %s\n", b.opts.Consistency)
	}
}

func (b *bench) writeJSON(out io.Writer, results []Result, err error) {
	if !b.opts.JSON {
		return
	}
	rep := jsonReport{
		Options: jsonOptions{
			Endpoint:        b.endpoint,
			Table:           b.opts.Table,
			Workers:         b.opts.Workers,
			DurationSeconds: b.opts.Duration.Seconds(),
			EntitySize:      b.opts.EntitySize,
			Preload:         b.opts.Preload,
			Partitions:      b.opts.Partitions,
			Load:            b.opts.Load,
			HotPartition:    b.opts.HotPartition,
			Workloads:       b.opts.Workloads,
			Keep:            b.opts.Keep,
			Retries:         retriesPerRequest(b.opts.Retry),
			Consistency:     b.opts.Consistency,
		},
		Results: results,
	}
	if rep.Results == nil {
		rep.Results = []Result{}
	}
	if err != nil {
		rep.Error = err.Error()
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	_ = enc.Encode(rep) // nowhere better to report a failed write to out
}

// endpointOf derives the table endpoint from a connection string the way the
// SDK does, for display; it never returns key material.
func endpointOf(cs string) string {
	m := map[string]string{}
	for _, part := range strings.Split(strings.TrimRight(cs, ";"), ";") {
		k, v, _ := strings.Cut(part, "=")
		m[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if te := m["TableEndpoint"]; te != "" {
		if i := strings.IndexByte(te, '?'); i >= 0 { // SAS on the endpoint
			te = te[:i]
		}
		return te
	}
	proto, suffix := m["DefaultEndpointsProtocol"], m["EndpointSuffix"]
	if proto == "" || m["AccountKey"] == "" {
		proto = "https"
	}
	if suffix == "" {
		suffix = "core.windows.net"
	}
	return fmt.Sprintf("%s://%s.table.%s", proto, m["AccountName"], suffix)
}

// randomID returns n random lowercase letters and digits.
func randomID(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rand.IntN(len(alphabet))]
	}
	return string(b)
}

// makePayload returns size bytes of printable ASCII, split into properties
// of at most maxPropertyChars (Azure's 64 KiB string-property limit counts
// UTF-16, i.e. 2 bytes per character). The bytes vary so that a server that
// compresses values does not get an unrealistically easy ride.
func makePayload(size int) []string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	r := rand.New(rand.NewPCG(1, 2))
	var chunks []string
	for size > 0 {
		n := min(size, maxPropertyChars)
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		chunks = append(chunks, string(b))
		size -= n
	}
	return chunks
}

// pk names partition i of a workload's key space.
func (b *bench) pk(prefix string, i int) string {
	s := strconv.Itoa(i)
	if len(s) < b.pkWidth {
		s = strings.Repeat("0", b.pkWidth-len(s)) + s
	}
	return prefix + s
}

// appendEntity appends the JSON of one bench entity: the payload plus a few
// typed properties (Int32, Int64, Double, Boolean, DateTime) so the server
// exercises its type handling, not just strings.
func (b *bench) appendEntity(buf []byte, pk, rk string, worker int, seq int64, created []byte) []byte {
	buf = append(buf, `{"PartitionKey":"`...)
	buf = append(buf, pk...)
	buf = append(buf, `","RowKey":"`...)
	buf = append(buf, rk...)
	buf = append(buf, '"')
	for i, chunk := range b.payload {
		buf = append(buf, `,"Payload`...)
		if i > 0 {
			buf = strconv.AppendInt(buf, int64(i+1), 10)
		}
		buf = append(buf, `":"`...)
		buf = append(buf, chunk...)
		buf = append(buf, '"')
	}
	buf = append(buf, `,"Worker":`...)
	buf = strconv.AppendInt(buf, int64(worker), 10)
	buf = append(buf, `,"Seq@odata.type":"Edm.Int64","Seq":"`...)
	buf = strconv.AppendInt(buf, seq, 10)
	buf = append(buf, `","Ratio@odata.type":"Edm.Double","Ratio":`...)
	buf = strconv.AppendFloat(buf, float64(seq%1000)/1000+0.0005, 'f', 4, 64)
	buf = append(buf, `,"Flag":`...)
	buf = strconv.AppendBool(buf, seq%2 == 0)
	buf = append(buf, `,"Created@odata.type":"Edm.DateTime","Created":"`...)
	buf = append(buf, created...)
	buf = append(buf, `"}`...)
	return buf
}

// stamp appends the time now as an Edm.DateTime value (seven fractional digits: Azure's
// resolution is 100 ns), for appendEntity's Created. A batch formats it once for all its
// entities: formatting it for each was a tenth of the raw client's work on batches.
func stamp(b []byte) []byte { return time.Now().UTC().AppendFormat(b, "2006-01-02T15:04:05.0000000Z") }

// ---- driving workers ----

// stats accumulates one worker's (or, merged, one workload's) counts.
type stats struct {
	ops, entities, errors int64
	conflicts             int64 // update: 412 responses retried
	hist                  histogram
	perPart               []int64 // entities per partition index
	errKinds              map[string]int64
	firstErr              string
}

func (s *stats) fail(err error) {
	s.errors++
	if s.errKinds == nil {
		s.errKinds = map[string]int64{}
	}
	s.errKinds[errKind(err)]++
	if s.firstErr == "" {
		s.firstErr = summarize(err)
	}
}

func (s *stats) merge(o *stats) {
	s.ops += o.ops
	s.entities += o.entities
	s.errors += o.errors
	s.conflicts += o.conflicts
	s.hist.merge(&o.hist)
	if len(s.perPart) < len(o.perPart) {
		s.perPart = append(s.perPart, make([]int64, len(o.perPart)-len(s.perPart))...)
	}
	for i, v := range o.perPart {
		s.perPart[i] += v
	}
	for k, v := range o.errKinds {
		if s.errKinds == nil {
			s.errKinds = map[string]int64{}
		}
		s.errKinds[k] += v
	}
	if s.firstErr == "" {
		s.firstErr = o.firstErr
	}
}

// errNote describes the errors, most frequent kind first, e.g.
// "errors: 12× 503 ServerBusy, 1× transport; first: …".
func (s *stats) errNote() string {
	if s.errors == 0 {
		return ""
	}
	type kv struct {
		k string
		v int64
	}
	var kinds []kv
	for k, v := range s.errKinds {
		kinds = append(kinds, kv{k, v})
	}
	// Few kinds: insertion sort by count desc, then name.
	for i := 1; i < len(kinds); i++ {
		for j := i; j > 0 && (kinds[j].v > kinds[j-1].v || kinds[j].v == kinds[j-1].v && kinds[j].k < kinds[j-1].k); j-- {
			kinds[j], kinds[j-1] = kinds[j-1], kinds[j]
		}
	}
	parts := make([]string, len(kinds))
	for i, e := range kinds {
		parts[i] = fmt.Sprintf("%s× %s", commas(float64(e.v)), e.k)
	}
	return "errors: " + strings.Join(parts, ", ") + "; first: " + s.firstErr
}

// worker is one load-generating goroutine's state.
type worker struct {
	id       int
	t        target // how this worker reaches the endpoint
	rng      *rand.Rand
	seq      int64
	rkPrefix string // rowKey's "<run>-<round>-<worker>-", built for round rkRound
	rkRound  int
	stamp    []byte // appendEntity's Created, formatted once per operation
	buf      []byte
	bufs     [][]byte // batch: one buffer per action
	deadline time.Time
	stats
}

// stopping reports whether the workload's time is up. Operations that loop
// internally (update's conflict retries) check it to give up promptly.
func (w *worker) stopping() bool { return !time.Now().Before(w.deadline) }

// opFunc performs one operation. It returns the entities it wrote or read
// and the index of the partition they belong to. n == 0 with a nil error
// means "nothing happened" (e.g. time ran out mid-retry) and is not counted.
type opFunc func(ctx context.Context, w *worker) (n int, part int, err error)

// drive runs op in a loop on Workers goroutines for Duration and returns the
// merged stats and the elapsed seconds. An operation in flight when time is
// up completes and is counted; elapsed time runs until the last one returns,
// so rates are not inflated by work finished after the clock stopped.
// Operations that fail because ctx was cancelled are not counted at all.
func (b *bench) drive(ctx context.Context, label string, nParts int, op opFunc) (*stats, float64) {
	var liveOps, liveErrs atomic.Int64
	total := b.opts.Duration
	stopProgress := startProgress(b.opts.Progress, &liveOps, func(el time.Duration, n int64, rate float64) string {
		return fmt.Sprintf("%-7s %3.0fs/%.0fs  %s ops  %s ops/s  %s errors", label,
			el.Seconds(), total.Seconds(), commas(float64(n)), commas(rate), commas(float64(liveErrs.Load())))
	})
	start := time.Now()
	deadline := start.Add(b.opts.Duration)
	seed := rand.Uint64()
	workers := make([]*worker, b.opts.Workers)
	// With a rate (paced rounds), each worker sends every interval, the workers evenly
	// staggered, and a latency is measured from when its request was due, not from when
	// it went out: a server that stalls is charged for the requests queued behind the
	// stall (no coordinated omission).
	var interval time.Duration
	if b.rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(len(workers)) / b.rate)
	}
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{id: i, rng: rand.New(rand.NewPCG(seed, uint64(i))), deadline: deadline}
		w.perPart = make([]int64, nParts)
		w.t = b.newTarget()
		workers[i] = w
		due := start.Add(interval * time.Duration(i) / time.Duration(len(workers)))
		wg.Go(func() {
			defer w.t.close()
			for !w.stopping() && ctx.Err() == nil {
				t0 := time.Now()
				if interval > 0 {
					if wait := due.Sub(t0); wait > 0 {
						time.Sleep(wait)
					}
					t0, due = due, due.Add(interval)
					if w.stopping() {
						return
					}
				}
				n, part, err := op(ctx, w)
				d := time.Since(t0)
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					w.fail(err)
					liveErrs.Add(1)
					if errKind(err) == "transport" {
						// Don't spin on a refused or reset connection.
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				if n == 0 {
					continue
				}
				w.ops++
				w.entities += int64(n)
				w.perPart[part] += int64(n)
				w.hist.record(d)
				liveOps.Add(1)
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	stopProgress()
	st := &stats{perPart: make([]int64, nParts)}
	for _, w := range workers {
		st.merge(&w.stats)
	}
	return st, secs
}

// result turns merged stats into a Result; partName names partition indexes.
func (b *bench) result(name string, st *stats, secs float64, partName func(int) string, notes ...string) Result {
	r := Result{
		Workload:        name,
		Ops:             st.ops,
		Entities:        st.entities,
		Errors:          st.errors,
		Seconds:         secs,
		P50:             st.hist.percentile(0.50),
		P99:             st.hist.percentile(0.99),
		PartitionTarget: PartitionTarget,
	}
	if secs > 0 {
		r.EntitiesPerSec = float64(st.entities) / secs
	}
	best := -1
	for i, v := range st.perPart {
		if v > 0 && (best < 0 || v > st.perPart[best]) {
			best = i
		}
	}
	if best >= 0 && secs > 0 {
		r.HottestPartition = partName(best)
		r.HottestPartitionPerSec = float64(st.perPart[best]) / secs
	}
	if e := st.errNote(); e != "" {
		notes = append(notes, e)
	}
	var kept []string
	for _, n := range notes {
		if n != "" {
			kept = append(kept, n)
		}
	}
	r.Notes = strings.Join(kept, "; ")
	return r
}

// ---- errors ----

// shortScanError is a query that returned fewer entities than were
// preloaded into the partition: lost data or broken continuation.
type shortScanError struct {
	pk        string
	got, want int
}

func (e *shortScanError) Error() string {
	return fmt.Sprintf("query of partition %s returned %d of %d preloaded entities", e.pk, e.got, e.want)
}

// errKind classifies an error for the per-kind breakdown in Notes.
func errKind(err error) string {
	var se *shortScanError
	var ne net.Error
	status, code, isAnswer := statusOf(err)
	switch {
	case isAnswer:
		if code != "" {
			return strconv.Itoa(status) + " " + code
		}
		return strconv.Itoa(status)
	case errors.As(err, &se):
		return "incomplete scan"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	default:
		return "transport"
	}
}

// isStatus reports whether err is a service response with the given status.
func isStatus(err error, status int) bool {
	got, _, ok := statusOf(err)
	return ok && got == status
}

// summarize renders err on one line. azcore's ResponseError text spans many
// lines and includes the response body; the request line, status and error
// code are what identify it.
func summarize(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.RawResponse != nil {
		s := fmt.Sprintf("HTTP %d", re.StatusCode)
		if re.ErrorCode != "" {
			s += " " + re.ErrorCode
		}
		if req := re.RawResponse.Request; req != nil {
			s = req.Method + " " + req.URL.Path + ": " + s
		}
		return s
	}
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// ---- progress ----

// startProgress redraws line(elapsed, count, rate) on w once a second, where
// count is ops' current value and rate its increase per second since the
// previous redraw. The returned function stops it and blanks the line, so
// the report written afterwards starts on a clean line. A nil w disables it.
func startProgress(w io.Writer, ops *atomic.Int64, line func(elapsed time.Duration, n int64, rate float64) string) (stop func()) {
	if w == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		lastN, lastT, width := int64(0), start, 0
		for {
			select {
			case <-done:
				if width > 0 {
					fmt.Fprintf(w, "\r%s\r", strings.Repeat(" ", width))
				}
				return
			case now := <-t.C:
				n := ops.Load()
				rate := float64(n-lastN) / now.Sub(lastT).Seconds()
				lastN, lastT = n, now
				s := line(now.Sub(start), n, rate)
				pad := max(0, width-len(s))
				fmt.Fprintf(w, "\r%s%s", s, strings.Repeat(" ", pad))
				width = max(width, len(s))
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// consistencyPolicy sends x-ms-consistency-level: level on every read (GET).
func consistencyPolicy(level string) policy.Policy { return consistencyHeader(level) }

type consistencyHeader string

func (c consistencyHeader) Do(req *policy.Request) (*http.Response, error) {
	if req.Raw().Method == http.MethodGet {
		req.Raw().Header.Set("x-ms-consistency-level", string(c))
	}
	return req.Next()
}

// retriesPerRequest is how many times the measured client retries a request: none, or
// the SDK's default three with Options.Retry.
func retriesPerRequest(retry bool) int {
	if retry {
		return 3
	}
	return 0
}
