package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/ceruleandb/cerulean/internal/backup"
)

// `cerulean restore` checks a backup written by `cerulean backup` and installs it as a
// data directory (package backup).

type restoreOptions struct {
	from, data string
	force      bool
}

func restoreFlags(o *restoreOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.from, "from", "", "the backup directory (required)")
	fs.StringVar(&o.data, "data", "", "the data directory to install it as (required); it must be absent or empty unless --force")
	fs.BoolVar(&o.force, "force", false, "replace a data directory that is not empty (never one a server is running on)")
	return fs
}

func restoreUsage(w io.Writer) {
	fmt.Fprint(w, `Usage of cerulean restore:
  cerulean restore --from BACKUP --data DIR [--force]

Checks the backup (its manifest, the format, that the store opens and holds the tables the
manifest records), copies it beside DIR and renames it into place; then start a server with
--data DIR. It refuses a DIR a server is running on, and one that is not empty without
--force. Exit status: 0 restored, 1 refused or failed (DIR is left as it was), 2 a
command-line mistake.

Flags of cerulean restore:
`)
	fs := restoreFlags(&restoreOptions{})
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func runRestore(args []string) error {
	var o restoreOptions
	fs := restoreFlags(&o)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if o.from == "" || o.data == "" {
		return usageErrorf("--from and --data are required")
	}
	m, err := backup.Restore(o.from, o.data, backup.RestoreOptions{Force: o.force})
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	fmt.Printf("restored %s into %s: %d tables, position %d, taken %s by cerulean %s\n", o.from, o.data, m.Tables, m.Position,
		m.Created.Format("2006-01-02T15:04:05.000Z07:00"), m.Cerulean)
	return nil
}
