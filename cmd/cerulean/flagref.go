package main

import (
	"flag"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// The flag reference of docs/configuration.md is rendered from serveFlags() by
// flagReference; TestFlagReference fails when the page differs and -update rewrites it.
//
//go:generate go test -run TestFlagReference -update .

// flagDocs links a flag to the manual's section about it; the reference adds the link
// after the flag's meaning. The docs test checks that every link resolves.
var flagDocs = map[string]string{
	"access-log":                 "[Access log](operations.md#access-log)",
	"account-target":             "[Scale targets and faults](scale-and-faults.md)",
	"accounts":                   "[Authentication](authentication.md)",
	"body-timeout":               "[Clients that misbehave](#clients-that-misbehave)",
	"console":                    "[Web console](console.md)",
	"console-addr":               "[Web console](console.md#turning-it-off-or-moving-it)",
	"debug-addr":                 "[Metrics](operations.md#metrics), [Hot partitions](operations.md#hot-partitions), [Backup and restore](operations.md#backup-and-restore)",
	"disk-reserve":               "[Full disk](operations.md#full-disk)",
	"elastic-tables":             "[Elastic tables](elastic-tables.md)",
	"change-feed-tables":         "[Change feed](change-feed.md)",
	"engine":                     "[PostgreSQL engine](postgres.md)",
	"expiry-interval":            "[Time-to-live](elastic-tables.md#time-to-live)",
	"faults":                     "[Scale targets and faults](scale-and-faults.md)",
	"hot-partition-warn":         "[Hot partitions](operations.md#hot-partitions)",
	"hot-partition-warn-after":   "[Hot partitions](operations.md#hot-partitions)",
	"http-server":                "[HTTPS](operations.md#https)",
	"idle-timeout":               "[Keep-alive](#keep-alive)",
	"max-body-memory":            "[Clients that misbehave](#clients-that-misbehave)",
	"max-staleness":              "[Read replicas](postgres.md#read-replicas)",
	"memory-limit":               "[Memory](operations.md#memory)",
	"memtable-size":              "[Memory](operations.md#memory), [Benchmarks](benchmarks.md)",
	"oidc-audience":              "[Identities](identity.md)",
	"oidc-issuer":                "[Identities](identity.md)",
	"partition-target":           "[Scale targets and faults](scale-and-faults.md)",
	"postgres-pool-size":         "[PostgreSQL engine](postgres.md)",
	"postgres-replica-url":       "[Read replicas](postgres.md#read-replicas)",
	"postgres-statement-timeout": "[PostgreSQL engine](postgres.md)",
	"postgres-url":               "[PostgreSQL engine](postgres.md)",
	"read-consistency":           "[Read consistency](sessions.md#read-consistency)",
	"replica-max-lag":            "[Read replicas](postgres.md#read-replicas)",
	"replica-read-timeout":       "[Read replicas](postgres.md#read-replicas)",
	"role-assignments":           "[Identities](identity.md)",
	"row-cache":                  "[Memory](operations.md#memory), [Benchmarks](benchmarks.md)",
	"scale-targets":              "[Scale targets and faults](scale-and-faults.md)",
	"shared-key-off":             "[Identities](identity.md)",
	"shutdown-grace":             "[Shutdown](#shutdown)",
	"slow-request":               "[Logs](#logs)",
	"stall-timeout":              "[Clients that misbehave](#clients-that-misbehave)",
	"table-delete-delay":         "[Scale targets and faults](scale-and-faults.md)",
	"tls-cert":                   "[HTTPS](operations.md#https)",
	"tls-key":                    "[HTTPS](operations.md#https)",
	"tls-self-signed":            "[HTTPS](operations.md#https)",
}

// usageEnv is the environment variable a flag's usage ends with, in parentheses: every
// flag of cerulean serve names its own.
var usageEnv = regexp.MustCompile(`^(?s)(.*) \((CERULEAN_[A-Z0-9_]+)\)$`)

// flagName matches a flag named in a usage text (with its value for --engine), to show
// it as code.
var flagName = regexp.MustCompile(`--[a-z][a-z0-9-]*(?: (?:postgres|pebble)\b)?`)

// flagReference renders the flags of fs as a Markdown table (flag, environment variable,
// default, meaning), in the flag package's order (by name). fs must have been built with
// no CERULEAN_* variable set, or their values would show as defaults.
func flagReference(fs *flag.FlagSet) (string, error) {
	var b strings.Builder
	b.WriteString("| flag | environment variable | default | meaning |\n|---|---|---|---|\n")
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		m := usageEnv.FindStringSubmatch(f.Usage)
		if m == nil {
			if err == nil {
				err = fmt.Errorf("the usage of --%s does not end with its environment variable in parentheses, (CERULEAN_...): %q", f.Name, f.Usage)
			}
			return
		}
		meaning := markdownText(m[1])
		if link, ok := flagDocs[f.Name]; ok {
			meaning += " (see " + link + ")"
		}
		fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s |\n", f.Name, m[2], defaultText(f), meaning)
	})
	for name := range flagDocs {
		if fs.Lookup(name) == nil && err == nil {
			err = fmt.Errorf("flagDocs names --%s, which cerulean serve does not have", name)
		}
	}
	return b.String(), err
}

// defaultText is a flag's default as the table shows it: durations as short as they
// parse (5m, not 5m0s), nothing as "not set".
func defaultText(f *flag.Flag) string {
	v := f.DefValue
	if g, ok := f.Value.(flag.Getter); ok {
		if d, ok := g.Get().(time.Duration); ok {
			v = shortDuration(d)
		}
	}
	if v == "" {
		return "not set"
	}
	return "`" + v + "`"
}

func shortDuration(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// markdownText makes a usage text safe in a table cell: flags named in it become code,
// and what Markdown would read as markup (emphasis, a cell's end, HTML) is escaped.
func markdownText(s string) string {
	var b strings.Builder
	last := 0
	for _, loc := range flagName.FindAllStringIndex(s, -1) {
		b.WriteString(escapeMarkdown(s[last:loc[0]]))
		b.WriteString("`" + s[loc[0]:loc[1]] + "`")
		last = loc[1]
	}
	b.WriteString(escapeMarkdown(s[last:]))
	return b.String()
}

var markdownEscaper = strings.NewReplacer(`\`, `\\`, "`", "\\`", `*`, `\*`, `_`, `\_`, `|`, `\|`, `<`, `&lt;`)

func escapeMarkdown(s string) string { return markdownEscaper.Replace(s) }
