// Command cerulean is a self-hosted table service that speaks the Azure Table Storage REST
// API. `cerulean` (or `cerulean serve`) runs the server; `cerulean bench` load-tests any
// Azure Table endpoint through the official Go SDK; `cerulean table` creates, shows,
// changes and lists tables' settings on a running server; `cerulean backup` and
// `cerulean restore` back up and restore the pebble engine's store; `cerulean version`
// prints the build; `cerulean export`, `import` and `copy` move table data between
// endpoints and files; `cerulean token` prints a bearer token of the development issuer
// (--dev-issuer).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// command is one subcommand.
type command struct {
	name string
	// flags writes the command's own part of the help: its synopsis and flags.
	flags func(w io.Writer)
	run   func(args []string) error
}

var commands = []command{
	{"serve", serveUsage, runServe},
	{"bench", benchUsage, runBench},
	{"table", tableUsage, runTable},
	{"backup", backupUsage, runBackup},
	{"restore", restoreUsage, runRestore},
	{"export", exportUsage, runExport},
	{"import", importUsage, runImport},
	{"copy", copyUsage, runCopy},
	{"changes", changesUsage, runChanges},
	{"token", tokenUsage, runToken},
	{"version", versionUsage, runVersion},
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// usageError is a command-line mistake: reported with the usage, exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line and returns the exit status: 0, 1 for a failure, 2 for a
// command-line mistake. Help asked for (-h, --help, help) goes to stdout with status 0.
func run(args []string, stdout, stderr io.Writer) int {
	name := "serve"
	if len(args) > 0 {
		switch a := args[0]; {
		case a == "--version" || a == "-version":
			name, args = "version", args[1:]
		case a == "-h" || a == "-help" || a == "--help":
			// No command named: the overview, as `cerulean help` prints it.
			name, args = "help", nil
		case a != "" && a[0] != '-':
			name, args = a, args[1:]
		}
	}
	if name == "help" {
		if len(args) == 0 {
			commandList(stdout)
			return 0
		}
		c := lookup(args[0])
		if c == nil || len(args) > 1 {
			if c == nil {
				fmt.Fprintf(stderr, "cerulean help: unknown command %q\n\n", args[0])
			} else {
				fmt.Fprintf(stderr, "cerulean help: unexpected arguments: %s\n\n", strings.Join(args[1:], " "))
			}
			commandList(stderr)
			return 2
		}
		usage(stdout, c)
		return 0
	}
	c := lookup(name)
	if c == nil {
		fmt.Fprintf(stderr, "cerulean: unknown command %q\n\n", name)
		commandList(stderr)
		return 2
	}
	err := c.run(args)
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		usage(stdout, c)
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "cerulean %s: %v\n\n", c.name, err)
		usage(stderr, c)
		return 2
	}
	fmt.Fprintln(stderr, "cerulean:", err)
	return 1
}

// commandList writes the overview: every command in one line each. It is what `cerulean
// help`, `cerulean -h` and an unknown command print; a command's own help is usage.
func commandList(w io.Writer) {
	fmt.Fprint(w, `Usage:
  cerulean [serve] [flags]   serve the Azure Table API (default 127.0.0.1:10002, data in ./data)
  cerulean bench [flags]     load-test an Azure Table endpoint (the Go SDK, or --client raw)
  cerulean table COMMAND     create, show, change (elastic, time-to-live, indexes) and list tables of a running server
  cerulean backup [flags]    back up the pebble store of a running server or a stopped data directory
  cerulean restore [flags]   check a backup and install it as a data directory
  cerulean export [flags]    write tables of any endpoint to JSON Lines or CSV
  cerulean import [flags]    write a JSON Lines or CSV file, or Azurite's database, into any endpoint
  cerulean copy [flags]      copy tables from one endpoint to another
  cerulean token --role ROLE print a bearer token of the development issuer (a server started with --dev-issuer)
  cerulean version           print the module version and VCS revision (also --version)
  cerulean help [command]    print this list, or a command's usage and flags

cerulean help COMMAND (or cerulean COMMAND -h) prints a command's usage and flags;
cerulean help serve those of the server, which cerulean runs when no command is named.
`)
}

// usage writes a command's own help, its synopsis and flags first, and a pointer to the
// command list last.
func usage(w io.Writer, c *command) {
	c.flags(w)
	fmt.Fprint(w, "\nAll commands: cerulean help\n")
}
