package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/ceruleandb/cerulean/bench"
)

func runBench(args []string) error {
	opts, err := bench.ParseFlags(args)
	if err != nil {
		return err
	}
	if opts.Progress == nil && !opts.JSON {
		opts.Progress = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err = bench.Run(ctx, opts, os.Stdout)
	return err
}
