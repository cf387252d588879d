package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5"
)

// Table settings on the write path.
//
// Every row an Apply writes needs storage.Expiry of the table's settings, computed in Go
// before the statements are sent (it validates the entity's TTL property, and an invalid
// one must fail the Apply before anything is written). Reading the settings first would
// cost a round trip per write, so each front end caches them: (account, table key) →
// (table id, generation, settings). The generation is a new value of a sequence at every
// create and settings change, kept in the catalogue row, and every write statement that
// stores an expiry resolves the table with "and the generation is still the one I
// computed with". A stale cache therefore writes nothing: a write that wrote nothing
// reads the current catalogue row and the rows (diagnose), which refreshes the cache,
// and the Apply runs again with it (errStale). So a SetTableSettings on any front end
// applies to every write that starts after it returns, everywhere, and a write costs no
// extra round trip unless the settings changed or its precondition failed.
//
// The single-mutation statements also take the table id from the cache, so they need
// not look it up by name, and check it against the catalogue row in the same statement:
// ids come from a sequence and are never reused, so a table deleted (and perhaps
// created again, under a new id) since the entry was cached is never written under its
// old id by a statement that starts after the delete committed (one already running
// is the purge's grace period, Options.PurgeGrace, as before).
//
// Deletes compute no expiry and do not check the generation, only the id; the
// read-modify-write path reads the settings with the rows it reads anyway.

// errStale reports a write that found the table's settings changed since they were
// cached; the cache has been refreshed and the Apply runs again at once.
var errStale = fmt.Errorf("table settings changed: %w", errConflict)

// maxCachedTables bounds the cache; when full, arbitrary entries make room.
const maxCachedTables = 100_000

type tableRef struct{ account, key string }

// tableEntry is a table's id and its settings as of generation gen. The id lets the
// single-mutation statements go straight to the entities' primary key; they check it
// (and the generation) against the catalogue row, so a stale entry writes nothing.
type tableEntry struct {
	id       int64
	gen      int64
	settings storage.TableSettings
}

type settingsCache struct {
	mu sync.RWMutex
	m  map[tableRef]tableEntry
}

func (c *settingsCache) get(r tableRef) (tableEntry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	en, ok := c.m[r]
	return en, ok
}

// put records en. Of two racing puts the older may win; the next write then finds it
// stale and refreshes it again.
func (c *settingsCache) put(r tableRef, en tableEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[tableRef]tableEntry)
	}
	if len(c.m) >= maxCachedTables {
		n := 0
		for k := range c.m {
			delete(c.m, k)
			if n++; n >= maxCachedTables/10 {
				break
			}
		}
	}
	c.m[r] = en
}

func (c *settingsCache) drop(r tableRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, r)
}

// entry returns the table's cached settings, loading them on a miss.
//
// Concurrent misses of one table share one load: a burst of first writes (a front end
// that starts, or comes back, under load) would otherwise take a pooled connection
// each, and a new connection costs the database a process and its preparations (tens
// of milliseconds on a small machine), so the burst's first writes waited seconds for
// the connections its own lookups had asked for. Sharing adds no staleness the write
// path does not already handle: a load that began before a change may be cached after
// it, as a racing load could before, and the write it serves then finds it stale.
func (e *Engine) entry(ctx context.Context, acct, key []byte) (tableEntry, error) {
	r := tableRef{string(acct), string(key)}
	if en, ok := e.cache.get(r); ok {
		return en, nil
	}
	for {
		// An account name has no '/', so the key names one table.
		ch := e.loads.DoChan(r.account+"/"+r.key, func() (any, error) {
			return e.loadEntry(ctx, r)
		})
		select {
		case <-ctx.Done():
			return tableEntry{}, ctx.Err()
		case res := <-ch:
			if res.Err != nil && ctx.Err() == nil && (errors.Is(res.Err, context.Canceled) || errors.Is(res.Err, context.DeadlineExceeded)) {
				continue // the request that loaded it gave up; this one has not
			}
			if res.Err != nil {
				return tableEntry{}, res.Err
			}
			return res.Val.(tableEntry), nil
		}
	}
}

// loadEntry reads the table's catalogue row and caches its entry.
func (e *Engine) loadEntry(ctx context.Context, r tableRef) (tableEntry, error) {
	var (
		en  tableEntry
		raw []byte
	)
	err := e.pool.QueryRow(ctx, e.q.loadTable, []byte(r.account), []byte(r.key)).Scan(&en.id, &en.gen, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return tableEntry{}, storage.ErrTableNotFound
	}
	if err != nil {
		return tableEntry{}, err
	}
	if en.settings, err = storage.UnmarshalSettings(raw); err != nil {
		return tableEntry{}, err
	}
	e.cache.put(r, en)
	return en, nil
}
