package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ceruleandb/cerulean/internal/backup"
)

// `cerulean backup` writes a backup of the pebble engine's store (package backup): from a
// running server through its diagnostics address, or from a data directory no server holds.

type backupOptions struct {
	to, debugAddr, data, engine string
}

func backupFlags(o *backupOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("backup", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.to, "to", "", "the backup directory to write: new or empty (required)")
	fs.StringVar(&o.debugAddr, "debug-addr", env("CERULEAN_DEBUG_ADDR", ""), "the running server's diagnostics address (its --debug-addr): the server takes the backup while it serves and streams it here (CERULEAN_DEBUG_ADDR)")
	fs.StringVar(&o.data, "data", env("CERULEAN_DATA", "./data"), "without --debug-addr: the data directory to back up, which no server may be running on (CERULEAN_DATA)")
	fs.StringVar(&o.engine, "engine", env("CERULEAN_ENGINE", "pebble"), "the server's storage engine; only pebble is backed up by cerulean (CERULEAN_ENGINE)")
	return fs
}

func backupUsage(w io.Writer) {
	fmt.Fprint(w, `Usage of cerulean backup:
  cerulean backup --to DIR --debug-addr ADDR   back up a running server (it keeps serving)
  cerulean backup --to DIR [--data DIR]        back up a data directory no server is running on

The backup holds every write acknowledged before it began and no partial batch. With
--debug-addr the server takes a checkpoint of its store and streams it to this command,
which writes it into DIR on this machine (the server may be remote). DIR gets the store
(DIR/pebble) and, last, a manifest (DIR/cerulean-backup.json) that cerulean restore checks.
For --engine postgres, back up the database itself (docs/operations.md, "Backup and restore").
Exit status: 0 done, 1 failed, 2 a command-line mistake.

Flags of cerulean backup:
`)
	fs := backupFlags(&backupOptions{})
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func runBackup(args []string) error {
	var o backupOptions
	fs := backupFlags(&o)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case o.to == "":
		return usageErrorf("--to is required")
	case set["debug-addr"] && set["data"]:
		return usageErrorf("give --debug-addr (a running server) or --data (a stopped one), not both")
	case o.engine == "postgres":
		return fmt.Errorf("cerulean backup does not back up --engine postgres: %s", backup.PostgresAdvice)
	case o.engine != "pebble":
		return usageErrorf("--engine %q: want pebble or postgres", o.engine)
	}
	var m backup.Manifest
	var err error
	if o.debugAddr != "" && !set["data"] {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		m, err = backup.Fetch(ctx, o.debugAddr, o.to)
	} else {
		m, err = backup.Local(o.data, o.to)
	}
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	fmt.Printf("backup written to %s: %d tables, position %d, taken %s\n", o.to, m.Tables, m.Position, m.Created.Format("2006-01-02T15:04:05.000Z07:00"))
	return nil
}

// parseFlags parses a subcommand's flags, which take no arguments besides: a mistake is
// a usageError (exit status 2), -h is flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return nil
}
