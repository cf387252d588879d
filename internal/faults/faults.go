// Package faults injects the service's failures on request (--faults): 503 ServerBusy,
// 500 InternalError, 500 OperationTimedOut, connections reset before or after the
// operation runs, added latency, and query pages cut short, per operation kind and at
// given rates, from a seeded source so that a run can be repeated (--faults-seed).
//
// The spec is a comma-separated list of rules, each operation:kind[:argument][:rate]:
//
//	insert:503:1%,QueryEntities:timeout:0.5%,*:latency:20ms±10ms,query:cut:10%
//
// The operation is a Storage Analytics name (InsertEntity, QueryEntities, …; any case),
// a short alias (insert, query, …, see Aliases) or * for every operation. The kinds are
// 503 (or busy), 500 (or internal), timeout, reset-before, reset-after, latency (its
// argument D or D±J, also written D+-J: a delay uniform in [D-J, D+J]) and cut (a
// QueryEntities page ends early with a continuation). The rate is a percentage ("1%",
// "0.5%") or a fraction ("0.01"); omitted, it is 100%.
package faults

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is a kind of fault.
type Kind uint8

// The kinds; None injects nothing.
const (
	None Kind = iota
	Busy
	Internal
	Timeout
	ResetBefore
	ResetAfter
	Cut
	Latency
	numKinds
)

var kindNames = [numKinds]string{"", "503", "500", "timeout", "reset-before", "reset-after", "cut", "latency"}

// String is the kind's name in the spec (and in metrics and log lines).
func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "unknown"
}

// Aliases are the short operation names the spec accepts besides the Storage Analytics
// names.
var Aliases = map[string]string{
	"insert":          "InsertEntity",
	"update":          "UpdateEntity",
	"merge":           "MergeEntity",
	"delete":          "DeleteEntity",
	"insertorreplace": "InsertOrReplaceEntity",
	"insertormerge":   "InsertOrMergeEntity",
	"get":             "QueryEntity",
	"query":           "QueryEntities",
	"batch":           "EntityGroupTransaction",
	"createtable":     "CreateTable",
	"deletetable":     "DeleteTable",
	"querytables":     "QueryTables",
	"querytable":      "QueryTable",
}

// Operations are the Storage Analytics names a rule may name.
var Operations = []string{
	"InsertEntity", "UpdateEntity", "MergeEntity", "DeleteEntity", "InsertOrReplaceEntity",
	"InsertOrMergeEntity", "QueryEntity", "QueryEntities", "EntityGroupTransaction",
	"CreateTable", "DeleteTable", "QueryTables", "QueryTable", "BulkWrite",
}

// Rule is one parsed rule.
type Rule struct {
	// Operation is a Storage Analytics name, or "*".
	Operation string
	Kind      Kind
	// Rate is the probability the rule fires, in (0, 1].
	Rate float64
	// Delay and Jitter are a Latency rule's D and J.
	Delay, Jitter time.Duration
}

// Spec is a parsed --faults value.
type Spec []Rule

// maxRules bounds a spec, which is typed by hand.
const maxRules = 64

// Parse reads a --faults value; "" is no faults. Errors name the rule at fault.
func Parse(s string) (Spec, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) > maxRules {
		return nil, fmt.Errorf("faults: %d rules, at most %d", len(parts), maxRules)
	}
	spec := make(Spec, 0, len(parts))
	for _, p := range parts {
		r, err := parseRule(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("faults: rule %q: %w", p, err)
		}
		spec = append(spec, r)
	}
	return spec, nil
}

func parseRule(p string) (Rule, error) {
	f := strings.Split(p, ":")
	if len(f) < 2 || len(f) > 4 {
		return Rule{}, errors.New("want operation:kind[:argument][:rate]")
	}
	var r Rule
	op, err := operation(f[0])
	if err != nil {
		return Rule{}, err
	}
	r.Operation = op
	switch k := strings.ToLower(strings.TrimSpace(f[1])); k {
	case "503", "busy":
		r.Kind = Busy
	case "500", "internal":
		r.Kind = Internal
	case "timeout":
		r.Kind = Timeout
	case "reset-before":
		r.Kind = ResetBefore
	case "reset-after":
		r.Kind = ResetAfter
	case "cut":
		r.Kind = Cut
	case "latency":
		r.Kind = Latency
	default:
		return Rule{}, fmt.Errorf("unknown kind %q (want 503, 500, timeout, reset-before, reset-after, latency or cut)", f[1])
	}
	rest := f[2:]
	if r.Kind == Latency {
		if len(rest) == 0 {
			return Rule{}, errors.New("latency needs a duration, e.g. latency:20ms±10ms")
		}
		if r.Delay, r.Jitter, err = parseLatency(rest[0]); err != nil {
			return Rule{}, err
		}
		rest = rest[1:]
	}
	r.Rate = 1
	switch len(rest) {
	case 0:
	case 1:
		if r.Rate, err = parseRate(rest[0]); err != nil {
			return Rule{}, err
		}
	default:
		return Rule{}, errors.New("too many fields")
	}
	if r.Kind == Cut && r.Operation != "*" && r.Operation != "QueryEntities" {
		return Rule{}, errors.New("cut applies to QueryEntities only")
	}
	return r, nil
}

func operation(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "*" {
		return s, nil
	}
	if full, ok := Aliases[strings.ToLower(s)]; ok {
		return full, nil
	}
	for _, o := range Operations {
		if strings.EqualFold(o, s) {
			return o, nil
		}
	}
	return "", fmt.Errorf("unknown operation %q", s)
}

// parseLatency reads D, D±J or D+-J.
func parseLatency(s string) (d, j time.Duration, err error) {
	s = strings.TrimSpace(s)
	ds, js, hasJ := strings.Cut(s, "±")
	if !hasJ {
		ds, js, hasJ = strings.Cut(s, "+-")
	}
	if d, err = time.ParseDuration(ds); err != nil {
		return 0, 0, fmt.Errorf("latency %q: not a duration", ds)
	}
	if hasJ {
		if j, err = time.ParseDuration(js); err != nil {
			return 0, 0, fmt.Errorf("latency jitter %q: not a duration", js)
		}
	}
	const most = time.Minute
	switch {
	case d < 0 || j < 0:
		return 0, 0, errors.New("latency and jitter must not be negative")
	case j > d:
		return 0, 0, errors.New("jitter larger than the latency")
	case d+j > most:
		return 0, 0, fmt.Errorf("latency over %v", most)
	}
	return d, j, nil
}

// parseRate reads "N%" or a fraction in (0, 1].
func parseRate(s string) (float64, error) {
	s = strings.TrimSpace(s)
	pct := strings.HasSuffix(s, "%")
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil {
		return 0, fmt.Errorf("rate %q: not a number", s)
	}
	if pct {
		v /= 100
	}
	if !(v > 0 && v <= 1) { // also refuses NaN
		return 0, fmt.Errorf("rate %q: want more than 0 and at most 100%%", s)
	}
	return v, nil
}

// String writes the spec back in its canonical form.
func (s Spec) String() string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(r.Operation)
		b.WriteByte(':')
		b.WriteString(r.Kind.String())
		if r.Kind == Latency {
			b.WriteByte(':')
			b.WriteString(r.Delay.String())
			if r.Jitter > 0 {
				b.WriteString("±" + r.Jitter.String())
			}
		}
		if r.Rate != 1 {
			b.WriteString(":" + strconv.FormatFloat(r.Rate*100, 'g', -1, 64) + "%")
		}
	}
	return b.String()
}

// Decision is what to do to one request.
type Decision struct {
	// Kind is the failure to inject, None for none (Latency is never set here).
	Kind Kind
	// Delay is the latency to add before the operation.
	Delay time.Duration
}

// Injector decides, request by request, which faults to inject. It is safe for concurrent
// use; decisions are drawn from one seeded source, so the same seed and the same sequence
// of operations give the same decisions.
type Injector struct {
	spec   Spec
	byOp   map[string][]int // rules that apply to an operation, in spec order
	star   []int
	seed   uint64
	mu     sync.Mutex
	rng    *rand.Rand
	counts [numKinds]atomic.Int64
}

// New returns an injector for spec with seed.
func New(spec Spec, seed uint64) *Injector {
	in := &Injector{spec: spec, byOp: map[string][]int{}, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for i, r := range spec {
		if r.Operation == "*" {
			if r.Kind == Cut { // only query pages can be cut: * means QueryEntities
				in.byOp["QueryEntities"] = append(in.byOp["QueryEntities"], i)
				continue
			}
			in.star = append(in.star, i)
			for _, op := range Operations {
				in.byOp[op] = append(in.byOp[op], i)
			}
			continue
		}
		in.byOp[r.Operation] = append(in.byOp[r.Operation], i)
	}
	return in
}

// Seed is the seed the injector was made with.
func (in *Injector) Seed() uint64 { return in.seed }

// Spec is the injector's spec.
func (in *Injector) Spec() Spec { return in.spec }

// Decide draws the faults for one request of operation op: every matching latency rule
// that fires adds its delay, and the first matching failure rule that fires is the
// failure. Each rule draws once per matching request, so decisions depend only on the
// seed and the sequence of operations.
func (in *Injector) Decide(op string) Decision {
	rules, ok := in.byOp[op]
	if !ok {
		rules = in.star
	}
	if len(rules) == 0 {
		return Decision{}
	}
	var d Decision
	in.mu.Lock()
	for _, i := range rules {
		r := &in.spec[i]
		fire := r.Rate >= 1 || in.rng.Float64() < r.Rate
		if !fire {
			continue
		}
		if r.Kind == Latency {
			delay := r.Delay
			if r.Jitter > 0 {
				delay += time.Duration(in.rng.Int64N(int64(2*r.Jitter)+1)) - r.Jitter
			}
			d.Delay += delay
			continue
		}
		if d.Kind == None {
			d.Kind = r.Kind
		}
	}
	in.mu.Unlock()
	return d
}

// CutAt draws where a cut page of n entities ends: 0 to n-1 entities are kept.
func (in *Injector) CutAt(n int) int {
	if n <= 1 {
		return 0
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.rng.IntN(n)
}

// Count records one injected fault of kind k.
func (in *Injector) Count(k Kind) {
	if k < numKinds {
		in.counts[k].Add(1)
	}
}

// Counts reports how many faults of each kind were injected, by kind name.
func (in *Injector) Counts() map[string]int64 {
	m := map[string]int64{}
	for k := Busy; k < numKinds; k++ {
		m[k.String()] = in.counts[k].Load()
	}
	return m
}

// Deletions remembers deleted tables' names for a while, so that creating a table of the
// same name meanwhile fails as on the service, where a deleted table's name stays taken
// (409 TableBeingDeleted) for about 40 seconds. Its memory is bounded by the tables
// deleted within one delay: expired names are dropped as new ones come. It is safe for
// concurrent use, and holds what this process saw: each front end has its own.
type Deletions struct {
	delay time.Duration
	now   func() time.Time
	mu    sync.Mutex
	names map[string]time.Time // key → until
}

// NewDeletions returns the names' memory for delay; now nil means time.Now.
func NewDeletions(delay time.Duration, now func() time.Time) *Deletions {
	if now == nil {
		now = time.Now
	}
	return &Deletions{delay: delay, now: now, names: map[string]time.Time{}}
}

// Deleted records that account's table was deleted now. Table names are case-insensitive.
func (d *Deletions) Deleted(account, table string) {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, until := range d.names {
		if !now.Before(until) {
			delete(d.names, k)
		}
	}
	d.names[account+"/"+strings.ToLower(table)] = now.Add(d.delay)
}

// BeingDeleted reports whether account's table was deleted less than the delay ago.
func (d *Deletions) BeingDeleted(account, table string) bool {
	d.mu.Lock()
	until, ok := d.names[account+"/"+strings.ToLower(table)]
	d.mu.Unlock()
	return ok && d.now().Before(until)
}
