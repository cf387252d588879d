// Package metrics exposes Cerulean's figures in the Prometheus exposition format: what
// the server answered (an observe.Observer), what the storage engine reports (read at
// scrape time), and the process's own. Every label has a bounded set of values whatever
// clients send: operations are the server's fixed names, accounts the configured ones
// (any other name a URL carries counts as "other"), status classes and authentication
// failure reasons fixed sets; no table or key name is ever a label value.
package metrics

import (
	"fmt"
	"net/http"
	"regexp"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ceruleandb/cerulean/internal/observe"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// Operations are the operation names the server reports (observe.Request.Operation);
// any other counts as "Unknown".
var Operations = []string{
	"Unknown", "TablePreflightRequest",
	"QueryEntities", "QueryEntity", "InsertEntity", "UpdateEntity", "MergeEntity", "DeleteEntity",
	"InsertOrReplaceEntity", "InsertOrMergeEntity", "QueryTables", "QueryTable", "CreateTable", "DeleteTable",
	"GetTableServiceProperties", "SetTableServiceProperties", "GetTableServiceStats", "GetTableACL", "SetTableACL",
	"EntityGroupTransaction", "BulkWrite", "GetTableSettings", "SetTableSettings",
}

// OtherAccount is the account label of requests to an account that is not configured
// (or none at all).
const OtherAccount = "other"

// statusClasses are the status_class label values; index status/100, "other" past 5.
var statusClasses = [nStatusClasses]string{"other", "1xx", "2xx", "3xx", "4xx", "5xx"}

const nStatusClasses = 6

// authReasons are the reason label values of authentication failures
// (observe.Request.AuthFailure); any other counts as "other".
var authReasons = []string{
	"no_credentials", "malformed", "signature", "date", "bearer", "account_mismatch",
	"sas_expired", "sas_policy", "sas_scope", "sas_permission", "sas_resource_type",
	"sas_protocol", "sas_source_ip", "token", "role", "shared_key_off", "other",
}

// Options configure New.
type Options struct {
	// Accounts are the configured account names: the account label's values besides
	// OtherAccount.
	Accounts []string
	// Engine, if it is one this package knows (pebble, postgres), has its figures read
	// at each scrape.
	Engine storage.Engine
}

// Metrics is the registry behind /metrics and the observer that feeds it. It is safe
// for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	ops      map[string]int
	accounts map[string]int
	nAcct    int
	// acctNames are the account label values by index (0: OtherAccount).
	acctNames []string

	requests     *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	bytesIn      *prometheus.CounterVec
	bytesOut     *prometheus.CounterVec
	read         prometheus.Counter
	written      prometheus.Counter
	scanned      prometheus.Counter
	pagesCut     prometheus.Counter
	batchSize    prometheus.Histogram
	authFailures *prometheus.CounterVec
	throttled    *prometheus.CounterVec
	faults       *prometheus.CounterVec

	// The children of the vectors, created on first use (so only series that happened
	// are exposed) and then found by index, without hashing label values per request.
	reqChildren []atomic.Pointer[prometheus.Counter] // [op][class][account]
	opChildren  []atomic.Pointer[opSeries]           // [op]
	authReason  map[string]int
	authKids    []atomic.Pointer[prometheus.Counter] // [reason]

	// principals counts bearer tokens' requests by principal: the first MaxPrincipals
	// names seen get a label value of their own, the rest count as OtherPrincipal.
	principals   *prometheus.CounterVec
	principalsMu sync.Mutex
	principalIDs map[string]*[nStatusClasses]prometheus.Counter
}

// MaxPrincipals bounds the principal label of cerulean_principal_requests_total: a
// server's principals are its applications and people, a handful, but the label must
// stay bounded whatever tokens arrive.
const MaxPrincipals = 64

// OtherPrincipal is the principal label value of the principals past MaxPrincipals.
const OtherPrincipal = "other"

// opSeries are one operation's series.
type opSeries struct {
	latency           prometheus.Observer
	bytesIn, bytesOut prometheus.Counter
}

// New makes the registry with the request series, the engine's figures (if o.Engine is
// one this package knows) and the process and Go runtime collectors.
func New(o Options) (*Metrics, error) {
	m := &Metrics{
		reg:      prometheus.NewRegistry(),
		ops:      make(map[string]int, len(Operations)),
		accounts: make(map[string]int, len(o.Accounts)+1),
	}
	for i, op := range Operations {
		m.ops[op] = i
	}
	m.accounts[OtherAccount] = 0
	for _, a := range o.Accounts {
		if _, ok := m.accounts[a]; !ok {
			m.accounts[a] = len(m.accounts)
		}
	}
	m.nAcct = len(m.accounts)
	m.acctNames = make([]string, m.nAcct)
	for n, j := range m.accounts {
		m.acctNames[j] = n
	}
	m.authReason = make(map[string]int, len(authReasons))
	for i, r := range authReasons {
		m.authReason[r] = i
	}
	m.reqChildren = make([]atomic.Pointer[prometheus.Counter], len(Operations)*len(statusClasses)*m.nAcct)
	m.opChildren = make([]atomic.Pointer[opSeries], len(Operations))
	m.authKids = make([]atomic.Pointer[prometheus.Counter], len(authReasons))

	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cerulean_requests_total",
		Help: "Requests answered, by operation, status class and account (accounts not configured count as \"other\").",
	}, []string{"operation", "status_class", "account"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cerulean_request_duration_seconds",
		Help:    "Time from a request's arrival to its answer, by operation.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"operation"})
	m.bytesIn = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cerulean_request_bytes_total",
		Help: "Request body bytes received, by operation.",
	}, []string{"operation"})
	m.bytesOut = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cerulean_response_bytes_total",
		Help: "Response body bytes sent, by operation.",
	}, []string{"operation"})
	m.read = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cerulean_entities_read_total",
		Help: "Entities returned to clients.",
	})
	m.written = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cerulean_entities_written_total",
		Help: "Entities written (inserted, updated, merged or deleted), batches' and bulk requests' committed operations included.",
	})
	m.scanned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cerulean_entities_scanned_total",
		Help: "Stored entities queries examined; far above cerulean_entities_read_total means filters that do not use PartitionKey and RowKey.",
	})
	m.pagesCut = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cerulean_query_pages_cut_total",
		Help: "Query pages ended early by the 5 s page budget (the client gets a continuation).",
	})
	m.batchSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "cerulean_batch_size",
		Help:    "Operations per $batch or bulk request.",
		Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 1000, 10000},
	})
	m.authFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cerulean_auth_failures_total",
		Help: "Requests refused by authentication or authorization, by reason.",
	}, []string{"reason"})

	m.principals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cerulean_principal_requests_total",
		Help: fmt.Sprintf("Requests authenticated by a bearer token, by principal (its object id, \"OID via APPID\" when it acted through another application; the first %d seen, the rest as %q) and status class.", MaxPrincipals, OtherPrincipal),
	}, []string{"principal", "status_class"})
	m.principalIDs = map[string]*[nStatusClasses]prometheus.Counter{}

	m.throttled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cerulean_throttled_total",
		Help: "Requests answered 503 ServerBusy by --scale-targets, by the target exceeded (partition or account).",
	}, []string{"scope"})
	m.faults = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cerulean_faults_injected_total",
		Help: "Faults injected by --faults, by kind (503, 500, timeout, reset-before, reset-after, cut, latency).",
	}, []string{"fault"})

	for _, c := range []prometheus.Collector{
		m.requests, m.latency, m.bytesIn, m.bytesOut, m.read, m.written, m.scanned, m.pagesCut,
		m.batchSize, m.authFailures, m.principals, m.throttled, m.faults,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		// GOMAXPROCS, GOGC and the heap goal too: the server may raise the first (cmd/cerulean's
		// raiseProcs) and keeps a floor under the goal by raising the second (internal/gcfloor).
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/(sched/gomaxprocs:threads|gc/gogc:percent|gc/heap/goal:bytes)$`)})),
	} {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
	}
	if c := engineCollector(o.Engine); c != nil {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Register adds another collector (the hot partitions' top few, say) to the registry
// /metrics serves. The collector must keep its own label values bounded.
func (m *Metrics) Register(c prometheus.Collector) error { return m.reg.Register(c) }

// Handler serves the registry in the exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Gatherer is the registry, for tests and other exporters.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// Observe counts one answered request (observe.Observer). It takes no lock on the
// common path: each series is found by index once created.
func (m *Metrics) Observe(r *observe.Request) {
	op, ok := m.ops[r.Operation]
	if !ok {
		op = 0 // Unknown
	}
	class := r.Status / 100
	if class < 1 || class >= len(statusClasses) {
		class = 0
	}
	acct := m.accounts[r.Account] // 0, OtherAccount, if not configured
	i := (op*len(statusClasses)+class)*m.nAcct + acct
	c := m.reqChildren[i].Load()
	if c == nil {
		v := m.requests.WithLabelValues(Operations[op], statusClasses[class], m.acctNames[acct])
		m.reqChildren[i].Store(&v)
		c = &v
	}
	(*c).Inc()

	s := m.opChildren[op].Load()
	if s == nil {
		name := Operations[op]
		s = &opSeries{latency: m.latency.WithLabelValues(name), bytesIn: m.bytesIn.WithLabelValues(name), bytesOut: m.bytesOut.WithLabelValues(name)}
		m.opChildren[op].Store(s)
	}
	s.latency.Observe(r.Latency.Seconds())
	if r.BytesIn > 0 {
		s.bytesIn.Add(float64(r.BytesIn))
	}
	if r.BytesOut > 0 {
		s.bytesOut.Add(float64(r.BytesOut))
	}
	if r.EntitiesRead > 0 {
		m.read.Add(float64(r.EntitiesRead))
	}
	if r.EntitiesWritten > 0 {
		m.written.Add(float64(r.EntitiesWritten))
	}
	if r.EntitiesScanned > 0 {
		m.scanned.Add(float64(r.EntitiesScanned))
	}
	if r.PageCut {
		m.pagesCut.Inc()
	}
	if r.BatchSize > 0 {
		m.batchSize.Observe(float64(r.BatchSize))
	}
	// Both are set only in the opt-in modes, and their values are a fixed handful.
	if r.Throttled != "" {
		m.throttled.WithLabelValues(r.Throttled).Inc()
	}
	if r.Fault != "" {
		m.faults.WithLabelValues(r.Fault).Inc()
	}
	if r.Principal != "" {
		m.countPrincipal(r.Principal, class)
	}
	if r.AuthFailure != "" {
		j, ok := m.authReason[r.AuthFailure]
		if !ok {
			j = len(authReasons) - 1 // other
		}
		k := m.authKids[j].Load()
		if k == nil {
			v := m.authFailures.WithLabelValues(authReasons[j])
			m.authKids[j].Store(&v)
			k = &v
		}
		(*k).Inc()
	}
}

// countPrincipal counts a bearer token's request (status class index class) for its
// principal. Only token requests take the lock.
func (m *Metrics) countPrincipal(name string, class int) {
	m.principalsMu.Lock()
	kids, ok := m.principalIDs[name]
	if !ok {
		if len(m.principalIDs) >= MaxPrincipals {
			name = OtherPrincipal
		}
		if kids, ok = m.principalIDs[name]; !ok {
			kids = new([nStatusClasses]prometheus.Counter)
			for c := range kids {
				kids[c] = m.principals.WithLabelValues(name, statusClasses[c])
			}
			m.principalIDs[name] = kids
		}
	}
	m.principalsMu.Unlock()
	kids[class].Inc()
}
