package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
)

func versionUsage(w io.Writer) {
	fmt.Fprint(w, `Usage of cerulean version:
  cerulean version   (also cerulean --version)

Prints the module path and version ("(devel)" for a build from a checkout), the VCS revision
the binary was built from with its commit time and whether the tree had uncommitted changes,
and the Go toolchain. It takes no flags.
`)
}

func runVersion(args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	fmt.Fprint(os.Stdout, versionText())
	return nil
}

// versionText describes the build from its embedded build information: the module path and
// version ("(devel)" for a build from a checkout), the VCS revision with its commit time and
// whether the tree had uncommitted changes, and the Go toolchain.
func versionText() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "cerulean: no build information\n"
	}
	return formatVersion(bi)
}

func formatVersion(bi *debug.BuildInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cerulean %s %s\n", bi.Main.Path, bi.Main.Version)
	var rev, at, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	switch {
	case rev == "":
		b.WriteString("revision unknown (built without VCS information)\n")
	default:
		fmt.Fprintf(&b, "revision %s", rev)
		if at != "" {
			fmt.Fprintf(&b, " (%s)", at)
		}
		if modified == "true" {
			b.WriteString(" with uncommitted changes")
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "%s %s/%s\n", bi.GoVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}
