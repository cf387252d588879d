package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/progress"
	"github.com/ceruleandb/cerulean/internal/transfer"
)

// `cerulean copy` copies tables from one endpoint to another (package transfer). The
// run flags shared by export, import and copy (runFlags) live here too.

// runFlags are the flags every data tool takes.
type runFlags struct {
	checkpoint string
	resume     bool
	quiet      bool
	workers    int
	retries    int
	mode       string
	interval   time.Duration
	settings   bool
}

func (r *runFlags) register(fs *flag.FlagSet, writes bool) {
	fs.StringVar(&r.checkpoint, "checkpoint", "", "the checkpoint file (default: beside the file, PATH.checkpoint, or cerulean-<command>-<id>.checkpoint in the current directory); removed when the run finishes")
	fs.BoolVar(&r.resume, "resume", false, "continue an interrupted run from its checkpoint (the same command line plus --resume)")
	fs.BoolVar(&r.quiet, "quiet", false, "print errors only: no progress, no summary")
	fs.DurationVar(&r.interval, "progress-interval", 5*time.Second, "when stderr is not a terminal, the pause between progress lines")
	fs.IntVar(&r.retries, "retries", 8, "most attempts of a call that fails with 500/503/408/429, a timeout or a broken connection (exponential backoff, full jitter)")
	fs.BoolVar(&r.settings, "settings", true, "carry each Cerulean table's elastic settings and its entities' expiry (an expired entity is not written); --settings=false moves the entities alone, under the target's own settings")
	if writes {
		fs.IntVar(&r.workers, "workers", 8, "partitions written in parallel")
		fs.StringVar(&r.mode, "mode", "insert", "how entities are written: insert (fails on an existing entity), replace or merge (upserts: Insert Or Replace, Insert Or Merge)")
	}
}

// check reports a mistake in the run flags (a usage error).
func (r *runFlags) check() error {
	mode := client.WriteMode(r.mode)
	if r.mode != "" && mode != client.Insert && mode != client.Replace && mode != client.Merge {
		return usageErrorf("--mode %q: insert, replace or merge", r.mode)
	}
	if r.workers < 1 && r.mode != "" {
		return usageErrorf("--workers must be at least 1")
	}
	if r.retries < 1 {
		return usageErrorf("--retries must be at least 1")
	}
	return nil
}

func (r *runFlags) options(stop <-chan struct{}, obs transfer.Observer) transfer.Options {
	return transfer.Options{Workers: r.workers, Retry: transfer.Retry{Attempts: r.retries}, Mode: client.WriteMode(r.mode), Checkpoint: r.checkpoint, Resume: r.resume, Stop: stop, Observer: obs, IgnoreSettings: !r.settings}
}

func (r *runFlags) reporter(verb string) *progress.Reporter {
	return progress.ForFile(os.Stderr, r.quiet, verb, r.interval)
}

// finish turns a run's result into the command's: the summary, and on an interrupt the
// command that resumes it.
func finish(rep *progress.Reporter, err error, checkpoint string) error {
	if !errors.Is(err, transfer.ErrInterrupted) {
		rep.Stopped(err) // the summary counts it; main prints it last
	}
	rep.Finish()
	if errors.Is(err, transfer.ErrInterrupted) {
		if checkpoint == "" {
			return errors.New("interrupted (this run cannot resume)")
		}
		fmt.Fprintf(os.Stderr, "interrupted; the checkpoint is %s; to resume, run the same command line with --resume:\n  %s\n%s", checkpoint, resumeCommand(os.Args), secretsNote(os.Args))
		return errors.New("interrupted")
	}
	if err != nil {
		if _, serr := os.Stat(checkpoint); checkpoint != "" && serr == nil && !errors.Is(err, transfer.ErrNoCheckpoint) {
			fmt.Fprintf(os.Stderr, "the checkpoint is %s; once the cause is fixed, to resume, run the same command line with --resume:\n  %s\n%s", checkpoint, resumeCommand(os.Args), secretsNote(os.Args))
		}
		return err
	}
	transfer.RemoveCheckpoint(checkpoint)
	if n := rep.Errors(); n > 0 {
		return fmt.Errorf("%d records skipped", n)
	}
	return nil
}

// resumeCommand is the command line with --resume, quoted for a POSIX shell, with the
// secrets of its endpoints (account keys, SAS signatures) replaced by REDACTED: it is
// printed on stderr, which ends up in terminals' scrollback and CI logs.
func resumeCommand(args []string) string {
	var b strings.Builder
	has := false
	for i, a := range redactArgs(args) {
		if a == "--resume" || a == "-resume" {
			has = true
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(shellQuote(a))
	}
	if !has {
		b.WriteString(" --resume")
	}
	return b.String()
}

// secretsNote says, when the printed command had secrets taken out, to give them again.
func secretsNote(args []string) string {
	for i, a := range redactArgs(args) {
		if a != args[i] {
			return "  (account keys and SAS signatures are shown as REDACTED: give them as in the first run)\n"
		}
	}
	return ""
}

// redactArgs is a command line with the values of --from and --to (as "--from V" or
// "--from=V") redacted (redactEndpoint); other arguments, a --filter included, are kept.
func redactArgs(args []string) []string {
	endpoint := func(flag string) bool {
		n := strings.TrimLeft(flag, "-")
		return strings.HasPrefix(flag, "-") && (n == "from" || n == "to")
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if name, v, ok := strings.Cut(a, "="); ok && endpoint(name) {
			out[i] = name + "=" + redactEndpoint(v)
		} else if i > 0 && endpoint(args[i-1]) {
			out[i] = redactEndpoint(a)
		}
	}
	return out
}

// redactEndpoint is a connection string with its AccountKey and the sig of its
// SharedAccessSignature replaced by REDACTED, or a SAS URL with its sig so.
func redactEndpoint(a string) string {
	if strings.HasPrefix(a, "http://") || strings.HasPrefix(a, "https://") {
		return client.RedactURL(a)
	}
	parts := strings.Split(a, ";")
	for i, p := range parts {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "accountkey":
			parts[i] = k + "=REDACTED"
		case "sharedaccesssignature":
			parts[i] = k + "=" + strings.TrimPrefix(client.RedactURL("?"+v), "?")
		}
	}
	return strings.Join(parts, ";")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@%+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// tableList splits a comma-separated --table value.
func tableList(s string) []string {
	var out []string
	for _, t := range strings.Split(s, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// openEndpoint opens a --from/--to value; its table (a table SAS URL) joins tables.
func openEndpoint(flagName, s string) (*client.Target, error) {
	if s == "" {
		return nil, usageErrorf("--%s is required (a connection string or a SAS URL)", flagName)
	}
	t, err := client.Open(s)
	if err != nil {
		return nil, usageErrorf("--%s: %v", flagName, err)
	}
	return t, nil
}

type copyOptions struct {
	from, to, tables, toTable, filter string
	readers                           int
	follow                            bool
	run                               runFlags
}

func copyFlags(o *copyOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("copy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.from, "from", "", "the source: a connection string or a SAS URL (required)")
	fs.StringVar(&o.to, "to", "", "the target: a connection string or a SAS URL (required)")
	fs.StringVar(&o.tables, "table", "", "the tables to copy, comma-separated (default: every table of the source)")
	fs.StringVar(&o.toTable, "to-table", "", "the target table's name, when copying one table")
	fs.StringVar(&o.filter, "filter", "", "an OData $filter: copy only the entities it matches")
	fs.IntVar(&o.readers, "readers", 4, "PartitionKey ranges of a table read at once (split points found by sampling the keys)")
	fs.BoolVar(&o.follow, "follow", false, "after the copy, keep applying the source tables' changes (their change feeds, which must be on) to the target until interrupted; --resume carries on following")
	o.run.register(fs, true)
	return fs
}

func copyUsage(w io.Writer) {
	fmt.Fprint(w, `Usage of cerulean copy:
  cerulean copy --from SOURCE --to TARGET [--table T1,T2] [--filter F] [--mode insert|replace|merge]

Copies tables between any two table endpoints (Cerulean, Azurite, Azure): each table is read
page by page and written in 100-entity batches per partition, several partitions in parallel,
in constant memory. SOURCE and TARGET are connection strings
("DefaultEndpointsProtocol=http;AccountName=…;AccountKey=…;TableEndpoint=…",
"UseDevelopmentStorage=true") or SAS URLs. Target tables are created as needed. Ctrl-C
finishes the batches in flight, writes the checkpoint and prints the command that resumes.
With --follow the copy then keeps the target in step with the source from the source
tables' change feeds (docs/change-feed.md) until Ctrl-C, which ends it with status 0 and
the command that carries on following.
Exit status: 0 copied (or following stopped by Ctrl-C), 1 failed or interrupted, 2 a
command-line mistake.

Flags of cerulean copy:
`)
	fs := copyFlags(&copyOptions{})
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func runCopy(args []string) error {
	var o copyOptions
	fs := copyFlags(&o)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := o.run.check(); err != nil {
		return err
	}
	if o.readers < 1 {
		return usageErrorf("--readers must be at least 1")
	}
	src, err := openEndpoint("from", o.from)
	if err != nil {
		return err
	}
	dst, err := openEndpoint("to", o.to)
	if err != nil {
		return err
	}
	tables := tableList(o.tables)
	if src.Table != "" && len(tables) == 0 {
		tables = []string{src.Table}
	}
	rename := map[string]string{}
	toTable := o.toTable
	if toTable == "" {
		toTable = dst.Table
	}
	if toTable != "" {
		if len(tables) != 1 {
			return usageErrorf("--to-table (or a table SAS URL as --to) needs exactly one source table")
		}
		rename[tables[0]] = toTable
	}
	job := fmt.Sprintf("copy %s (%s) → %s (%s) tables=%s to=%s filter=%s mode=%s settings=%t", src.Endpoint, src.Account, dst.Endpoint, dst.Account, strings.Join(tables, ","), toTable, o.filter, o.run.mode, o.run.settings)
	if o.follow {
		if o.filter != "" {
			return usageErrorf("--follow copies whole tables: it cannot take --filter")
		}
		job += " follow"
	}
	if o.run.checkpoint == "" {
		o.run.checkpoint = transfer.DefaultCheckpoint("copy", job, "")
	}
	ctx, stop, release := transfer.Interrupts(context.Background())
	defer release()
	rep := o.run.reporter("copied")
	opts := o.run.options(stop, rep)
	err = transfer.Copy(ctx, src.Client, dst.Client, transfer.CopyOptions{Options: opts, Tables: tables, Rename: rename, Filter: o.filter, Readers: o.readers, Job: job, Follow: o.follow})
	if errors.Is(err, transfer.ErrFollowStopped) {
		// Following ends by an interrupt: the target is in step up to the checkpoint.
		rep.Finish()
		fmt.Fprintf(os.Stderr, "stopped following; the checkpoint is %s; to carry on, run the same command line with --resume:\n  %s\n%s", o.run.checkpoint, resumeCommand(os.Args), secretsNote(os.Args))
		return nil
	}
	return finish(rep, err, o.run.checkpoint)
}
