package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/progress"
)

// `cerulean table index add|drop|list TABLE …` declares and drops an elastic table's
// secondary indexes (docs/indexes.md) through the settings endpoint, as any client can:
// read the settings, change the declarations, write them back. Settings are replaced
// whole, so the write carries back everything read — the other settings and the other
// indexes — and changes only the one index named.

// indexPollInterval is how often `add --wait` reads the index's state, and
// indexLinesEvery the least time between its progress lines when stderr is no terminal.
const (
	indexPollInterval = 250 * time.Millisecond
	indexLinesEvery   = 5 * time.Second
)

// runTableIndex runs `cerulean table index ARGS` (args after "index").
func runTableIndex(args []string) error {
	if len(args) == 0 {
		return usageErrorf("index: missing command: add, drop or list")
	}
	sub, args := args[0], args[1:]
	var wantArgs int
	switch sub {
	case "-h", "-help", "--help", "help":
		return flag.ErrHelp
	case "add":
		wantArgs = 3
	case "drop":
		wantArgs = 2
	case "list":
		wantArgs = 1
	default:
		return usageErrorf("index: unknown command %q: want add, drop or list", sub)
	}
	cmd := "index " + sub
	o := &tableOptions{given: map[string]bool{}}
	fs := tableFlags(cmd, o)
	pos, err := parseTableArgs(fs, args)
	if err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return usageError{err}
	}
	// The positional arguments in order, as a missing one is named.
	missing := []string{"the table NAME", "the INDEX name", "the index's PROPERTIES"}
	switch {
	case len(pos) < wantArgs:
		return usageErrorf("%s: missing %s", cmd, missing[len(pos)])
	case len(pos) > wantArgs:
		return usageErrorf("%s: unexpected arguments: %s", cmd, strings.Join(pos[wantArgs:], " "))
	}
	var props []string
	if sub == "add" {
		if props, err = parseIndexProperties(pos[2]); err != nil {
			return usageError{fmt.Errorf("%s: %w", cmd, err)}
		}
	}
	c, err := o.restClient()
	if err != nil {
		return usageError{err}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	reqCtx, cancel := context.WithTimeout(ctx, tableTimeout)
	defer cancel()
	tbl := pos[0]
	out := os.Stdout
	t, err := c.GetTableSettings(reqCtx, tbl)
	if err != nil {
		return fmt.Errorf("table %s %s: %w", cmd, tbl, err)
	}
	switch sub {
	case "list":
		if o.json {
			return writeIndexesJSON(out, t.Indexes)
		}
		writeIndexes(out, t.Indexes)
		return nil
	case "add":
		ix := client.Index{Name: pos[1], Properties: props, Unique: o.unique}
		st, err := addIndex(t, ix)
		if err != nil {
			return fmt.Errorf("table %s %s: %w", cmd, tbl, err)
		}
		if err := c.SetTableSettings(reqCtx, tbl, st); err != nil {
			return fmt.Errorf("table %s %s: %w", cmd, tbl, err)
		}
		if o.wait {
			cancel()
			if err := waitIndex(ctx, c, tbl, ix.Name, os.Stderr); err != nil {
				return fmt.Errorf("table %s %s: %w", cmd, tbl, err)
			}
		}
	case "drop":
		st, err := dropIndex(t, pos[1])
		if err != nil {
			return fmt.Errorf("table %s %s: %w", cmd, tbl, err)
		}
		if err := c.SetTableSettings(reqCtx, tbl, st); err != nil {
			return fmt.Errorf("table %s %s: %w", cmd, tbl, err)
		}
	}
	// add and drop print the indexes in force, with the server's states.
	listCtx, cancelList := context.WithTimeout(ctx, tableTimeout)
	defer cancelList()
	if t, err = c.GetTableSettings(listCtx, tbl); err != nil {
		return fmt.Errorf("table %s %s: %w", cmd, tbl, err)
	}
	writeIndexes(out, t.Indexes)
	return nil
}

// parseIndexProperties reads PROP[,PROP…]: property names separated by commas, blanks
// around them ignored. Their validity (names, count, repeats) is the server's check, so
// that the command and the settings endpoint refuse the same declarations.
func parseIndexProperties(s string) ([]string, error) {
	var props []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, fmt.Errorf("properties %q: want property names separated by commas, none empty", s)
		}
		props = append(props, p)
	}
	return props, nil
}

// addIndex returns t's settings with ix declared after the indexes t has. It refuses,
// before any request, a standard table (indexes are for elastic tables) and a name the
// table's indexes already have (names are unique without regard to case): redefining an
// index is dropping it and adding the new one, which builds it again.
func addIndex(t client.Table, ix client.Index) (client.TableSettings, error) {
	if !t.Elastic {
		return client.TableSettings{}, fmt.Errorf("%s is a standard table: secondary indexes are for elastic tables (make it one with cerulean table set %s --elastic)", t.Name, t.Name)
	}
	for _, d := range t.Indexes {
		if strings.EqualFold(d.Name, ix.Name) {
			return client.TableSettings{}, fmt.Errorf("the table has an index named %s already (%s): drop it first to declare another under that name", d.Name, indexText(d))
		}
	}
	st := t.TableSettings
	st.Indexes = append(slices.Clone(t.Indexes), ix)
	return st, nil
}

// dropIndex returns t's settings without the index named name (without regard to case,
// as index names are compared); a name the table has no index of is an error naming
// those it has.
func dropIndex(t client.Table, name string) (client.TableSettings, error) {
	i := slices.IndexFunc(t.Indexes, func(d client.Index) bool { return strings.EqualFold(d.Name, name) })
	if i < 0 {
		if len(t.Indexes) == 0 {
			return client.TableSettings{}, fmt.Errorf("the table has no index named %s: it has no indexes", name)
		}
		names := make([]string, len(t.Indexes))
		for j, d := range t.Indexes {
			names[j] = d.Name
		}
		return client.TableSettings{}, fmt.Errorf("the table has no index named %s: its indexes are %s", name, strings.Join(names, ", "))
	}
	st := t.TableSettings
	st.Indexes = slices.Delete(slices.Clone(t.Indexes), i, i+1)
	return st, nil
}

// waitIndex polls the table's settings until the index named is ready (nil) or failed
// (an error with the server's reason), showing on w how many rows the build has passed:
// one line redrawn in place on a terminal, a plain line at most every linesEvery
// otherwise (a log, a pipe), and a last line saying how long the wait took. It ends with
// ctx (an interrupt): the build goes on in the server either way.
func waitIndex(ctx context.Context, c *client.Client, tbl, name string, w *os.File) error {
	tty := term.IsTerminal(int(w.Fd()))
	start := time.Now()
	var lastLine time.Time
	var shown int64 = -1
	drawn := false
	show := func(line string) {
		if tty {
			fmt.Fprintf(w, "\r%s\x1b[K", line)
			drawn = true
		} else {
			fmt.Fprintln(w, line)
		}
	}
	end := func(line string) {
		if drawn {
			fmt.Fprint(w, "\r\x1b[K")
		}
		if line != "" {
			fmt.Fprintln(w, line)
		}
	}
	for {
		rctx, cancel := context.WithTimeout(ctx, tableTimeout)
		t, err := c.GetTableSettings(rctx, tbl)
		cancel()
		if err != nil {
			end("")
			return err
		}
		i := slices.IndexFunc(t.Indexes, func(d client.Index) bool { return strings.EqualFold(d.Name, name) })
		if i < 0 {
			end("")
			return fmt.Errorf("the index %s was dropped while it was being built", name)
		}
		d := t.Indexes[i]
		name = d.Name // as declared, for messages
		switch d.State {
		case "ready":
			end(fmt.Sprintf("%s: ready after %s", d.Name, time.Since(start).Round(100*time.Millisecond)))
			return nil
		case "failed":
			end("")
			return fmt.Errorf("the index %s failed: %s", d.Name, d.Failure)
		}
		if d.Progress != shown && (tty || time.Since(lastLine) >= indexLinesEvery) {
			show(fmt.Sprintf("%s: building, %s rows passed, elapsed %s", d.Name, progress.Count(d.Progress), progress.Clock(time.Since(start))))
			shown, lastLine = d.Progress, time.Now()
		}
		select {
		case <-ctx.Done():
			end("")
			return errors.New("interrupted; the index goes on building in the server (see cerulean table index list)")
		case <-time.After(indexPollInterval):
		}
	}
}

// indexText describes an index's definition: its properties, and unique if it is.
func indexText(d client.Index) string {
	s := strings.Join(d.Properties, ", ")
	if d.Unique {
		s += "; unique"
	}
	return s
}

// progressText is an index's PROGRESS column: rows passed while building, "-" otherwise.
func progressText(d client.Index) string {
	if d.State == "building" {
		return strconv.FormatInt(d.Progress, 10) + " rows"
	}
	return "-"
}

// writeIndexes prints indexes as a table (NAME, PROPERTIES, UNIQUE, STATE, PROGRESS),
// then a line for each failed one saying why it failed.
func writeIndexes(w io.Writer, ixs []client.Index) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPROPERTIES\tUNIQUE\tSTATE\tPROGRESS")
	for _, d := range ixs {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\n", d.Name, strings.Join(d.Properties, ","), d.Unique, d.State, progressText(d))
	}
	tw.Flush()
	for _, d := range ixs {
		if d.State == "failed" {
			fmt.Fprintf(w, "%s failed: %s\n", d.Name, d.Failure)
		}
	}
}

// writeIndexesJSON prints indexes as the settings endpoint writes them: a JSON array,
// [] when there are none.
func writeIndexesJSON(w io.Writer, ixs []client.Index) error {
	if ixs == nil {
		ixs = []client.Index{}
	}
	b, err := json.Marshal(ixs)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
