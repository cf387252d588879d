package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
)

// DefaultTTLProperty is the entity property that overrides a table's time-to-live when
// TableSettings.TTLProperty is empty: Dataverse's name for it.
const DefaultTTLProperty = "TTLInSeconds"

// TTL values of TableSettings.DefaultTTL and of an entity's TTL property, with Cosmos DB's
// meanings.
const (
	// TTLOff turns time-to-live off for a table: nothing expires and entities' TTL
	// properties are ordinary properties.
	TTLOff int32 = 0
	// TTLNever, as a table default, turns time-to-live on without a default: only
	// entities that carry a TTL expire. As an entity's value it means "never expire".
	TTLNever int32 = -1
)

// ticksPerSecond converts a TTL in seconds to version ticks (100 ns).
const ticksPerSecond = 10_000_000

// TableSettings are a table's Cerulean settings, kept in the catalogue entry beside the
// table id. The zero value is a standard table: exact Azure semantics.
type TableSettings struct {
	// Elastic marks an elastic table: time-to-live may be on, and bulk writes are
	// accepted. A standard table has neither.
	Elastic bool `json:"elastic,omitempty"`
	// DefaultTTL is the table's time-to-live: TTLOff, TTLNever, or a number of seconds
	// (1 … 2^31−1) after its last write at which an entity without its own TTL expires.
	// Only an elastic table may have it on.
	DefaultTTL int32 `json:"defaultTtl,omitempty"`
	// TTLProperty names the Int32/Int64 entity property that overrides DefaultTTL for
	// one entity; empty means DefaultTTLProperty.
	TTLProperty string `json:"ttlProperty,omitempty"`
	// ChangeFeed, when positive, turns the table's change feed on and is its retention
	// in seconds: records older than that are removed (changes.go). 0 is off. Standard
	// and elastic tables alike may have it.
	ChangeFeed int32 `json:"changeFeed,omitempty"`
	// Indexes are the table's secondary indexes (indexes.go); elastic tables only.
	Indexes []IndexDef `json:"indexes,omitempty"`
	// IndexIDs is the highest index id the engine has assigned in the table: ids are
	// never reused. Only the engine sets it.
	IndexIDs uint32 `json:"indexIds,omitempty"`
}

// IsStandard reports whether s is the zero value (a standard table without a change
// feed or indexes).
func (s TableSettings) IsStandard() bool {
	return !s.Elastic && s.DefaultTTL == 0 && s.TTLProperty == "" && s.ChangeFeed == 0 && len(s.Indexes) == 0 && s.IndexIDs == 0
}

// Equal reports whether s and o are the same settings.
func (s TableSettings) Equal(o TableSettings) bool {
	return s.Elastic == o.Elastic && s.DefaultTTL == o.DefaultTTL && s.TTLProperty == o.TTLProperty &&
		s.ChangeFeed == o.ChangeFeed && s.IndexIDs == o.IndexIDs && slices.EqualFunc(s.Indexes, o.Indexes, func(a, b IndexDef) bool {
		return a.SameDefinition(b) && a.Name == b.Name && a.ID == b.ID && a.State == b.State
	})
}

// TTLOn reports whether entities of the table can expire.
func (s TableSettings) TTLOn() bool { return s.Elastic && s.DefaultTTL != TTLOff }

// TTLPropertyName is the name of the per-entity TTL property.
func (s TableSettings) TTLPropertyName() string {
	if s.TTLProperty == "" {
		return DefaultTTLProperty
	}
	return s.TTLProperty
}

// Validate checks that the settings are consistent: a default TTL of TTLOff, TTLNever or
// a positive number of seconds, on an elastic table only, and a TTL property name that is
// a valid property name. Errors are *azerr.Error (400 InvalidInput).
func (s TableSettings) Validate() error {
	if s.DefaultTTL < TTLNever {
		return azerr.Newf(azerr.InvalidInput, "The default time-to-live %d is not valid: it must be -1 (on, no default) or a number of seconds from 1 to 2147483647; omit it to turn time-to-live off.", s.DefaultTTL)
	}
	if !s.Elastic && s.DefaultTTL != TTLOff {
		return azerr.Newf(azerr.InvalidInput, "Time-to-live is available on elastic tables only.")
	}
	if !s.Elastic && s.TTLProperty != "" {
		return azerr.Newf(azerr.InvalidInput, "A time-to-live property is available on elastic tables only.")
	}
	if s.ChangeFeed < 0 {
		return azerr.Newf(azerr.InvalidInput, "The change feed retention %d is not valid: it must be a number of seconds from 1 to 2147483647; omit it to turn the change feed off.", s.ChangeFeed)
	}
	if s.TTLProperty != "" {
		if err := entity.ValidatePropertyName(s.TTLProperty); err != nil {
			return azerr.Newf(azerr.InvalidInput, "The time-to-live property name '%s' is not a valid property name.", s.TTLProperty)
		}
	}
	return validateIndexes(s)
}

// MarshalSettings encodes settings for an engine's catalogue; a standard table encodes to
// nil, so engines store nothing for it.
func MarshalSettings(s TableSettings) []byte {
	if s.IsStandard() {
		return nil
	}
	b, _ := json.Marshal(s) // cannot fail: plain fields
	return b
}

// UnmarshalSettings decodes MarshalSettings' output; nil or empty is a standard table.
func UnmarshalSettings(b []byte) (TableSettings, error) {
	var s TableSettings
	if len(b) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return TableSettings{}, fmt.Errorf("table settings: %w", err)
	}
	return s, nil
}

// Expiry returns when an entity written with props at version expires, in version
// ticks (100 ns since the Unix epoch), or 0 if it never does. Cosmos DB's rules:
//   - With time-to-live off (TTLOn false), nothing expires and the TTL property is an
//     ordinary property, whatever its type or value.
//   - Otherwise an entity's TTL property, when present, decides: -1 never expires, a
//     positive value is seconds after the write. 0, another negative value, a value above
//     2^31−1 or a type other than Int32 or Int64 is refused with a 400 InvalidInput error
//     naming the property.
//   - Without the property, the table default decides: TTLNever never expires, a number
//     of seconds expires that long after the write.
//
// Engines call it for every row an Apply writes (after merging), with the row's new
// version (its Timestamp), and store the result beside the version; any write therefore
// restarts the clock. An expiry beyond the int64 range never happens: 2^31 s is 2.1e16
// ticks.
func Expiry(s TableSettings, props []entity.Property, version int64) (int64, error) {
	if !s.TTLOn() {
		return 0, nil
	}
	name := s.TTLPropertyName()
	ttl := int64(s.DefaultTTL)
	for i := range props {
		if props[i].Name != name {
			continue
		}
		v := props[i].Value
		if v.Type != entity.Int32 && v.Type != entity.Int64 {
			return 0, azerr.Newf(azerr.InvalidInput, "The time-to-live property '%s' must be an Edm.Int32 or Edm.Int64 number of seconds (or -1 for never), not %s.", name, v.Type.EDMName())
		}
		if v.Int == 0 || v.Int < -1 || v.Int > math.MaxInt32 {
			return 0, azerr.Newf(azerr.InvalidInput, "The time-to-live property '%s' has the value %d; it must be -1 (never expire) or a number of seconds from 1 to 2147483647.", name, v.Int)
		}
		ttl = v.Int
		break
	}
	if ttl == int64(TTLNever) {
		return 0, nil
	}
	return version + ttl*ticksPerSecond, nil
}

// Mutation.Expiry values other than an instant.
const (
	// ExpiryComputed, the zero value, has the row's expiry computed (Expiry).
	ExpiryComputed int64 = 0
	// ExpiryNever gives the row no expiry, whatever the table's settings and its TTL
	// property.
	ExpiryNever int64 = -1
)

// MutationExpiry returns the expiry of the row a mutation m (not a Delete) leaves with
// props at version, under the table's settings s: m's explicit expiry (Mutation.Expiry)
// when it has one — refused with 400 InvalidInput on a standard table — and otherwise
// what Expiry computes. It does not judge an explicit instant against version (see
// SettleExpiry).
func MutationExpiry(s TableSettings, m *Mutation, props []entity.Property, version int64) (int64, error) {
	switch {
	case m.Expiry == ExpiryComputed:
		return Expiry(s, props, version)
	case m.Expiry < ExpiryNever:
		return 0, fmt.Errorf("mutation expiry %d is not valid", m.Expiry)
	case !s.Elastic:
		return 0, azerr.Newf(azerr.InvalidInput, "An entity's expiry can be given on an elastic table only; this table is standard.")
	case m.Expiry == ExpiryNever:
		return 0, nil
	}
	return m.Expiry, nil
}

// SettleExpiry gives row r, which mutation m (not a Delete) has just written (Step), its
// expiry under the table's settings s (MutationExpiry) and returns it. When m's explicit
// instant is at or before the row's new version, the row is expired from its own write
// on: SettleExpiry leaves it absent (Exists false, still Dirty, its Version kept so that
// a later write exceeds it) and returns 0, so the engine stores no row for it. On an
// error r is unchanged; the caller undoes the Step.
func SettleExpiry(s TableSettings, m *Mutation, r *Row) (int64, error) {
	exp, err := MutationExpiry(s, m, r.Props, r.Version)
	if err != nil {
		return 0, err
	}
	if m.Expiry > 0 && exp <= r.Version {
		r.Exists, r.Props, r.Encoded = false, nil, nil
		return 0, nil
	}
	return exp, nil
}

// Expired reports whether a record with expiry (0: never) is expired at now (both in
// version ticks). An entity is expired from its expiry instant on.
func Expired(expiry, now int64) bool { return expiry != 0 && expiry <= now }

// Position is an engine's commit position: every committed Apply has one, and a later
// commit has a larger position (Pebble: its sequence number, which survives restarts;
// PostgreSQL: the WAL position after the commit). Zero is "no position" and is covered by
// every state of the engine.
type Position uint64

// ErrFuturePosition means a read asked for a Position the engine has not reached within
// its wait: the position comes from a later or another store, or a replica lags. The read
// may be retried.
var ErrFuturePosition = errors.New("position not reached")
