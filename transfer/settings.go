package transfer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/entity"
	"github.com/ceruleandb/cerulean/transfer/record"
)

// Elastic tables (docs/protocol.md §15.8–15.9) move with their settings and each entity's
// expiry: a Cerulean source's table settings are read (GET /{table}?comp=properties) and
// the target table is created with them; an entity that expires is carried with its
// absolute expiry — Timestamp + TTL, the TTL being its own TTL property or the table's
// default, as the service computes it — and written with the lifetime it has left at
// the moment it is sent, in the table's TTL property (expiry = write time + TTL on the
// target too), or not at all once it has expired. An absolute expiry, not a remaining
// lifetime, is what travels (in JSON Lines, "odata.expiry"): a slow transfer, a retry or
// a file imported a day later cannot lengthen an entity's life.
//
// Azure and Azurite have no elastic tables: their tables are standard, and the target
// table is created as an SDK creates it. Options.IgnoreSettings moves entities alone, as
// before (the target's own settings then apply).

// endpoint is what a run learns of a service before it writes: whether it is Cerulean
// (the only service with elastic tables) and its clock.
type endpoint struct {
	cerulean bool
	clock    time.Time
}

// probe asks c for its name and clock (client.Probe), with retries.
func probe(ctx context.Context, c *client.Client, retry Retry, obs Observer) (endpoint, error) {
	var ep endpoint
	err := retry.do(ctx, func(int) error {
		date, server, err := c.Probe(ctx)
		ep = endpoint{cerulean: strings.HasPrefix(server, "Cerulean"), clock: date}
		return err
	}, obs.Retried)
	if err != nil {
		return endpoint{}, fmt.Errorf("reach %s: %w", c.Endpoint, err)
	}
	if ep.clock.IsZero() {
		ep.clock = time.Now()
	}
	return ep, nil
}

// clockMargin is taken off the target's clock (its Date header, whole seconds) to get
// the earliest Timestamp an entity the job writes can have: it covers the Date's
// truncation and a skew between the front end that dates answers and the clock that
// stamps entities (PostgreSQL's server).
const clockMargin = 2 * time.Second

// sinceOf is Checkpoint.Since for a job starting at the target's clock.
func sinceOf(clock time.Time) int64 { return entity.TimeToTicks(clock.Add(-clockMargin)) }

// sourceSettings is a source table's settings: nil when they are not carried (ignore,
// or a source that is not Cerulean, whose tables are all standard).
func sourceSettings(ctx context.Context, src *client.Client, ep endpoint, table string, ignore bool, retry Retry, obs Observer) (*client.TableSettings, error) {
	if ignore || !ep.cerulean {
		return nil, nil
	}
	var t client.Table
	err := retry.do(ctx, func(int) error {
		var err error
		t, err = src.GetTableSettings(ctx, table)
		return err
	}, obs.Retried)
	var ce *client.Error
	if errors.As(err, &ce) && ce.Status == 403 {
		return nil, fmt.Errorf("table %s: read its settings (an elastic table's settings and its entities' expiry are carried): %w; a table SAS cannot read them: use the account key or an account SAS, or --settings=false to move the entities alone", table, err)
	}
	if err != nil {
		return nil, fmt.Errorf("table %s: read its settings: %w", table, err)
	}
	s := normalSettings(t.TableSettings)
	return &s, nil
}

// normalSettings is s with the defaults spelled out the one way: nothing but Elastic on
// a standard table, the TTL property named on an elastic one.
func normalSettings(s client.TableSettings) client.TableSettings {
	if !s.Elastic {
		return client.TableSettings{}
	}
	if s.TimeToLiveProperty == "" {
		s.TimeToLiveProperty = "TTLInSeconds"
	}
	return s
}

func sameSettings(a, b client.TableSettings) bool { return normalSettings(a) == normalSettings(b) }

// describeSettings is settings as a person reads them.
func describeSettings(s client.TableSettings) string {
	s = normalSettings(s)
	switch {
	case !s.Elastic:
		return "standard"
	case s.DefaultTimeToLive == 0:
		return "elastic, time-to-live off"
	case s.DefaultTimeToLive == -1:
		return fmt.Sprintf("elastic, time-to-live on without a default (property %s)", s.TimeToLiveProperty)
	}
	return fmt.Sprintf("elastic, time-to-live %d s (property %s)", s.DefaultTimeToLive, s.TimeToLiveProperty)
}

// ttlProperty is the TTL property whose value the job writes for expiring entities of a
// table with settings s: "" unless time-to-live is on.
func ttlProperty(s *client.TableSettings) string {
	if s == nil || !s.Elastic || s.DefaultTimeToLive == 0 {
		return ""
	}
	return normalSettings(*s).TimeToLiveProperty
}

// expiryOf is when an entity of a table with settings s expires (0: never), by the
// service's rules (storage.Expiry): with time-to-live on, its own Int32/Int64 TTL
// property decides (-1 never, N seconds after its Timestamp), else the table default.
// A TTL property the service would refuse can only have been written while
// time-to-live was off, so such an entity never expires. The source keeps the expiry an
// entity was written with, and the wire shows only the current settings: an entity
// written before a change of the table's default is given the current default.
func expiryOf(s *client.TableSettings, r *record.Record) int64 {
	name := ttlProperty(s)
	if name == "" || !r.HasTimestamp {
		return 0
	}
	ttl := int64(s.DefaultTimeToLive)
	if v, ok := r.Entity.Get(name); ok {
		if v.Type != entity.Int32 && v.Type != entity.Int64 || v.Int == 0 || v.Int < -1 || v.Int > 1<<31-1 {
			return 0
		}
		ttl = v.Int
	}
	if ttl == -1 {
		return 0
	}
	return r.Timestamp + ttl*10_000_000
}

// ensureTable makes table exist on dst with settings s (nil: whatever the target's rules
// give a table an SDK creates). A table that exists already must have the same
// settings — else entities would expire otherwise than at the source — and is refused
// when it has others or they cannot be read.
func ensureTable(ctx context.Context, dst *client.Client, ep endpoint, table string, s *client.TableSettings, retry Retry) error {
	var body *client.TableSettings
	if s != nil {
		if !s.Elastic && !ep.cerulean {
			s = nil // every table of Azure and Azurite is standard
		} else if !ep.cerulean {
			return fmt.Errorf("table %s is %s at the source, and the target has no elastic tables (it is not Cerulean): --settings=false copies the entities alone, which will not expire", table, describeSettings(*s))
		} else {
			body = s
		}
	}
	err := retry.do(ctx, func(int) error { return dst.CreateTable(ctx, table, body) }, nil)
	var ce *client.Error
	if errors.As(err, &ce) && ce.Code == "TableAlreadyExists" {
		if s == nil {
			return nil
		}
		var t client.Table
		err := retry.do(ctx, func(int) error {
			var err error
			t, err = dst.GetTableSettings(ctx, table)
			return err
		}, nil)
		if err != nil {
			return fmt.Errorf("table %s exists on the target and its settings cannot be read (%v); the source's are %s: --settings=false writes the entities alone, under the target's settings", table, err, describeSettings(*s))
		}
		if !sameSettings(t.TableSettings, *s) {
			return fmt.Errorf("table %s exists on the target as %s, and is %s at the source: change one (cerulean table set) or give --settings=false to write the entities under the target's settings", table, describeSettings(t.TableSettings), describeSettings(*s))
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("create table %s: %w", table, err)
	}
	return nil
}
