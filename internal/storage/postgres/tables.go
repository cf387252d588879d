package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CreateTable adds a table under a new id from the sequence, with its settings and a
// new settings generation (and, with the change feed on, its feed, in the same
// statement). It fails with ErrTableExists when the account has a table of the same
// TableKey.
func (e *Engine) CreateTable(ctx context.Context, account, name string, settings storage.TableSettings) error {
	if settings.ChangeFeedOn() && e.dialect != dialectPostgres {
		return errNoChangeFeed
	}
	acct, key := []byte(account), []byte(storage.TableKey(name))
	settings = storage.AssignIndexIDs(storage.TableSettings{}, settings, true)
	return e.retry(ctx, "create table", func() error {
		var id, gen int64
		err := e.onPrimary(ctx, func(c *pgxpool.Conn) error {
			if settings.ChangeFeedOn() {
				return c.QueryRow(ctx, e.q.createTableFeed, acct, key, name, storage.MarshalSettings(settings),
					settings.ChangeFeed).Scan(&id, &gen)
			}
			return c.QueryRow(ctx, e.q.createTable, acct, key, name, storage.MarshalSettings(settings)).Scan(&id, &gen)
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return storage.ErrTableExists
		}
		if err != nil {
			return err
		}
		e.cache.put(tableRef{string(acct), string(key)}, tableEntry{id: id, gen: gen, settings: settings})
		return nil
	})
}

// GetTable reports a table's display name and settings, from the catalogue (not the
// write path's cache).
func (r reads) GetTable(ctx context.Context, account, name string) (storage.TableInfo, error) {
	var info storage.TableInfo
	err := r.retry(ctx, "get table", func() error {
		var raw []byte
		err := r.db.QueryRow(ctx, r.e.q.getTable, []byte(account), []byte(storage.TableKey(name))).Scan(&info.Name, &raw)
		if errors.Is(err, pgx.ErrNoRows) {
			return storage.ErrTableNotFound
		}
		if err != nil {
			return err
		}
		info.Settings, err = storage.UnmarshalSettings(raw)
		return err
	})
	return info, err
}

// SetTableSettings replaces a table's settings and takes a new generation, in one
// transaction that locks the catalogue row first (index ids go on from the stored
// settings): every front end's cached copy is stale from its commit on, so every write
// that starts after it returns uses the new settings (settings.go). On PostgreSQL the
// settings statement also turns the table's change feed on (making it, or continuing its
// numbering) or off (recording feed-off), in the same transaction (changes.go).
func (e *Engine) SetTableSettings(ctx context.Context, account, name string, settings storage.TableSettings) error {
	if settings.ChangeFeedOn() && e.dialect != dialectPostgres {
		return errNoChangeFeed
	}
	acct, key := []byte(account), []byte(storage.TableKey(name))
	return e.retry(ctx, "set table settings", func() error {
		var id, gen int64
		var assigned storage.TableSettings
		var work bool
		err := e.onPrimary(ctx, func(c *pgxpool.Conn) error {
			return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
				// The stored settings, locked: the engine's part of the index
				// declarations (ids, states) goes on from them (storage.AssignIndexIDs).
				var raw []byte
				if err := tx.QueryRow(ctx, e.q.lockSettings, acct, key).Scan(&raw); err != nil {
					return err
				}
				stored, err := storage.UnmarshalSettings(raw)
				if err != nil {
					return err
				}
				assigned = storage.AssignIndexIDs(stored, settings, false)
				if e.dialect != dialectPostgres {
					if err := tx.QueryRow(ctx, e.q.setSettings, acct, key, storage.MarshalSettings(assigned)).Scan(&id, &gen); err != nil {
						return err
					}
					work, err = e.recordIndexWork(ctx, tx, id, stored, assigned)
					return err
				}
				var off bool
				if err := tx.QueryRow(ctx, e.q.setSettingsFeed, acct, key, storage.MarshalSettings(assigned),
					settings.ChangeFeed).Scan(&id, &gen, &off); err != nil {
					return err
				}
				// Indexes declared go to the builder, indexes dropped to the removal of
				// their entries (indexbuild.go), with the change.
				if work, err = e.recordIndexWork(ctx, tx, id, stored, assigned); err != nil || !off {
					return err
				}
				// The feed was on and is off now: the table's writes become plain
				// statements, which leave rows that refer to a lean record alone, so
				// the records get their state and the rows lose their references
				// here. The statement above holds the feed's counter, so every write
				// that recorded has committed, and this statement's snapshot sees it,
				// or it waits for the counter and fails its seal (changes.go).
				_, err = tx.Exec(ctx, e.q.feedOffFill, id)
				return err
			})
		})
		if errors.Is(err, pgx.ErrNoRows) {
			e.cache.drop(tableRef{string(acct), string(key)})
			return storage.ErrTableNotFound
		}
		if err != nil {
			return err
		}
		e.cache.put(tableRef{string(acct), string(key)}, tableEntry{id: id, gen: gen, settings: assigned})
		if work {
			e.wakeIndexes()
		}
		return nil
	})
}

// ListTables reads one page of the account's catalogue in key order; limit ≤ 0 means no
// limit.
func (r reads) ListTables(ctx context.Context, account, from string, limit int) ([]storage.TableInfo, string, error) {
	var (
		out  []storage.TableInfo
		next string
	)
	err := r.retry(ctx, "list tables", func() error {
		out, next = nil, ""
		n := int64(limit) + 1
		if limit <= 0 {
			n = 1 << 62
		}
		rows, err := r.db.Query(ctx, r.e.q.listTables, []byte(account), []byte(storage.TableKey(from)), n)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				name string
				raw  []byte
			)
			if err := rows.Scan(&name, &raw); err != nil {
				return err
			}
			if limit > 0 && len(out) == limit {
				next = name
				break
			}
			settings, err := storage.UnmarshalSettings(raw)
			if err != nil {
				return err
			}
			out = append(out, storage.TableInfo{Name: name, Settings: settings})
		}
		return rows.Err()
	})
	if err != nil {
		return nil, "", err
	}
	return out, next, nil
}

// DeleteTable removes the table from the catalogue and queues its id for purging, in
// one statement. Every later statement, from any front end, resolves the name to
// nothing, and a table created under the name gets a new id, so the old rows are
// unreachable at once; the purger removes them in the background. A table's change
// feed is marked deleted in the same statement, with its table-deleted record (also
// after the feed was turned off); it stays readable by its id until retention removes it (changes.go).
func (e *Engine) DeleteTable(ctx context.Context, account, name string) error {
	err := e.retry(ctx, "delete table", func() error {
		var n int64
		err := e.onPrimary(ctx, func(c *pgxpool.Conn) (err error) {
			if e.dialect == dialectPostgres {
				return c.QueryRow(ctx, e.q.deleteTableFeed, []byte(account), []byte(storage.TableKey(name))).Scan(&n)
			}
			tag, err := c.Exec(ctx, e.q.deleteTable, []byte(account), []byte(storage.TableKey(name)))
			n = tag.RowsAffected()
			return err
		})
		if err != nil {
			return err
		}
		if n == 0 {
			return storage.ErrTableNotFound
		}
		return nil
	})
	e.cache.drop(tableRef{account, storage.TableKey(name)})
	if err == nil {
		e.pendingPurges.Add(1)
		e.wakePurger()
	}
	return err
}

// GetTableACL reads the table's stored access policies from its catalogue row.
func (r reads) GetTableACL(ctx context.Context, account, name string) ([]byte, error) {
	var acl []byte
	err := r.retry(ctx, "get table acl", func() error {
		acl = nil
		err := r.db.QueryRow(ctx, r.e.q.getACL, []byte(account), []byte(storage.TableKey(name))).Scan(&acl)
		if errors.Is(err, pgx.ErrNoRows) {
			return storage.ErrTableNotFound
		}
		return err
	})
	if err != nil || len(acl) == 0 {
		return nil, err
	}
	return acl, nil
}

// SetTableACL writes the table's stored access policies into its catalogue row (NULL
// for an empty acl), committed when the statement returns.
func (e *Engine) SetTableACL(ctx context.Context, account, name string, acl []byte) error {
	if len(acl) == 0 {
		acl = nil // NULL
	}
	return e.retry(ctx, "set table acl", func() error {
		var tag pgconn.CommandTag
		err := e.onPrimary(ctx, func(c *pgxpool.Conn) (err error) {
			tag, err = c.Exec(ctx, e.q.setACL, []byte(account), []byte(storage.TableKey(name)), acl)
			return err
		})
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return storage.ErrTableNotFound
		}
		return nil
	})
}

// GetServiceProperties reads the account's service properties.
func (r reads) GetServiceProperties(ctx context.Context, account string) ([]byte, error) {
	var props []byte
	err := r.retry(ctx, "get service properties", func() error {
		props = nil
		err := r.db.QueryRow(ctx, r.e.q.getSvcProps, []byte(account)).Scan(&props)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil || len(props) == 0 {
		return nil, err
	}
	return props, nil
}

// SetServiceProperties upserts the account's service properties (deletes them when
// props is empty), committed when the statement returns.
func (e *Engine) SetServiceProperties(ctx context.Context, account string, props []byte) error {
	return e.retry(ctx, "set service properties", func() error {
		return e.onPrimary(ctx, func(c *pgxpool.Conn) (err error) {
			if len(props) == 0 {
				_, err = c.Exec(ctx, e.q.clearSvcProps, []byte(account))
			} else {
				_, err = c.Exec(ctx, e.q.setSvcProps, []byte(account), props)
			}
			return err
		})
	})
}

// Purge deletes the rows of every deleted table now, instead of waiting for the
// background purger, and returns when done. Purge entries older than the grace period
// are dropped once their table's rows are gone. It is a maintenance hook.
func (e *Engine) Purge(ctx context.Context) error {
	if e.closed.Load() {
		return ErrClosed
	}
	return e.purgePending(ctx)
}

func (e *Engine) wakePurger() {
	select {
	case e.purgeWake <- struct{}{}:
	default:
	}
}

func (e *Engine) purgeLoop() {
	e.every(e.opts.PurgeInterval, e.purgeWake, func(ctx context.Context) {
		if err := e.purgePending(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("cerulean: purge deleted tables", "err", e.mapErr(ctx, "purge", err))
		}
	})
}

// every runs pass each interval, and whenever wake (nil: never) receives, until Close;
// pass's context ends when Close begins. It is one of the engine's background loops.
func (e *Engine) every(interval time.Duration, wake <-chan struct{}, pass func(context.Context)) {
	defer e.loops.Done()
	ctx, cancel := e.loopContext()
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-e.purgeStop:
			return
		case <-wake:
		case <-t.C:
		}
		pass(ctx)
	}
}

// loopContext is a background loop's context: it ends when Close begins.
func (e *Engine) loopContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-e.purgeStop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// purgePending deletes the rows of every queued table in chunks of PurgeChunk, one
// delete statement (and transaction) per chunk, and drops the queue entries whose grace
// period has passed and whose rows are all gone. Front ends may purge the same table at
// once: each chunk is idempotent.
//
// It counts the queued tables in pendingPurges, and counts each one off once its rows are
// gone: a pass that fails leaves the rest counted, and a table deleted meanwhile is added
// by DeleteTable and listed by the next pass, which DeleteTable wakes.
func (e *Engine) purgePending(ctx context.Context) error {
	e.purgeMu.Lock()
	defer e.purgeMu.Unlock()
	type entry struct {
		id  int64
		old bool
	}
	var entries []entry
	rows, err := e.pool.Query(ctx, e.q.purgeList, e.opts.PurgeGrace.Milliseconds())
	if err != nil {
		return err
	}
	for rows.Next() {
		var en entry
		if err := rows.Scan(&en.id, &en.old); err != nil {
			rows.Close()
			return err
		}
		entries = append(entries, en)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	e.pendingPurges.Store(int64(len(entries)))
	for _, en := range entries {
		// A table that had a change feed may have rows its lean records refer to: each
		// chunk fills them before it removes the rows (changes.go, "Lean records").
		chunk, rest := e.q.purgeChunk, e.q.purgeRest
		if e.dialect == dialectPostgres {
			var feed bool
			if err := e.pool.QueryRow(ctx, e.q.hasFeed, en.id).Scan(&feed); err != nil {
				return fmt.Errorf("purge table %d: %w", en.id, err)
			}
			if feed {
				chunk, rest = e.q.purgeChunkFeed, e.q.purgeRestFeed
			}
		}
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			var pk, rk []byte
			err := e.pool.QueryRow(ctx, e.q.purgeBound, en.id, PurgeChunk).Scan(&pk, &rk)
			last := errors.Is(err, pgx.ErrNoRows)
			if last {
				_, err = e.pool.Exec(ctx, rest, en.id)
			} else if err == nil {
				_, err = e.pool.Exec(ctx, chunk, en.id, pk, rk)
			}
			if err != nil {
				if retryable(err) {
					continue
				}
				return fmt.Errorf("purge table %d: %w", en.id, err)
			}
			if last {
				break
			}
		}
		// The table's index entries, after its rows (no write adds any now).
		if err := e.purgeTableEntries(ctx, en.id); err != nil {
			return fmt.Errorf("purge table %d: %w", en.id, err)
		}
		e.pendingPurges.Add(-1)
		if en.old {
			if _, err := e.pool.Exec(ctx, e.q.purgeDone, en.id); err != nil {
				return fmt.Errorf("purge table %d: %w", en.id, err)
			}
		}
	}
	return nil
}

// Name is the engine's name.
func (e *Engine) Name() string { return "postgres" }
