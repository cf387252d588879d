package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/ceruleandb/cerulean/internal/transfer"
)

// `cerulean export` writes tables of any endpoint to a JSON Lines or CSV file (package
// transfer).

type exportOptions struct {
	from, tables, filter, sel, format, out string
	timestamp                              bool
	run                                    runFlags
}

func exportFlags(o *exportOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.from, "from", "", "the source: a connection string or a SAS URL (required)")
	fs.StringVar(&o.tables, "table", "", "the tables to export, comma-separated (default: every table; several tables need --format jsonl)")
	fs.StringVar(&o.filter, "filter", "", "an OData $filter: export only the entities it matches")
	fs.StringVar(&o.sel, "select", "", "an OData $select: export only these properties")
	fs.StringVar(&o.format, "format", "", "jsonl (Cerulean's exact interchange format, docs/jsonl.md) or csv (Storage Explorer's shape); default from --out's extension, else jsonl")
	fs.StringVar(&o.out, "out", "-", "the output file; - is stdout")
	fs.BoolVar(&o.timestamp, "timestamp", true, "write each entity's Timestamp (informational: an import never sets it); --timestamp=false gives files that compare equal across servers")
	o.run.register(fs, false)
	return fs
}

func exportUsage(w io.Writer) {
	fmt.Fprint(w, `Usage of cerulean export:
  cerulean export --from SOURCE [--table T1,T2] [--filter F] [--select P1,P2] [--format jsonl|csv] [--out FILE]

Writes tables to a file or stdout. JSON Lines keep every EDM type exactly (Int64 beyond 2^53,
NaN, -0, DateTime at 100 ns, Guid, Binary); CSV has Storage Explorer's shape (a <name>@type
column per property). An export of JSON Lines to a file resumes (--resume) after Ctrl-C.
Progress goes to stderr. Exit status: 0 exported, 1 failed or interrupted, 2 a command-line
mistake.

Flags of cerulean export:
`)
	fs := exportFlags(&exportOptions{})
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func runExport(args []string) error {
	var o exportOptions
	fs := exportFlags(&o)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := o.run.check(); err != nil {
		return err
	}
	src, err := openEndpoint("from", o.from)
	if err != nil {
		return err
	}
	format, err := transfer.FormatOf(o.format, o.out)
	if err != nil {
		return usageErrorf("--format: %v", err)
	}
	tables := tableList(o.tables)
	if src.Table != "" && len(tables) == 0 {
		tables = []string{src.Table}
	}
	out, err := transfer.CreateOutput(o.out, format, len(tables) != 1, o.timestamp, o.run.resume)
	if err != nil {
		return err
	}
	job := fmt.Sprintf("export %s/%s tables=%s filter=%s select=%s format=%s timestamp=%t settings=%t out=%s", src.Endpoint, src.Account, strings.Join(tables, ","), o.filter, o.sel, format, o.timestamp, o.run.settings, o.out)
	checkpoint := ""
	if out.Resumable() {
		checkpoint = o.run.checkpoint
		if checkpoint == "" {
			checkpoint = transfer.DefaultCheckpoint("export", job, o.out)
		}
	} else if o.run.resume {
		out.Abandon()
		return usageErrorf("--resume: only a JSON Lines export to a regular file resumes")
	}
	o.run.checkpoint = checkpoint
	ctx, stop, release := transfer.Interrupts(context.Background())
	defer release()
	rep := o.run.reporter("exported")
	opts := o.run.options(stop, rep)
	err = transfer.Export(ctx, src.Client, out, transfer.ExportOptions{Options: opts, Tables: tables, Filter: o.filter, Select: o.sel, Job: job, Resumed: out.Truncate})
	if err != nil {
		out.Abandon()
	}
	return finish(rep, err, checkpoint)
}
