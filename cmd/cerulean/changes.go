package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ceruleandb/cerulean/client"
)

// `cerulean changes` prints a table's change feed as JSON Lines (docs/change-feed.md).

type changesOptions struct {
	conn           tableOptions
	from, state    string
	follow         bool
	wait           time.Duration
	startPK, endPK string
}

func changesFlags(o *changesOptions) *flag.FlagSet {
	fs := tableFlags("", &o.conn)
	fs.Init("changes", flag.ContinueOnError)
	fs.StringVar(&o.from, "from", client.FromBeginning, "where to start: beginning (the oldest record retained), now (the feed's end), or a continuation printed by an earlier run")
	fs.BoolVar(&o.follow, "follow", false, "keep reading new changes as they commit (long polling) until interrupted or the table is deleted")
	fs.DurationVar(&o.wait, "wait", 30*time.Second, "with --follow, how long one request waits for a change (at most 60s)")
	fs.StringVar(&o.state, "state", "", "a file that keeps the continuation: read from it when it exists (instead of --from), rewritten after every page printed, so a run resumes where the last one stopped")
	fs.StringVar(&o.startPK, "start-pk", "", "only records of PartitionKeys from this one on (inclusive)")
	fs.StringVar(&o.endPK, "end-pk", "", "only records of PartitionKeys before this one (exclusive)")
	return fs
}

func changesUsage(w io.Writer) {
	fmt.Fprint(w, `Usage of cerulean changes:
  cerulean changes TABLE [--from beginning|now|CONTINUATION] [--follow] [--state FILE]

Prints the change feed of a table (one whose feed is on: cerulean table set TABLE
--change-feed 7d) as JSON Lines on stdout, one record per line in commit order:
{"seq":…,"op":"insert|update|merge|upsert|upsertMerge|delete|expire|tableDeleted|feedOff",
"at":…,"PartitionKey":…,"RowKey":…,"entity":{…}}. Without --follow it stops at the feed's
current end; either way it prints the continuation to read on from on stderr when it stops
("continuation: …"), and --state keeps it in a file. Ctrl-C stops after the page being
printed. Exit status: 0 done (or the table deleted), 1 refused, unreachable or a
continuation past the feed's retention, 2 a command-line mistake.

Flags of cerulean changes:
`)
	fs := changesFlags(&changesOptions{})
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func runChanges(args []string) error {
	o := changesOptions{conn: tableOptions{given: map[string]bool{}}}
	fs := changesFlags(&o)
	pos, err := parseTableArgs(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	switch {
	case len(pos) == 0:
		return usageErrorf("missing the TABLE")
	case len(pos) > 1:
		return usageErrorf("unexpected arguments: %s", strings.Join(pos[1:], " "))
	case o.wait < time.Second || o.wait > 60*time.Second:
		return usageErrorf("--wait %v: want 1s to 60s", o.wait)
	}
	c, err := o.conn.restClient()
	if err != nil {
		return usageError{err}
	}
	from := o.from
	if o.state != "" {
		b, err := os.ReadFile(o.state)
		switch {
		case err == nil && strings.TrimSpace(string(b)) != "":
			from = strings.TrimSpace(string(b))
		case err != nil && !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("--state: %w", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := client.ChangesOptions{From: from}
	if o.startPK != "" {
		opts.StartPK = &o.startPK
	}
	if o.endPK != "" {
		opts.EndPK = &o.endPK
	}
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	cont := from
	save := func(p *client.ChangesPage) error {
		cont = p.Continuation
		if err := out.Flush(); err != nil {
			return err
		}
		if o.state == "" {
			return nil
		}
		return writeFileAtomic(o.state, []byte(cont+"\n"))
	}
	emit := func(ch client.Change) error {
		out.Write(ch.Raw)
		return out.WriteByte('\n')
	}
	if o.follow {
		opts.Wait = o.wait
		err = c.FollowChanges(ctx, pos[0], opts, emit, save)
	} else {
		err = readToEnd(ctx, c, pos[0], opts, emit, save)
	}
	_ = out.Flush()
	fmt.Fprintf(os.Stderr, "continuation: %s\n", cont)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil // interrupted: what was read is printed and saved
	}
	if err != nil {
		return fmt.Errorf("changes %s: %w", pos[0], err)
	}
	return nil
}

// readToEnd reads the feed from opts.From to its current end.
func readToEnd(ctx context.Context, c *client.Client, table string, opts client.ChangesOptions, fn func(client.Change) error, after func(*client.ChangesPage) error) error {
	for {
		p, err := c.ReadChanges(ctx, table, opts)
		if err != nil {
			return err
		}
		for _, ch := range p.Changes {
			if err := fn(ch); err != nil {
				return err
			}
		}
		if err := after(p); err != nil {
			return err
		}
		if p.Ended || len(p.Changes) == 0 { // an empty page is the feed's end (client.ReadChanges)
			return nil
		}
		opts.From = p.Continuation
	}
}

// writeFileAtomic replaces path with b: written beside it and renamed over it, synced, so
// a crash leaves the old content or the new.
func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
