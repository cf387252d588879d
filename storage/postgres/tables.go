package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ceruleandb/cerulean/storage"
	"github.com/jackc/pgx/v5"
)

// CreateTable adds a table under a new id from the sequence. It fails with
// ErrTableExists when the account has a table of the same TableKey.
func (e *Engine) CreateTable(ctx context.Context, account, name string, settings storage.TableSettings) error {
	return e.retry(ctx, "create table", func() error {
		tag, err := e.pool.Exec(ctx, e.q.createTable, []byte(account), []byte(storage.TableKey(name)), name)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return storage.ErrTableExists
		}
		return nil
	})
}

// GetTable reports a table's display name.
func (e *Engine) GetTable(ctx context.Context, account, name string) (storage.TableInfo, error) {
	var info storage.TableInfo
	err := e.retry(ctx, "get table", func() error {
		err := e.pool.QueryRow(ctx, e.q.getTable, []byte(account), []byte(storage.TableKey(name))).Scan(&info.Name)
		if errors.Is(err, pgx.ErrNoRows) {
			return storage.ErrTableNotFound
		}
		return err
	})
	return info, err
}

// ListTables reads one page of the account's catalogue in key order; limit ≤ 0 means no
// limit.
func (e *Engine) ListTables(ctx context.Context, account, from string, limit int) ([]storage.TableInfo, string, error) {
	var (
		out  []storage.TableInfo
		next string
	)
	err := e.retry(ctx, "list tables", func() error {
		out, next = nil, ""
		n := int64(limit) + 1
		if limit <= 0 {
			n = 1 << 62
		}
		rows, err := e.pool.Query(ctx, e.q.listTables, []byte(account), []byte(storage.TableKey(from)), n)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				return err
			}
			if limit > 0 && len(out) == limit {
				next = name
				break
			}
			out = append(out, storage.TableInfo{Name: name})
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
// unreachable at once; the purger removes them in the background.
func (e *Engine) DeleteTable(ctx context.Context, account, name string) error {
	err := e.retry(ctx, "delete table", func() error {
		tag, err := e.pool.Exec(ctx, e.q.deleteTable, []byte(account), []byte(storage.TableKey(name)))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return storage.ErrTableNotFound
		}
		return nil
	})
	if err == nil {
		e.wakePurger()
	}
	return err
}

// GetTableACL reads the table's stored access policies from its catalogue row.
func (e *Engine) GetTableACL(ctx context.Context, account, name string) ([]byte, error) {
	var acl []byte
	err := e.retry(ctx, "get table acl", func() error {
		acl = nil
		err := e.pool.QueryRow(ctx, e.q.getACL, []byte(account), []byte(storage.TableKey(name))).Scan(&acl)
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
		tag, err := e.pool.Exec(ctx, e.q.setACL, []byte(account), []byte(storage.TableKey(name)), acl)
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
func (e *Engine) GetServiceProperties(ctx context.Context, account string) ([]byte, error) {
	var props []byte
	err := e.retry(ctx, "get service properties", func() error {
		props = nil
		err := e.pool.QueryRow(ctx, e.q.getSvcProps, []byte(account)).Scan(&props)
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
		var err error
		if len(props) == 0 {
			_, err = e.pool.Exec(ctx, e.q.clearSvcProps, []byte(account))
		} else {
			_, err = e.pool.Exec(ctx, e.q.setSvcProps, []byte(account), props)
		}
		return err
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
	defer close(e.purgeDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-e.purgeStop
		cancel()
	}()
	t := time.NewTicker(e.opts.PurgeInterval)
	defer t.Stop()
	for {
		select {
		case <-e.purgeStop:
			return
		case <-e.purgeWake:
		case <-t.C:
		}
		if err := e.purgePending(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("cerulean: purge deleted tables", "err", e.mapErr(ctx, "purge", err))
		}
	}
}

// purgePending deletes the rows of every queued table in chunks of PurgeChunk, one
// statement (and transaction) per chunk, and drops the queue entries whose grace period
// has passed and whose rows are all gone. Front ends may purge the same table at once:
// each chunk is idempotent.
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
	for _, en := range entries {
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			tag, err := e.pool.Exec(ctx, e.q.purgeChunk, en.id, PurgeChunk)
			if err != nil {
				if retryable(err) {
					continue
				}
				return fmt.Errorf("purge table %d: %w", en.id, err)
			}
			if tag.RowsAffected() < PurgeChunk {
				break
			}
		}
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

// SetTableSettings TODO(i11).
func (e *Engine) SetTableSettings(ctx context.Context, account, name string, settings storage.TableSettings) error {
	return errors.New("TODO(i11)")
}

// ReaderAt TODO(i11).
func (e *Engine) ReaderAt(ctx context.Context, p storage.Position) (storage.Reader, error) {
	return e, nil
}
