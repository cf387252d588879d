package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ceruleandb/cerulean/auth"
	"github.com/ceruleandb/cerulean/server"
	"github.com/ceruleandb/cerulean/storage"
	"github.com/ceruleandb/cerulean/storage/pebble"
	"github.com/ceruleandb/cerulean/storage/postgres"
)

// serveOptions are the flags of `cerulean serve`, each with an environment variable.
type serveOptions struct {
	addr     string
	data     string
	accounts string
	logLevel string
	debug    string

	engine           string
	diskReserve      int64
	postgresURL      string
	postgresPool     int
	postgresStmtTime time.Duration
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
	fs.StringVar(&o.debug, "debug-addr", env("CERULEAN_DEBUG_ADDR", ""), "if set, serve /healthz and Go's pprof profiles (/debug/pprof/) on this address (CERULEAN_DEBUG_ADDR)")
	fs.StringVar(&o.engine, "engine", env("CERULEAN_ENGINE", "pebble"), "storage engine: pebble (embedded, in --data) or postgres (--postgres-url) (CERULEAN_ENGINE)")
	reserve := fs.String("disk-reserve", env("CERULEAN_DISK_RESERVE", "128MiB"), "free space kept on the volume of --data for the pebble engine: writes are refused (503) below it and accepted again once space returns; 0 turns the guard off (CERULEAN_DISK_RESERVE)")
	fs.StringVar(&o.postgresURL, "postgres-url", env("CERULEAN_POSTGRES_URL", ""), "PostgreSQL, YugabyteDB or CockroachDB connection URL for --engine postgres (CERULEAN_POSTGRES_URL)")
	pool, err := envInt("CERULEAN_POSTGRES_POOL_SIZE", postgres.DefaultPoolSize)
	if err != nil {
		return o, err
	}
	fs.IntVar(&o.postgresPool, "postgres-pool-size", pool, "most database connections for --engine postgres (CERULEAN_POSTGRES_POOL_SIZE)")
	stmt, err := envDuration("CERULEAN_POSTGRES_STATEMENT_TIMEOUT", postgres.DefaultStatementTimeout)
	if err != nil {
		return o, err
	}
	fs.DurationVar(&o.postgresStmtTime, "postgres-statement-timeout", stmt, "server-side timeout of each statement for --engine postgres; 0 disables it (CERULEAN_POSTGRES_STATEMENT_TIMEOUT)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if o.diskReserve, err = parseSize(*reserve); err != nil {
		return o, fmt.Errorf("--disk-reserve: %w", err)
	}
	switch o.engine {
	case "pebble":
	case "postgres":
		if o.postgresURL == "" {
			return o, fmt.Errorf("--engine postgres needs --postgres-url (or CERULEAN_POSTGRES_URL)")
		}
		if o.postgresPool <= 0 {
			return o, fmt.Errorf("--postgres-pool-size must be positive")
		}
		if o.postgresStmtTime < 0 {
			return o, fmt.Errorf("--postgres-statement-timeout must not be negative")
		}
	default:
		return o, fmt.Errorf("--engine %q: want pebble or postgres", o.engine)
	}
	return o, nil
}

func envInt(name string, def int) (int, error) {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not a number", name, v)
	}
	return n, nil
}

func envDuration(name string, def time.Duration) (time.Duration, error) {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not a duration", name, v)
	}
	return d, nil
}

// openEngine opens the engine the options choose and describes where its data lives
// (for the start-up log line; never the database password).
func openEngine(o serveOptions, log *slog.Logger) (storage.Engine, string, error) {
	if o.engine == "postgres" {
		timeout := o.postgresStmtTime
		if timeout == 0 {
			timeout = -1 // Options: negative disables
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		eng, err := postgres.Open(ctx, o.postgresURL, postgres.Options{
			PoolSize:         o.postgresPool,
			StatementTimeout: timeout,
			Logger:           log.With("component", "postgres"),
		})
		if err != nil {
			return nil, "", err
		}
		return eng, eng.Dialect(), nil
	}
	if err := os.MkdirAll(o.data, 0o755); err != nil {
		return nil, "", fmt.Errorf("data directory: %w", err)
	}
	plog := log.With("component", "pebble")
	reserve := o.diskReserve
	if reserve == 0 {
		reserve = -1 // Options: negative turns the guard off
	}
	eng, err := pebble.Open(o.data, pebble.Options{Logger: pebbleLogger{plog}, Log: plog, DiskReserve: reserve})
	if errors.Is(err, storage.ErrNoSpace) {
		return nil, "", fmt.Errorf("%w, or lower --disk-reserve (now %s)", err, formatSize(reserve))
	}
	if err != nil {
		return nil, "", err
	}
	return eng, o.data, nil
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
	start := time.Now()
	eng, where, err := openEngine(o, log)
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
	log.Info("cerulean serving", "addr", ln.Addr().String(), "engine", o.engine, "data", where, "startup", time.Since(start).Round(time.Millisecond))
	printConnectionStrings(os.Stdout, ln.Addr().String(), accounts)

	if o.debug != "" {
		// /healthz answers 200 while the storage engine answers and 503 while it is
		// unreachable, for load balancers in front of several Cerulean processes.
		http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if ok, since := srv.Health(); !ok {
				http.Error(w, "storage unavailable since "+since.UTC().Format(time.RFC3339), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
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
