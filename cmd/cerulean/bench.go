package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/ceruleandb/cerulean/internal/bench"
)

func benchUsage(w io.Writer) { bench.Usage(w) }

func runBench(args []string) error {
	opts, err := bench.ParseFlagsTo(args, io.Discard)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if opts.Progress == nil && !opts.JSON {
		opts.Progress = os.Stderr
	}
	// CERULEAN_BENCH_CPUPROFILE names a file for a CPU profile of the load generator itself,
	// to tell client-side cost from server-side cost on a shared machine.
	if path := os.Getenv("CERULEAN_BENCH_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err = bench.Run(ctx, opts, os.Stdout)
	return err
}
