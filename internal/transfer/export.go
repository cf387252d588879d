package transfer

import (
	"context"
	"fmt"
	"strings"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/transfer/record"
)

// Output is where an export writes: a record.Writer and, for a resumable export, a way
// to make what it wrote durable and know its length.
type Output interface {
	record.Writer
	// Sync flushes and returns the output's length in bytes, or -1 when it cannot say
	// (stdout, a spooled CSV): such an export is not resumable.
	Sync() (int64, error)
}

// ExportOptions are an export's own options.
type ExportOptions struct {
	Options
	Tables []string
	Filter string
	Select string
	// Job identifies the run for its checkpoint.
	Job string
	// Resumed is called with the checkpoint's output length before a resumed export
	// writes: the caller truncates its file to it.
	Resumed func(outputBytes int64) error
}

// Export reads tables from src (all of them when Tables is empty) and writes every
// entity to out, table after table, each in the service's order (PartitionKey, RowKey).
// A Cerulean table's settings go first, as a settings record, and its expiring
// entities carry their expiry (settings.go). With a checkpoint, the output is synced
// after each page and the checkpoint records the page's continuation with the output
// length; a resumed export truncates the output there and goes on.
func Export(ctx context.Context, src *client.Client, out Output, o ExportOptions) error {
	obs := o.observer()
	cp, err := startTables(ctx, src, o.Options, o.Job, o.Tables)
	if err != nil {
		return err
	}
	ep := endpoint{}
	if !o.IgnoreSettings {
		if ep, err = probe(ctx, src, o.Retry, obs); err != nil {
			return err
		}
	}
	if o.Resume && o.Resumed != nil {
		if err := o.Resumed(cp.OutputBytes); err != nil {
			return err
		}
	}
	for i := range cp.Tables {
		ts := &cp.Tables[i]
		if ts.Done {
			continue
		}
		settings, err := sourceSettings(ctx, src, ep, ts.Name, o.IgnoreSettings, o.Retry, obs)
		if err != nil {
			return err
		}
		if settings != nil && ts.Next.Done() && ts.Rows == 0 {
			// The table starts here (a resumed export truncated the output before it).
			if err := out.Write(&record.Record{Table: ts.Name, Settings: settings}); err != nil {
				return fmt.Errorf("table %s: %w", ts.Name, err)
			}
		}
		exact := exactExpiry(settings)
		// A Cerulean source (settings carried) is asked for every entity's expiry.
		q := client.Query{Filter: o.Filter, Select: withKeys(o.Select), Continuation: ts.Next, Expiry: settings != nil}
		pr := readPages(ctx, src, ts.Name, q, o.Retry, obs)
		err = func() error {
			defer pr.close()
			for po := range pr.pages {
				if po.err != nil {
					return po.err
				}
				if err := checkPage(ts.Name, exact, po.page); err != nil {
					return err
				}
				bytes := 0
				for j, raw := range po.page.Entities {
					r, err := record.FromAnswer(raw)
					if err != nil {
						return fmt.Errorf("table %s: entity %d of a page: %s", ts.Name, j, record.Detail(err))
					}
					if err := checkRecord(ts.Name, exact, &r); err != nil {
						return err
					}
					r.Table = ts.Name
					if err := out.Write(&r); err != nil {
						return fmt.Errorf("write output: %w", err)
					}
					bytes += len(raw)
				}
				if o.Checkpoint != "" {
					n, err := out.Sync()
					if err != nil {
						return fmt.Errorf("write output: %w", err)
					}
					ts.Next, ts.Rows = po.page.Next, ts.Rows+int64(len(po.page.Entities))
					cp.OutputBytes = n
					if err := cp.save(o.Checkpoint); err != nil {
						return err
					}
				}
				obs.Done(len(po.page.Entities), bytes)
				if stopped(o.Stop) && !po.page.Next.Done() {
					return ErrInterrupted
				}
			}
			return nil
		}()
		if err != nil {
			return err
		}
		ts.Done = true
		if err := cp.save(o.Checkpoint); err != nil {
			return err
		}
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	cp.Done = true
	return cp.save(o.Checkpoint)
}

// withKeys adds the keys and Timestamp to a $select list: the service returns only the
// properties selected, and a record needs its keys.
func withKeys(sel string) string {
	if strings.TrimSpace(sel) == "" {
		return ""
	}
	have := map[string]bool{}
	var out []string
	for _, n := range strings.Split(sel, ",") {
		if n = strings.TrimSpace(n); n != "" && !have[n] {
			have[n] = true
			out = append(out, n)
		}
	}
	for _, k := range []string{"PartitionKey", "RowKey", "Timestamp"} {
		if !have[k] {
			out = append(out, k)
		}
	}
	return strings.Join(out, ",")
}
