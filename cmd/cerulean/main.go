// Command cerulean is a self-hosted table service that speaks the Azure Table Storage REST
// API. `cerulean` (or `cerulean serve`) runs the server; `cerulean bench` load-tests any
// Azure Table endpoint through the official Go SDK.
package main

import (
	"fmt"
	"os"
)

func main() {
	args := os.Args[1:]
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "serve":
		err = runServe(args)
	case "bench":
		err = runBench(args)
	case "help":
		usage()
		return
	default:
		fmt.Fprintf(os.Stderr, "cerulean: unknown command %q\n", cmd)
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cerulean:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  cerulean [serve] [flags]   serve the Azure Table API (default: 127.0.0.1:10002, ./data)
  cerulean bench [flags]     load-test an Azure Table endpoint through the Go SDK
  cerulean <command> -h      flags of a command
`)
}
