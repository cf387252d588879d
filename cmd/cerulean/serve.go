package main

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ceruleandb/cerulean/auth"
	"github.com/ceruleandb/cerulean/server"
	"github.com/ceruleandb/cerulean/storage/pebble"
)

// serveOptions are the flags of `cerulean serve`, each with an environment variable.
type serveOptions struct {
	addr     string
	data     string
	accounts string
	logLevel string
	debug    string
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func parseServe(args []string) (serveOptions, error) {
	var o serveOptions
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&o.addr, "addr", env("CERULEAN_ADDR", "127.0.0.1:10002"), "listen address (CERULEAN_ADDR)")
	fs.StringVar(&o.data, "data", env("CERULEAN_DATA", "./data"), "data directory (CERULEAN_DATA)")
	fs.StringVar(&o.accounts, "accounts", env("CERULEAN_ACCOUNTS", ""), "accounts as name:base64key pairs separated by ';' (CERULEAN_ACCOUNTS); default the development account devstoreaccount1")
	fs.StringVar(&o.logLevel, "log-level", env("CERULEAN_LOG_LEVEL", "info"), "debug, info, warn or error (CERULEAN_LOG_LEVEL)")
	fs.StringVar(&o.debug, "debug-addr", env("CERULEAN_DEBUG_ADDR", ""), "if set, serve Go's pprof profiles on this address (CERULEAN_DEBUG_ADDR)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return o, nil
}

func runServe(args []string) error {
	o, err := parseServe(args)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("log level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	accounts := []auth.Account{auth.DevAccount()}
	if o.accounts != "" {
		if accounts, err = auth.ParseAccounts(o.accounts); err != nil {
			return fmt.Errorf("accounts: %w", err)
		}
		if len(accounts) == 0 {
			return fmt.Errorf("accounts: %q names no account", o.accounts)
		}
	}
	if err := os.MkdirAll(o.data, 0o755); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	start := time.Now()
	eng, err := pebble.Open(o.data, pebble.Options{Logger: pebbleLogger{log.With("component", "pebble")}})
	if err != nil {
		return fmt.Errorf("open engine: %w", err)
	}
	srv, err := server.New(server.Options{Engine: eng, Accounts: accounts, Logger: log})
	if err != nil {
		eng.Close()
		return err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		eng.Close()
		return fmt.Errorf("listen: %w", err)
	}
	log.Info("cerulean serving", "addr", ln.Addr().String(), "data", o.data, "engine", "pebble", "startup", time.Since(start).Round(time.Millisecond))
	printConnectionStrings(os.Stdout, ln.Addr().String(), accounts)

	if o.debug != "" {
		go func() {
			// net/http/pprof registers on the default mux, which nothing else uses.
			if err := http.ListenAndServe(o.debug, nil); err != nil {
				log.Error("debug server", "err", err)
			}
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	serveErr := server.Serve(ctx, hs, ln)
	log.Info("shutting down")
	// In-flight requests have finished (or the shutdown timed out); close the engine so
	// every acknowledged write is on disk and the directory is cleanly released.
	if err := eng.Close(); err != nil {
		return fmt.Errorf("close engine: %w", err)
	}
	return serveErr
}

// printConnectionStrings tells the user how to connect each SDK.
func printConnectionStrings(w *os.File, addr string, accounts []auth.Account) {
	host := addr
	if h, p, err := net.SplitHostPort(addr); err == nil && (h == "" || h == "0.0.0.0" || h == "::") {
		host = net.JoinHostPort("127.0.0.1", p)
	}
	for _, a := range accounts {
		cs := fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;TableEndpoint=http://%s/%s;",
			a.Name, base64.StdEncoding.EncodeToString(a.Keys[0]), host, a.Name)
		fmt.Fprintf(w, "Account %s — connection string for Go (aztables.NewServiceClientFromConnectionString), JavaScript (TableServiceClient.fromConnectionString), Python (TableServiceClient.from_connection_string) and .NET (new TableServiceClient(...)):\n  %s\n", a.Name, cs)
	}
}

// pebbleLogger routes Pebble's background reports into the structured log.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
	os.Exit(1)
}
