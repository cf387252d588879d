package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ceruleandb/cerulean/internal/devissuer"
	"github.com/ceruleandb/cerulean/internal/rbac"
)

func tokenUsage(w io.Writer) {
	fmt.Fprint(w, `Usage of cerulean token:
  cerulean token --role reader|contributor|ROLE [--table NAME] [--account NAME] [--data DIR] [--lifetime 1h] [--subject NAME]

Prints a bearer token of the development issuer of a server started with --dev-issuer
(its key is in --data), and nothing else, so that TOKEN=$(cerulean token --role contributor)
hands it to a token credential. The token grants the role at the scope the flags name, and
the server honours it without --role-assignments (docs/identity.md, "For development").

Flags of cerulean token:
`)
	fs, _ := tokenFlags()
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// tokenOptions are cerulean token's flags.
type tokenOptions struct {
	role, table, account, data, subject string
	lifetime                            time.Duration
}

func tokenFlags() (*flag.FlagSet, *tokenOptions) {
	o := &tokenOptions{}
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.role, "role", "", "the role the token grants (required): reader (Storage Table Data Reader), contributor (Storage Table Data Contributor), "+
		"or a built-in role's name or id (\"Storage Table Data Reader\", Azure's Owner, Contributor and Reader by their ids)")
	fs.StringVar(&o.table, "table", "", "grant the role on this table only (of --account, default devstoreaccount1)")
	fs.StringVar(&o.account, "account", "", "grant the role on this account only; default every account, or devstoreaccount1 with --table")
	fs.StringVar(&o.data, "data", env("CERULEAN_DATA", "./data"), "the data directory of the server started with --dev-issuer, which holds the issuer's key (CERULEAN_DATA)")
	fs.DurationVar(&o.lifetime, "lifetime", devissuer.DefaultLifetime, fmt.Sprintf("how long the token is valid, at most %v", devissuer.MaxLifetime))
	fs.StringVar(&o.subject, "subject", devissuer.DefaultSubject, "the token's subject (sub): the principal the access log names")
	return fs, o
}

func runToken(args []string) error { return printToken(os.Stdout, args) }

// printToken writes the token args ask for, and a newline, to w; errors say why not
// (usageError for a mistake on the command line).
func printToken(w io.Writer, args []string) error {
	fs, o := tokenFlags()
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	role, err := tokenRole(o.role)
	if err != nil {
		return usageError{err}
	}
	scope, err := tokenScope(o.account, o.table)
	if err != nil {
		return usageError{err}
	}
	if o.lifetime <= 0 || o.lifetime > devissuer.MaxLifetime {
		return usageErrorf("--lifetime %v: want more than 0 and at most %v", o.lifetime, devissuer.MaxLifetime)
	}
	if o.subject == "" {
		return usageErrorf("--subject is empty")
	}
	iss, err := devissuer.Load(o.data)
	if err != nil {
		return err
	}
	tok, err := iss.Token(devissuer.TokenOptions{Role: role, Scope: scope, Subject: o.subject, Lifetime: o.lifetime})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, tok)
	return err
}

// tokenRole reads --role: the shorthands reader and contributor (in any case) for the
// two Storage Table Data roles — what a developer means by them here; Azure's general
// Reader and Contributor roles, which read no entity, are reached by their ids — or a
// built-in role's name or id.
func tokenRole(s string) (*rbac.Role, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return nil, fmt.Errorf("--role is required: reader, contributor or a built-in role's name or id")
	case "reader":
		s = "Storage Table Data Reader"
	case "contributor":
		s = "Storage Table Data Contributor"
	}
	r := rbac.BuiltinRole(s)
	if r == nil {
		names := make([]string, len(rbac.BuiltinRoles))
		for i, b := range rbac.BuiltinRoles {
			names[i] = fmt.Sprintf("%q", b.Name)
		}
		return nil, fmt.Errorf("--role %q: want reader, contributor or a built-in role's name or id (%s)", s, strings.Join(names, ", "))
	}
	return r, nil
}

// tokenScope is the scope --account and --table name.
func tokenScope(account, table string) (rbac.Scope, error) {
	s := "/"
	switch {
	case table != "":
		if account == "" {
			account = "devstoreaccount1"
		}
		s = "/" + account + "/tables/" + table
	case account != "":
		s = "/" + account
	}
	sc, err := rbac.ParseScope(s)
	if err != nil {
		return rbac.Scope{}, fmt.Errorf("--account/--table: %w", err)
	}
	return sc, nil
}
