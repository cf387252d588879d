package table

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

func TestParseElasticRules(t *testing.T) {
	type st = storage.TableSettings
	for _, tc := range []struct {
		spec string
		want []ElasticRule
		err  string
	}{
		{spec: "", want: nil},
		{spec: "  ", want: nil},
		{spec: "events*", want: []ElasticRule{{"events*", st{Elastic: true}}}},
		{spec: "events*:86400, cache*:-1 ,audit*", want: []ElasticRule{
			{"events*", st{Elastic: true, DefaultTTL: 86400}},
			{"cache*", st{Elastic: true, DefaultTTL: -1}},
			{"audit*", st{Elastic: true}},
		}},
		{spec: "s?ss[0-9]:2147483647:ExpireAfter", want: []ElasticRule{{"s?ss[0-9]", st{Elastic: true, DefaultTTL: 2147483647, TTLProperty: "ExpireAfter"}}}},
		{spec: "log*::Ttl", want: []ElasticRule{{"log*", st{Elastic: true, TTLProperty: "Ttl"}}}},
		{spec: "log*:", want: []ElasticRule{{"log*", st{Elastic: true}}}},
		// The default property name is stored as the default.
		{spec: "log*:5:TTLInSeconds", want: []ElasticRule{{"log*", st{Elastic: true, DefaultTTL: 5}}}},
		{spec: "*", want: []ElasticRule{{"*", st{Elastic: true}}}},

		{spec: "events*,", err: "item 2 is empty"},
		{spec: ",a", err: "item 1 is empty"},
		{spec: ":60", err: `item 1 ":60": the pattern is empty`},
		{spec: "events*:0", err: `the time-to-live "0" is not -1 or a number of seconds`},
		{spec: "events*:-2", err: `the time-to-live "-2"`},
		{spec: "events*:2147483648", err: `the time-to-live "2147483648"`},
		{spec: "events*:1d", err: `the time-to-live "1d"`},
		{spec: "events*:60:", err: "the time-to-live property is empty"},
		{spec: "events*:60:a:b", err: "want PATTERN[:TTL[:PROPERTY]]"},
		{spec: "events_*", err: `the pattern has '_', which no table name has`},
		{spec: "ev[ents", err: "the pattern is not a valid glob"},
		{spec: "e:60:1bad", err: "The time-to-live property name '1bad' is not a valid property name."},
		{spec: "e:60:RowKey", err: "system property 'RowKey'"},
	} {
		got, err := ParseElasticRules(tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseElasticRules(%q) = %v, %v; want error with %q", tc.spec, got, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("ParseElasticRules(%q) = %v, %v; want %v", tc.spec, got, err, tc.want)
			continue
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], tc.want[i]) {
				t.Errorf("ParseElasticRules(%q)[%d] = %+v, want %+v", tc.spec, i, got[i], tc.want[i])
			}
			// String gives the rule back in a form that parses to the same rule.
			back, err := ParseElasticRules(got[i].String())
			if err != nil || len(back) != 1 || !reflect.DeepEqual(back[0], got[i]) {
				t.Errorf("ParseElasticRules(%q) = %v, %v; want %+v", got[i].String(), back, err, got[i])
			}
		}
	}
}

func TestElasticRuleMatch(t *testing.T) {
	rules, err := ParseElasticRules("Events*:60,cache?:-1,[ab]udit[0-9]")
	if err != nil {
		t.Fatal(err)
	}
	s := New(nil, nil, WithElasticTables(rules))
	for name, want := range map[string]storage.TableSettings{
		"events":     {Elastic: true, DefaultTTL: 60},
		"EVENTS2024": {Elastic: true, DefaultTTL: 60},
		"myevents":   {},
		"cacheA":     {Elastic: true, DefaultTTL: -1},
		"cache":      {},
		"cacheAB":    {},
		"Audit7":     {Elastic: true},
		"budit0":     {Elastic: true},
		"cudit0":     {},
		"audit":      {},
	} {
		if got := s.settingsFor(name); !got.Equal(want) {
			t.Errorf("settingsFor(%q) = %+v, want %+v", name, got, want)
		}
	}
}

func TestCheckSettings(t *testing.T) {
	type st = storage.TableSettings
	for _, tc := range []struct {
		in, want st
		err      string
	}{
		{in: st{}, want: st{}},
		{in: st{Elastic: true, DefaultTTL: 10, TTLProperty: "TTLInSeconds"}, want: st{Elastic: true, DefaultTTL: 10}},
		{in: st{Elastic: true, DefaultTTL: -1, TTLProperty: "exp"}, want: st{Elastic: true, DefaultTTL: -1, TTLProperty: "exp"}},
		{in: st{DefaultTTL: 10}, err: "Time-to-live is available on elastic tables only."},
		{in: st{TTLProperty: "x"}, err: "A time-to-live property is available on elastic tables only."},
		{in: st{Elastic: true, DefaultTTL: -5}, err: "The default time-to-live -5 is not valid"},
		{in: st{Elastic: true, TTLProperty: "a b"}, err: "is not a valid property name"},
		{in: st{Elastic: true, TTLProperty: "Timestamp"}, err: "system property 'Timestamp'"},
		{in: st{Elastic: true, TTLProperty: "PartitionKey"}, err: "system property 'PartitionKey'"},
	} {
		got, err := CheckSettings(tc.in)
		if tc.err != "" {
			e, ok := azerr.As(err)
			if err == nil || !ok || e.Status != 400 || e.Code != azerr.InvalidInput || !strings.Contains(e.Message, tc.err) {
				t.Errorf("CheckSettings(%+v) = %+v, %v; want 400 InvalidInput %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("CheckSettings(%+v) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// recordingEngine records the settings the table layer hands the engine.
type recordingEngine struct {
	storage.Engine
	created map[string]storage.TableSettings
	set     map[string]storage.TableSettings
}

func (r *recordingEngine) CreateTable(ctx context.Context, account, name string, st storage.TableSettings) error {
	r.created[name] = st
	return r.Engine.CreateTable(ctx, account, name, st)
}

func (r *recordingEngine) SetTableSettings(ctx context.Context, account, name string, st storage.TableSettings) error {
	r.set[name] = st
	return r.Engine.SetTableSettings(ctx, account, name, st)
}

// CreateTable: given settings are checked and win over the rules; without them the first
// matching rule decides, and no match is a standard table. SetTableSettings checks too,
// and a missing table is TableNotFound.
func TestCreateTableSettings(t *testing.T) {
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	rec := &recordingEngine{Engine: eng, created: map[string]storage.TableSettings{}, set: map[string]storage.TableSettings{}}
	rules, err := ParseElasticRules("events*:60,cache*:-1:Exp")
	if err != nil {
		t.Fatal(err)
	}
	s := New(rec, nil, WithElasticTables(rules))
	ctx := context.Background()
	elastic := func(ttl int32) *storage.TableSettings { return &storage.TableSettings{Elastic: true, DefaultTTL: ttl} }
	for _, tc := range []struct {
		name     string
		settings *storage.TableSettings
		want     storage.TableSettings
	}{
		{"events1", nil, storage.TableSettings{Elastic: true, DefaultTTL: 60}},
		{"Cache1", nil, storage.TableSettings{Elastic: true, DefaultTTL: -1, TTLProperty: "Exp"}},
		{"plain1", nil, storage.TableSettings{}},
		{"events2", &storage.TableSettings{}, storage.TableSettings{}}, // the request said: standard
		{"plain2", elastic(5), storage.TableSettings{Elastic: true, DefaultTTL: 5}},
		{"plain3", &storage.TableSettings{Elastic: true, TTLProperty: "TTLInSeconds"}, storage.TableSettings{Elastic: true}},
	} {
		if err := s.CreateTable(ctx, "acct", tc.name, tc.settings); err != nil {
			t.Fatalf("CreateTable(%s): %v", tc.name, err)
		}
		if got := rec.created[tc.name]; !got.Equal(tc.want) {
			t.Errorf("CreateTable(%s, %v): engine got %+v, want %+v", tc.name, tc.settings, got, tc.want)
		}
		if ti, _, err := s.GetTable(ctx, "acct", strings.ToUpper(tc.name), Read{}); err != nil || ti.Name != tc.name || !ti.Settings.Equal(tc.want) {
			t.Errorf("GetTable(%s) = %+v, %v; want settings %+v", tc.name, ti, err, tc.want)
		}
	}
	err = s.CreateTable(ctx, "acct", "bad1", &storage.TableSettings{DefaultTTL: 5})
	if e, _ := azerr.As(err); err == nil || e.Code != azerr.InvalidInput {
		t.Errorf("CreateTable with TTL on a standard table = %v, want 400 InvalidInput", err)
	}
	if _, ok := rec.created["bad1"]; ok {
		t.Error("invalid settings reached the engine")
	}
	err = s.CreateTable(ctx, "acct", "b_d", &storage.TableSettings{Elastic: true})
	if e, _ := azerr.As(err); err == nil || e.Code != azerr.InvalidResourceName {
		t.Errorf("CreateTable(b_d) = %v, want InvalidResourceName", err)
	}

	if err := s.SetTableSettings(ctx, "acct", "plain1", storage.TableSettings{Elastic: true, DefaultTTL: 9, TTLProperty: "TTLInSeconds"}); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.set["plain1"], (storage.TableSettings{Elastic: true, DefaultTTL: 9}); !got.Equal(want) {
		t.Errorf("SetTableSettings: engine got %+v, want %+v", got, want)
	}
	if ti, _, err := s.TableSettings(ctx, "acct", "PLAIN1", Read{}); err != nil || ti.Name != "plain1" || !ti.Settings.Equal(rec.set["plain1"]) {
		t.Errorf("TableSettings(PLAIN1) = %+v, %v", ti, err)
	}
	err = s.SetTableSettings(ctx, "acct", "plain1", storage.TableSettings{TTLProperty: "x"})
	if e, _ := azerr.As(err); err == nil || e.Code != azerr.InvalidInput {
		t.Errorf("SetTableSettings(invalid) = %v, want 400 InvalidInput", err)
	}
	err = s.SetTableSettings(ctx, "acct", "nosuch", storage.TableSettings{Elastic: true})
	if e, _ := azerr.As(err); err == nil || e.Code != azerr.TableNotFound {
		t.Errorf("SetTableSettings(missing) = %v, want TableNotFound", err)
	}
	_, _, err = s.TableSettings(ctx, "acct", "nosuch", Read{})
	if e, _ := azerr.As(err); err == nil || e.Code != azerr.TableNotFound {
		t.Errorf("TableSettings(missing) = %v, want TableNotFound", err)
	}
}

func TestParseRetentionAndFeedRules(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int32
		ok   bool
	}{
		{"off", 0, true}, {"1", 1, true}, {"86400", 86400, true}, {"7d", 604800, true}, {"36h", 129600, true},
		{"90m", 5400, true}, {"2147483647", 2147483647, true},
		{"0", 0, false}, {"-5", 0, false}, {"2147483648", 0, false}, {"1.5s", 0, false}, {"x", 0, false},
		{"24856d", 0, false}, {"", 0, false}, {"d", 0, false},
	} {
		got, err := ParseRetention(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseRetention(%q) = %d, %v; want %d, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
	rules, err := ParseFeedRules(" orders*:7d , audit*:60")
	if err != nil || len(rules) != 2 || rules[0].Pattern != "orders*" || rules[0].Settings.ChangeFeed != 604800 || rules[1].Settings.ChangeFeed != 60 {
		t.Fatalf("ParseFeedRules = %+v, %v", rules, err)
	}
	for _, bad := range []string{"orders*", "orders*:", "orders*:off", "or.ders:60", "a:1,,b:2"} {
		if _, err := ParseFeedRules(bad); err == nil {
			t.Errorf("ParseFeedRules(%q) accepted", bad)
		}
	}
	s := &Service{elastic: []ElasticRule{{Pattern: "ev*", Settings: storage.TableSettings{Elastic: true, DefaultTTL: 60}}}, feeds: rules}
	if st := s.settingsFor("OrdersX"); !st.Equal(storage.TableSettings{ChangeFeed: 604800}) {
		t.Errorf("settingsFor(OrdersX) = %+v", st)
	}
	if st := s.settingsFor("events"); !st.Equal(storage.TableSettings{Elastic: true, DefaultTTL: 60}) {
		t.Errorf("settingsFor(events) = %+v", st)
	}
}
