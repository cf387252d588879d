package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/ceruleandb/cerulean/internal/azurite"
	"github.com/ceruleandb/cerulean/internal/transfer"
	"github.com/ceruleandb/cerulean/internal/transfer/record"
)

// `cerulean import` writes a JSON Lines or CSV file, or Azurite's table database, into any
// endpoint (packages transfer and azurite).

type importOptions struct {
	to, table, format, in, azurite, azuriteAccount string
	skipBad                                        bool
	run                                            runFlags
}

func importFlags(o *importOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.to, "to", "", "the target: a connection string or a SAS URL (required)")
	fs.StringVar(&o.in, "in", "-", "the input file; - is stdin")
	fs.StringVar(&o.format, "format", "", "jsonl or csv; default from --in's extension, else jsonl")
	fs.StringVar(&o.table, "table", "", "the target table: of every record (CSV, JSON Lines of one table), or, with a multi-table file, of them all")
	fs.BoolVar(&o.skipBad, "skip-bad", false, "report a bad record (with its line) and go on, instead of stopping")
	fs.StringVar(&o.azurite, "azurite", "", "import Azurite's table database (__azurite_db_table__.json in its --location) instead of --in")
	fs.StringVar(&o.azuriteAccount, "azurite-account", "devstoreaccount1", "with --azurite: the Azurite account whose tables are imported")
	o.run.register(fs, true)
	return fs
}

func importUsage(w io.Writer) {
	fmt.Fprint(w, `Usage of cerulean import:
  cerulean import --to TARGET [--in FILE] [--table T] [--format jsonl|csv] [--mode insert|replace|merge] [--skip-bad]
  cerulean import --to TARGET --azurite DIR/__azurite_db_table__.json [--azurite-account A]

Writes the entities of a file (JSON Lines as export writes them, or Storage Explorer CSV) into
any endpoint in 100-entity batches per partition, several partitions in parallel, retrying
500/503/timeouts with exponential backoff and jitter. Tables are created as needed. A bad
record stops the import with its line number, unless --skip-bad. Ctrl-C finishes the batches
in flight, writes the checkpoint and prints the command that resumes. Exit status: 0
imported, 1 failed, interrupted or records skipped, 2 a command-line mistake.

Flags of cerulean import:
`)
	fs := importFlags(&importOptions{})
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func runImport(args []string) error {
	var o importOptions
	fs := importFlags(&o)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := o.run.check(); err != nil {
		return err
	}
	dst, err := openEndpoint("to", o.to)
	if err != nil {
		return err
	}
	table := o.table
	if table == "" {
		table = dst.Table
	}
	var r record.Reader
	var source string
	var total int64
	if o.azurite != "" {
		if o.in != "-" {
			return usageErrorf("--azurite and --in exclude each other")
		}
		db, err := azurite.Open(o.azurite)
		if err != nil {
			return err
		}
		if r, err = db.Reader(o.azuriteAccount); err != nil {
			return err
		}
		source = "azurite:" + o.azurite + ":" + o.azuriteAccount
	} else {
		format, err := transfer.FormatOf(o.format, o.in)
		if err != nil {
			return usageErrorf("--format: %v", err)
		}
		rd, c, err := transfer.OpenInput(o.in, format)
		if err != nil {
			return err
		}
		defer c.Close()
		r, source = rd, format+":"+o.in
		if st, err := os.Stat(o.in); err == nil && st.Mode().IsRegular() && format == transfer.JSONL {
			total, _ = transfer.CountLines(o.in) // a pipe is read once, by the import
		}
	}
	job := fmt.Sprintf("import %s → %s/%s table=%s mode=%s settings=%t", source, dst.Endpoint, dst.Account, table, o.run.mode, o.run.settings)
	if o.run.checkpoint == "" {
		beside := o.in
		if o.azurite != "" {
			beside = ""
		}
		o.run.checkpoint = transfer.DefaultCheckpoint("import", job, beside)
	}
	ctx, stop, release := transfer.Interrupts(context.Background())
	defer release()
	rep := o.run.reporter("imported")
	opts := o.run.options(stop, rep)
	opts.SkipBad = o.skipBad
	if t, ok := r.(interface{ Total() int64 }); ok {
		total = t.Total()
	}
	rep.SetTotal(total)
	err = transfer.Import(ctx, r, dst.Client, transfer.ImportOptions{Options: opts, Table: table, Force: o.table != "", Job: job})
	return finish(rep, err, o.run.checkpoint)
}
