package transfer

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/transfer/record"
)

// Elastic tables (docs/compatibility.md "Elastic tables: settings on the wire", "Time-to-live") move with their settings and each entity's
// exact expiry (docs/compatibility.md "An entity's exact expiry"): a Cerulean source's table settings are read (GET
// /{table}?comp=properties) and the target table is created with them; its entities are
// read with the expiry each was stored with (the cerulean.expiry annotation, asked for
// with Prefer: odata.include-annotations) and written with it (x-cerulean-expiry: the
// instant, or "never"), their properties unchanged. An absolute instant, not a remaining
// lifetime, is what travels (in JSON Lines, "odata.expiry"; a table's settings line says
// that an entity without one never expires): a slow transfer, a retry or a file imported
// a day later cannot lengthen an entity's life, and an entity written while time-to-live
// was off keeps no expiry after it was turned on, as at the source. An entity whose
// expiry has passed when it would be written is not written.
//
// A Cerulean that does not answer the annotation (an older build) is refused for an
// elastic table, as source and as target: guessing the expiry from the table's current
// settings loses entities (one written while time-to-live was off is given one) and keeps
// others (one written before it was turned off loses its own), and an older target would
// ignore the header and compute its own.
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
	// Index declarations without their states (the server's, per table).
	var ixs []client.Index
	for _, ix := range s.Indexes {
		ix.State, ix.Progress, ix.Failure = "", 0, ""
		ixs = append(ixs, ix)
	}
	s.Indexes = ixs
	return s
}

func sameSettings(a, b client.TableSettings) bool {
	return reflect.DeepEqual(normalSettings(a), normalSettings(b))
}

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

// exactExpiry reports whether the entities of a table whose source settings are s (nil:
// not carried) move with their exact expiry: an elastic table's do.
func exactExpiry(s *client.TableSettings) bool { return s != nil && s.Elastic }

// oldCerulean is why a Cerulean that does not answer the expiry annotation is refused.
const oldCerulean = "does not show entities' exact expiries (a Cerulean older than this tool, without the cerulean.expiry annotation and the x-cerulean-expiry header)"

// checkPage checks what a source page of table says of its entities' expiries: a table
// whose expiries are carried (exact) needs the service's answer to the annotation; a
// standard table of a Cerulean source (settings carried, not exact) must hold no entity
// with an expiry — one written while the table was elastic keeps it, and a standard
// target table cannot be given it.
func checkPage(table string, exact bool, page *client.Page) error {
	if exact && !page.Expiry {
		return fmt.Errorf("table %s is elastic, and the source %s: upgrade the source server, or give --settings=false to move the entities alone (the target's settings then decide their expiry)", table, oldCerulean)
	}
	return nil
}

// checkRecord refuses an entity of a standard source table that keeps an expiry (see
// checkPage).
func checkRecord(table string, exact bool, r *record.Record) error {
	if !exact && r.Expiry != 0 {
		return fmt.Errorf("table %s is standard at the source, yet its entity PartitionKey %q, RowKey %q keeps an expiry (%s) from when the table was elastic, and a standard table cannot be given one: make the source table elastic again (cerulean table set %s --elastic) to carry it, or give --settings=false to move the entities without their expiries", table, r.Entity.PartitionKey, r.Entity.RowKey, entity.FormatTicks(r.Expiry), table)
	}
	return nil
}

// checkTarget makes sure the target takes the exact expiries of table's entities: it
// answers the annotation on a query of the table, as every Cerulean that takes
// x-cerulean-expiry does. An older one would ignore the header and compute expiries of
// its own.
func checkTarget(ctx context.Context, dst *client.Client, table string, retry Retry) error {
	var page *client.Page
	err := retry.do(ctx, func(int) error {
		var err error
		page, err = dst.QueryEntities(ctx, table, client.Query{Top: 1, Expiry: true})
		return err
	}, nil)
	if err != nil {
		return fmt.Errorf("table %s on the target: %w", table, err)
	}
	if !page.Expiry {
		return fmt.Errorf("table %s is elastic, and the target %s: upgrade the target server, or give --settings=false to move the entities alone (the target's settings then decide their expiry)", table, oldCerulean)
	}
	return nil
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
