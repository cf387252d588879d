package table

import (
	"context"
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// Option configures a Service.
type Option func(*Service)

// WithElasticTables makes tables elastic at creation by name: a Create Table request that
// does not say which settings it wants gets those of the first rule whose pattern matches
// the table's name (a standard table when none does). Rules come from
// ParseElasticRules; tables that exist already keep their settings.
func WithElasticTables(rules []ElasticRule) Option {
	return func(s *Service) { s.elastic = rules }
}

// ElasticRule makes the tables whose names match Pattern elastic, with Settings.
type ElasticRule struct {
	// Pattern is a glob (path.Match: '*', '?', '[…]' classes) matched against the whole
	// table name case-insensitively, as table names are.
	Pattern  string
	Settings storage.TableSettings
}

// Match reports whether the rule applies to the table name.
func (r ElasticRule) Match(name string) bool {
	ok, _ := path.Match(strings.ToLower(r.Pattern), strings.ToLower(name)) // checked by ParseElasticRules
	return ok
}

// String is the rule in ParseElasticRules' form.
func (r ElasticRule) String() string {
	s := r.Pattern
	switch {
	case r.Settings.TTLProperty != "":
		s += ":" + formatTTL(r.Settings.DefaultTTL) + ":" + r.Settings.TTLProperty
	case r.Settings.DefaultTTL != storage.TTLOff:
		s += ":" + formatTTL(r.Settings.DefaultTTL)
	}
	return s
}

func formatTTL(ttl int32) string {
	if ttl == storage.TTLOff {
		return ""
	}
	return strconv.Itoa(int(ttl))
}

// ParseElasticRules reads the server setting that makes tables elastic by name (the
// --elastic-tables flag): a comma-separated list of PATTERN[:TTL[:PROPERTY]], e.g.
// "events*:86400,cache*:-1,audit*". Each item makes the tables whose names match PATTERN
// elastic; TTL is the table default time-to-live (-1: on, without a default; 1 to
// 2147483647 seconds; empty or omitted: off) and PROPERTY the per-entity TTL property
// (default TTLInSeconds). Blanks around items and parts are ignored; an empty list is no
// rule. The first matching item wins. Errors name the item and say what is wrong.
func ParseElasticRules(spec string) ([]ElasticRule, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	var rules []ElasticRule
	for i, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		r, err := parseElasticRule(item)
		if err != nil {
			if item == "" {
				return nil, fmt.Errorf("item %d is empty", i+1)
			}
			return nil, fmt.Errorf("item %d %q: %w", i+1, item, err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func parseElasticRule(item string) (ElasticRule, error) {
	parts := strings.Split(item, ":")
	if len(parts) > 3 {
		return ElasticRule{}, fmt.Errorf("want PATTERN[:TTL[:PROPERTY]]")
	}
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	pat := parts[0]
	if pat == "" {
		return ElasticRule{}, fmt.Errorf("the pattern is empty")
	}
	for _, c := range []byte(pat) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("*?[]^-", c) >= 0
		if !ok {
			return ElasticRule{}, fmt.Errorf("the pattern has %q, which no table name has (names are letters and digits; the pattern may use * ? [...])", c)
		}
	}
	if _, err := path.Match(pat, ""); err != nil {
		return ElasticRule{}, fmt.Errorf("the pattern is not a valid glob: %w", err)
	}
	r := ElasticRule{Pattern: pat, Settings: storage.TableSettings{Elastic: true}}
	if len(parts) > 1 && parts[1] != "" {
		n, err := strconv.ParseInt(parts[1], 10, 64)
		if err != nil || n != -1 && (n < 1 || n > 1<<31-1) {
			return ElasticRule{}, fmt.Errorf("the time-to-live %q is not -1 or a number of seconds from 1 to 2147483647 (leave it empty for none)", parts[1])
		}
		r.Settings.DefaultTTL = int32(n)
	}
	if len(parts) > 2 {
		if parts[2] == "" {
			return ElasticRule{}, fmt.Errorf("the time-to-live property is empty (omit it for %s)", storage.DefaultTTLProperty)
		}
		r.Settings.TTLProperty = parts[2]
	}
	s, err := CheckSettings(r.Settings)
	if err != nil {
		e, _ := azerr.As(err)
		return ElasticRule{}, fmt.Errorf("%s", e.Message)
	}
	r.Settings = s
	return r, nil
}

// settingsFor returns the settings of a table created under name without settings of its
// own: those of the first matching elastic rule (or a standard table's), with the change
// feed of the first matching feed rule.
func (s *Service) settingsFor(name string) storage.TableSettings {
	var st storage.TableSettings
	for _, r := range s.elastic {
		if r.Match(name) {
			st = r.Settings
			break
		}
	}
	for _, r := range s.feeds {
		if r.Match(name) {
			st.ChangeFeed = r.Settings.ChangeFeed
			break
		}
	}
	return st
}

// WithChangeFeedTables turns the change feed on at creation by name, like
// WithElasticTables: a Create Table request that does not give settings gets the
// retention of the first rule whose pattern matches (rules from ParseFeedRules; only
// their Settings.ChangeFeed counts).
func WithChangeFeedTables(rules []ElasticRule) Option {
	return func(s *Service) { s.feeds = rules }
}

// ParseFeedRules reads the server setting that turns change feeds on by table name (the
// --change-feed-tables flag): a comma-separated list of PATTERN:RETENTION, e.g.
// "orders*:7d,audit*:86400", PATTERN as in ParseElasticRules and RETENTION as
// ParseRetention reads it. The first matching item wins.
func ParseFeedRules(spec string) ([]ElasticRule, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	var rules []ElasticRule
	for i, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		pat, ret, ok := strings.Cut(item, ":")
		if !ok || strings.TrimSpace(ret) == "" {
			return nil, fmt.Errorf("item %d %q: want PATTERN:RETENTION", i+1, item)
		}
		r, err := parseElasticRule(strings.TrimSpace(pat))
		if err != nil {
			return nil, fmt.Errorf("item %d %q: %w", i+1, item, err)
		}
		n, err := ParseRetention(strings.TrimSpace(ret))
		if err != nil || n == 0 {
			return nil, fmt.Errorf("item %d %q: the retention %q is not seconds or a duration such as 36h or 7d (1 s to 2147483647 s)", i+1, item, ret)
		}
		rules = append(rules, ElasticRule{Pattern: r.Pattern, Settings: storage.TableSettings{ChangeFeed: n}})
	}
	return rules, nil
}

// ParseRetention reads a change feed retention: "off" (0), seconds, or a duration (Go's
// form, or whole days as "7d"), from 1 s to 2147483647 s.
func ParseRetention(v string) (int32, error) {
	if v == "off" {
		return 0, nil
	}
	bad := fmt.Errorf("change feed retention %q: want seconds, a duration such as 36h or 7d (1 s to 2147483647 s), or off", v)
	var secs int64
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		secs = n
	} else if d, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.ParseInt(d, 10, 64)
		if err != nil || n > math.MaxInt32/86400 {
			return 0, bad
		}
		secs = n * 86400
	} else if d, err := time.ParseDuration(v); err == nil && d%time.Second == 0 {
		secs = int64(d / time.Second)
	} else {
		return 0, bad
	}
	if secs < 1 || secs > math.MaxInt32 {
		return 0, bad
	}
	return int32(secs), nil
}

// CheckSettings validates table settings (storage.TableSettings.Validate, and a TTL
// property that is not one of the system properties) and returns them in their one
// stored form: a TTL property named storage.DefaultTTLProperty is stored as the default
// (empty), so that settings read back and written again compare equal. Errors are 400
// InvalidInput.
func CheckSettings(st storage.TableSettings) (storage.TableSettings, error) {
	if st.TTLProperty == storage.DefaultTTLProperty {
		st.TTLProperty = ""
	}
	if err := st.Validate(); err != nil {
		return storage.TableSettings{}, err
	}
	if entity.IsReservedName(st.TTLProperty) {
		return storage.TableSettings{}, azerr.Newf(azerr.InvalidInput, "The time-to-live property cannot be the system property '%s'.", st.TTLProperty)
	}
	return st, nil
}

// TableSettings returns a table's catalogue entry (its name in original case and its
// settings) for the table-settings endpoint. A missing table is 404 TableNotFound, as for
// the table's ACL. It is read as rd says, like Get Table.
func (s *Service) TableSettings(ctx context.Context, account, table string, rd Read) (storage.TableInfo, Served, error) {
	v, err := s.view(ctx, rd, 0, entityScope)
	if err != nil {
		return storage.TableInfo{}, Served{}, err
	}
	ti, err := v.GetTable(ctx, account, table)
	if err != nil {
		return storage.TableInfo{}, notFound(v, err), s.mapErr(err, entityScope)
	}
	s.markAvailable()
	return ti, served(v), nil
}

// SetTableSettings replaces a table's settings. The change applies to writes that start
// after it returns; entities keep the expiry they were written with. A missing table is
// 404 TableNotFound, as for the table's ACL.
func (s *Service) SetTableSettings(ctx context.Context, account, table string, settings storage.TableSettings) error {
	st, err := CheckSettings(settings)
	if err != nil {
		return err
	}
	defer s.indexHints.forget(account, table)
	return s.mapErr(s.eng.SetTableSettings(ctx, account, table, st), entityScope)
}
