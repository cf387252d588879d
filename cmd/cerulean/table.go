package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/table"
)

// `cerulean table` reads and changes tables' settings (elastic, time-to-live) through a
// running server's REST API (package client): the same calls any HTTP client can make.

// tableTimeout bounds one `cerulean table` command.
const tableTimeout = 30 * time.Second

// tableCommands are the subcommands of `cerulean table`: synopsis and description.
var tableCommands = [][2]string{
	{"create NAME [--elastic] [--ttl N|-1] [--ttl-property P] [--change-feed RETENTION]", "create a table; without these flags the server's --elastic-tables and --change-feed-tables rules decide"},
	{"show NAME [--json]", "print a table's settings"},
	{"set NAME [--elastic=true|false] [--ttl N|-1|off] [--ttl-property P] [--change-feed RETENTION|off]", "change a table's settings; those not named are kept"},
	{"list [--settings]", "list the tables, with their settings if asked"},
	{"index add NAME INDEX PROP[,PROP…] [--unique] [--wait]", "declare a secondary index of an elastic table on 1 to 4 properties (docs/indexes.md); --wait shows its build until it is ready"},
	{"index drop NAME INDEX", "drop an index; the table's other settings and indexes are kept"},
	{"index list NAME [--json]", "list a table's indexes: properties, unique, state (building, ready, failed) and build progress"},
}

// tableUsage writes the help of `cerulean table`.
func tableUsage(w io.Writer) {
	fmt.Fprint(w, "Usage of cerulean table (talks to a running server through its REST API):\n")
	for _, c := range tableCommands {
		fmt.Fprintf(w, "  cerulean table %s\n      %s\n", c[0], c[1])
	}
	fmt.Fprint(w, `
An elastic table may have a time-to-live: --ttl N makes entities expire N seconds (1 to
2147483647) after their last write, --ttl -1 turns time-to-live on without a default (only
entities with their own TTL expire), --ttl off turns it off. An entity's own TTL is its
integer property TTLInSeconds (or the name --ttl-property gives): -1 never, N seconds.
A change applies to later writes; entities keep the expiry they were written with, so
--ttl off (or --elastic=false) does not stop an entity written with an expiry from expiring
then: write it again to keep it.
Any table may have a change feed (docs/change-feed.md): --change-feed RETENTION turns it on
and keeps its records that long (seconds, or a duration such as 36h or 7d; at most
2147483647 s); --change-feed off turns it off. Read it with cerulean changes.
An elastic table may have up to 8 secondary indexes (docs/indexes.md): a query whose $filter
compares an indexed property may read the index rather than the table. --unique makes the index an
alternate key: a write giving a second entity the same values is refused with 409
UniqueIndexViolation. An index declared on a table with data is built in the background
(state building, then ready; a unique index whose build finds a value twice is failed).
Flags may come before or after NAME. Exit status: 0 done, 1 refused or unreachable, 2 a
command-line mistake.

Flags of every cerulean table command:
`)
	fs := tableFlags("", &tableOptions{})
	fs.SetOutput(w)
	fs.PrintDefaults()
	for _, cmd := range []string{"create", "set", "show", "list", "index add", "index list"} {
		fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
		commandFlags(cmd, fs, &tableOptions{})
		fmt.Fprintf(w, "Flags of cerulean table %s:\n", cmd)
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
}

// tableOptions are the flags of `cerulean table` commands.
type tableOptions struct {
	endpoint, account, key string

	elastic     bool
	ttl         string
	ttlProperty string
	changeFeed  string
	json        bool
	settings    bool
	unique      bool // index add
	wait        bool // index add
	// given records which flags the command line set.
	given map[string]bool
}

// tableFlags defines the flags of one table command (name "" for the common ones).
func tableFlags(cmd string, o *tableOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("table "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// Defaults are resolved after parsing, so that -h never prints a key from the
	// environment.
	fs.StringVar(&o.endpoint, "endpoint", "", "the account's table endpoint (CERULEAN_TABLE_ENDPOINT; default http://127.0.0.1:10002/ACCOUNT)")
	fs.StringVar(&o.account, "account", "", "account name (CERULEAN_TABLE_ACCOUNT; default "+auth.DevAccountName+")")
	fs.StringVar(&o.key, "key", "", "account key, base64 (CERULEAN_TABLE_KEY; default the development account's well-known key)")
	commandFlags(cmd, fs, o)
	return fs
}

// commandFlags defines the flags of one table command beyond the common ones.
func commandFlags(cmd string, fs *flag.FlagSet, o *tableOptions) {
	switch cmd {
	case "create", "set":
		elastic := "make the table elastic"
		ttl := "the table's default time-to-live: seconds (1 to 2147483647), or -1 for on without a default; off when omitted"
		if cmd == "set" {
			elastic = "true makes the table elastic, false standard (which turns time-to-live off)"
			ttl = "the table's default time-to-live: seconds (1 to 2147483647), -1 for on without a default, or off"
		}
		fs.BoolVar(&o.elastic, "elastic", false, elastic)
		fs.StringVar(&o.ttl, "ttl", "", ttl)
		fs.StringVar(&o.ttlProperty, "ttl-property", "", "the integer entity property that overrides the default time-to-live (default TTLInSeconds)")
		fs.StringVar(&o.changeFeed, "change-feed", "", "turn the table's change feed on, keeping its records this long (seconds, or a duration such as 36h or 7d), or off")
	case "show":
		fs.BoolVar(&o.json, "json", false, "print the settings as JSON")
	case "index add":
		fs.BoolVar(&o.unique, "unique", false, "a unique index (alternate key): no two entities may hold the same values of its properties")
		fs.BoolVar(&o.wait, "wait", false, "wait until the index is built (ready), showing the build's progress on stderr; exit 1 if it fails")
	case "index list":
		fs.BoolVar(&o.json, "json", false, "print the indexes as a JSON array, with the settings endpoint's member names")
	case "list":
		fs.BoolVar(&o.settings, "settings", false, "print each table's settings")
	}
}

// parseTableArgs parses a table command's flags, which may come before or after its
// positional arguments, and returns the positional ones.
func parseTableArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// parseTTL reads --ttl: seconds (1 to 2147483647), -1, or off.
func parseTTL(v string) (int32, error) {
	if v == "off" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n == 0 || n < -1 {
		return 0, fmt.Errorf("--ttl %q: want seconds (1 to 2147483647), -1 (on, no default) or off", v)
	}
	return int32(n), nil
}

func runTable(args []string) error {
	if len(args) == 0 {
		return usageErrorf("missing command: create, show, set, list or index")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "-h", "-help", "--help", "help":
		return flag.ErrHelp
	case "create", "show", "set", "list":
	case "index":
		return runTableIndex(args)
	default:
		return usageErrorf("unknown command %q: want create, show, set, list or index", cmd)
	}
	o := &tableOptions{given: map[string]bool{}}
	fs := tableFlags(cmd, o)
	pos, err := parseTableArgs(fs, args)
	if err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return usageError{err}
	}
	fs.Visit(func(f *flag.Flag) { o.given[f.Name] = true })
	wantArgs := 1
	if cmd == "list" {
		wantArgs = 0
	}
	switch {
	case len(pos) < wantArgs:
		return usageErrorf("%s: missing the table NAME", cmd)
	case len(pos) > wantArgs:
		return usageErrorf("%s: unexpected arguments: %s", cmd, strings.Join(pos[wantArgs:], " "))
	}
	var ttl int32
	if o.given["ttl"] {
		if ttl, err = parseTTL(o.ttl); err != nil {
			return usageError{err}
		}
	}
	var feed int32
	if o.given["change-feed"] {
		if feed, err = table.ParseRetention(o.changeFeed); err != nil {
			return usageError{fmt.Errorf("--change-feed: %w", err)}
		}
	}
	if cmd == "create" && !o.elastic && (o.given["ttl"] && ttl != 0 || o.given["ttl-property"]) {
		return usageErrorf("create: --ttl and --ttl-property need --elastic (time-to-live is for elastic tables)")
	}
	c, err := o.restClient()
	if err != nil {
		return usageError{err}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, tableTimeout)
	defer cancel()
	out := os.Stdout
	switch cmd {
	case "list":
		tables, err := c.ListTables(ctx, o.settings)
		if err != nil {
			return fmt.Errorf("table list: %w", err)
		}
		writeTables(out, tables, o.settings)
		return nil
	case "show":
		t, err := c.GetTableSettings(ctx, pos[0])
		if err != nil {
			return fmt.Errorf("table show %s: %w", pos[0], err)
		}
		if o.json {
			b, _ := json.Marshal(struct {
				TableName string
				client.TableSettings
			}{t.Name, t.TableSettings})
			fmt.Fprintf(out, "%s\n", b)
			return nil
		}
		writeSettings(out, t)
		return nil
	case "create":
		var st *client.TableSettings
		if o.given["elastic"] || o.given["ttl"] || o.given["ttl-property"] || o.given["change-feed"] {
			st = &client.TableSettings{Elastic: o.elastic, DefaultTimeToLive: ttl, TimeToLiveProperty: o.ttlProperty, ChangeFeedRetention: feed}
		}
		if err := c.CreateTable(ctx, pos[0], st); err != nil {
			return fmt.Errorf("table create %s: %w", pos[0], err)
		}
	case "set":
		t, err := c.GetTableSettings(ctx, pos[0])
		if err != nil {
			return fmt.Errorf("table set %s: %w", pos[0], err)
		}
		st := t.TableSettings
		if o.given["elastic"] {
			if st.Elastic = o.elastic; !o.elastic {
				// A standard table has no time-to-live.
				st.DefaultTimeToLive, st.TimeToLiveProperty = 0, ""
			}
		}
		if o.given["ttl"] {
			st.DefaultTimeToLive = ttl
		}
		if o.given["ttl-property"] {
			st.TimeToLiveProperty = o.ttlProperty
		}
		if o.given["change-feed"] {
			st.ChangeFeedRetention = feed
		}
		if err := c.SetTableSettings(ctx, pos[0], st); err != nil {
			return fmt.Errorf("table set %s: %w", pos[0], err)
		}
	}
	// create and set print the settings in force, which for create may come from the
	// server's rules.
	t, err := c.GetTableSettings(ctx, pos[0])
	if err != nil {
		return fmt.Errorf("table %s %s: %w", cmd, pos[0], err)
	}
	writeSettings(out, t)
	return nil
}

// restClient builds the REST client from the flags, the environment and the defaults.
func (o *tableOptions) restClient() (*client.Client, error) {
	pick := func(flagV, envName, def string) string {
		if flagV != "" {
			return flagV
		}
		if v := os.Getenv(envName); v != "" {
			return v
		}
		return def
	}
	account := pick(o.account, "CERULEAN_TABLE_ACCOUNT", auth.DevAccountName)
	endpoint := pick(o.endpoint, "CERULEAN_TABLE_ENDPOINT", "http://127.0.0.1:10002/"+account)
	key := pick(o.key, "CERULEAN_TABLE_KEY", "")
	if key == "" {
		if account != auth.DevAccountName {
			return nil, fmt.Errorf("--key (or CERULEAN_TABLE_KEY) is needed for account %q", account)
		}
		key = auth.DevAccountKey
	}
	if !strings.HasPrefix(endpoint, "http://") && !strings.HasPrefix(endpoint, "https://") {
		return nil, fmt.Errorf("--endpoint %q: want an http:// or https:// URL", endpoint)
	}
	c, err := client.New(endpoint, account, key)
	if err != nil {
		return nil, fmt.Errorf("--key: %w", err)
	}
	return c, nil
}

// ttlText is a default time-to-live for people.
func ttlText(ttl int32) string {
	switch ttl {
	case 0:
		return "off"
	case -1:
		return "-1 (on, no default: only entities with their own TTL expire)"
	}
	return strconv.Itoa(int(ttl)) + " s"
}

// retentionText is a change feed retention for people: seconds, and days or hours when
// whole.
func retentionText(s int32) string {
	switch {
	case s%86400 == 0:
		return fmt.Sprintf("%d s (%dd)", s, s/86400)
	case s%3600 == 0:
		return fmt.Sprintf("%d s (%dh)", s, s/3600)
	}
	return fmt.Sprintf("%d s", s)
}

// writeSettings prints one table's settings, a "name: value" line each.
func writeSettings(w io.Writer, t client.Table) {
	fmt.Fprintf(w, "TableName:          %s\n", t.Name)
	fmt.Fprintf(w, "Elastic:            %v\n", t.Elastic)
	if t.ChangeFeedRetention != 0 {
		fmt.Fprintf(w, "ChangeFeed:         on, retention %s\n", retentionText(t.ChangeFeedRetention))
	}
	if !t.Elastic {
		return
	}
	fmt.Fprintf(w, "DefaultTimeToLive:  %s\n", ttlText(t.DefaultTimeToLive))
	fmt.Fprintf(w, "TimeToLiveProperty: %s\n", t.TimeToLiveProperty)
	if len(t.Indexes) > 0 {
		parts := make([]string, len(t.Indexes))
		for i, d := range t.Indexes {
			parts[i] = fmt.Sprintf("%s (%s) %s", d.Name, indexText(d), d.State)
		}
		fmt.Fprintf(w, "Indexes:            %s\n", strings.Join(parts, "; "))
	}
}

// writeTables prints a table list: names, one per line, or a table with the settings
// (indexes by name; cerulean table index list shows them whole).
func writeTables(w io.Writer, tables []client.Table, settings bool) {
	if !settings {
		for _, t := range tables {
			fmt.Fprintln(w, t.Name)
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tELASTIC\tDEFAULT TTL\tTTL PROPERTY\tCHANGE FEED\tINDEXES")
	for _, t := range tables {
		ttl, prop := "-", "-"
		if t.Elastic {
			ttl, prop = "off", t.TimeToLiveProperty
			if t.DefaultTimeToLive != 0 {
				ttl = strconv.Itoa(int(t.DefaultTimeToLive))
			}
		}
		feed := "off"
		if t.ChangeFeedRetention != 0 {
			feed = strconv.Itoa(int(t.ChangeFeedRetention))
		}
		ixs := "-"
		if len(t.Indexes) > 0 {
			names := make([]string, len(t.Indexes))
			for i, d := range t.Indexes {
				names[i] = d.Name
			}
			ixs = strings.Join(names, ",")
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\t%s\n", t.Name, t.Elastic, ttl, prop, feed, ixs)
	}
	tw.Flush()
}
