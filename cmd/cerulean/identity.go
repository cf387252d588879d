package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/bearer"
	"github.com/ceruleandb/cerulean/internal/devissuer"
	"github.com/ceruleandb/cerulean/internal/metrics"
	"github.com/ceruleandb/cerulean/internal/rbac"
	"github.com/ceruleandb/cerulean/internal/server"
)

// identityOptions are the flags of sign-in with an identity (docs/identity.md): the
// OpenID providers whose bearer tokens are taken, the role assignments that decide
// what each principal may do, and the accounts whose shared keys are off.
type identityOptions struct {
	// issuers is --oidc-issuer: issuer URLs, comma-separated; audiences --oidc-audience.
	issuers, audiences string
	// roles is --role-assignments: the assignments file (package rbac).
	roles string
	// sharedKeyOff is --shared-key-off: account names, comma-separated.
	sharedKeyOff string
	// devIssuer is --dev-issuer: the server is its own OpenID provider for development
	// (package devissuer); autoTLS says it turned --tls-self-signed on.
	devIssuer, autoTLS bool
}

func addIdentityFlags(fs *flag.FlagSet, o *identityOptions) error {
	fs.StringVar(&o.issuers, "oidc-issuer", env("CERULEAN_OIDC_ISSUER", ""), "take OAuth bearer tokens (Authorization: Bearer) from these OpenID Connect issuers, comma-separated issuer URLs "+
		"(e.g. https://login.microsoftonline.com/TENANT/v2.0, a Keycloak realm, Dex): keys come from each issuer's discovery document and JWKS, refreshed on rotation; "+
		"needs HTTPS (--tls-cert or --tls-self-signed) and --role-assignments (CERULEAN_OIDC_ISSUER)")
	fs.StringVar(&o.audiences, "oidc-audience", env("CERULEAN_OIDC_AUDIENCE", ""), "the audiences (aud) a token must name one of, comma-separated; default https://storage.azure.com (with or without its slash), "+
		"besides which the account's endpoint (https://ACCOUNT.table.core.windows.net) and this server's own URL are always taken (CERULEAN_OIDC_AUDIENCE)")
	fs.StringVar(&o.roles, "role-assignments", env("CERULEAN_ROLE_ASSIGNMENTS", ""), "JSON file of role assignments (Storage Table Data Reader, Storage Table Data Contributor, custom roles) "+
		"to principals at account or table scope; read again when it changes, a broken edit keeping the assignments before it (CERULEAN_ROLE_ASSIGNMENTS)")
	fs.StringVar(&o.sharedKeyOff, "shared-key-off", env("CERULEAN_SHARED_KEY_OFF", ""), "accounts, comma-separated, that refuse SharedKey, SharedKeyLite and SAS requests "+
		"(403 KeyBasedAuthenticationNotPermitted), as Azure's allowSharedKeyAccess=false: only bearer tokens reach them (CERULEAN_SHARED_KEY_OFF)")
	dev, err := envBool("CERULEAN_DEV_ISSUER", false)
	if err != nil {
		return err
	}
	fs.BoolVar(&o.devIssuer, "dev-issuer", dev, "for development: be an OpenID provider too (issuer https://ADDR/.cerulean/issuer, its key kept in --data), whose tokens (printed by cerulean token) carry a role and scope "+
		"the server honours without --role-assignments; only on a loopback --addr; turns --tls-self-signed on when no TLS flag is given (CERULEAN_DEV_ISSUER)")
	return nil
}

// check refuses combinations that could not work: tokens without HTTPS (Azure takes
// them over HTTPS only) or without assignments (every operation would be refused), and
// the development issuer anywhere but on loopback (addrs are the listening addresses):
// its key mints any role, so its tokens must stay on the machine that holds it.
func (o identityOptions) check(https bool, addrs ...string) error {
	switch {
	case o.issuers != "" && !https:
		return errors.New("--oidc-issuer needs HTTPS: bearer tokens are taken over HTTPS only (--tls-cert and --tls-key, or --tls-self-signed)")
	case o.devIssuer && !https:
		return errors.New("--dev-issuer needs HTTPS: bearer tokens are taken over HTTPS only")
	case o.issuers != "" && o.roles == "":
		return errors.New("--oidc-issuer needs --role-assignments: without assignments no principal may do anything")
	case o.issuers == "" && !o.devIssuer && o.roles != "":
		return errors.New("--role-assignments needs --oidc-issuer or --dev-issuer: assignments decide what bearer tokens may do")
	case o.issuers == "" && o.audiences != "":
		return errors.New("--oidc-audience needs --oidc-issuer")
	}
	if o.devIssuer {
		for _, a := range addrs {
			if a != "" && !loopbackAddr(a) {
				return fmt.Errorf("--dev-issuer needs a loopback address (127.0.0.1, ::1 or localhost), not %q: anyone who can read its key can mint tokens of any role", a)
			}
		}
	}
	return nil
}

// loopbackAddr reports whether host:port names a loopback host: localhost or a loopback
// IP (a wildcard such as ":10002" or "0.0.0.0:10002" is not).
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// applySharedKeyOff turns shared key access off for the named accounts, which must be
// among accounts; an account without keys is reachable only by token then.
func (o identityOptions) applySharedKeyOff(accounts []auth.Account) error {
	for _, name := range splitList(o.sharedKeyOff) {
		i := slices.IndexFunc(accounts, func(a auth.Account) bool { return a.Name == name })
		if i < 0 {
			return fmt.Errorf("--shared-key-off: no account %q (the accounts are --accounts')", name)
		}
		accounts[i].SharedKeyOff = true
	}
	return nil
}

// identity is what build makes: the token verifier and what decides for each token's
// principal (nil both when no issuer is configured), and the development issuer (nil
// without --dev-issuer), whose paths the listener serves.
type identity struct {
	tokens server.BearerVerifier
	roles  server.RoleAuthorizer
	dev    *devissuer.Issuer
}

// build makes the token verifier and the deciders: the role assignments file (watched
// for changes until ctx ends) and, with --dev-issuer, the development issuer (its key in
// data) whose tokens' role claims decide for them; with met, the assignments' state is in
// its metrics. endpoint is the server's own URL, an audience tokens may name and the base
// of the development issuer's URL.
func (o identityOptions) build(ctx context.Context, endpoint, data string, log *slog.Logger, met *metrics.Metrics) (identity, error) {
	var id identity
	if o.issuers == "" && !o.devIssuer {
		return id, nil
	}
	cfg := bearer.Config{Audiences: splitList(o.audiences), Endpoints: []string{endpoint}}
	for _, u := range splitList(o.issuers) {
		cfg.Issuers = append(cfg.Issuers, bearer.IssuerConfig{URL: u})
	}
	var deciders rbac.Union
	if o.devIssuer {
		dev, created, err := devissuer.Open(data, endpoint)
		if err != nil {
			return id, err
		}
		if created {
			log.Info("created the development issuer's key", "file", filepath.Join(data, devissuer.KeyFile))
		}
		// Its tokens name the storage audience whatever --oidc-audience says, and are
		// verified with the key held, not by fetching the server's own discovery.
		cfg.Issuers = append(cfg.Issuers, bearer.IssuerConfig{URL: dev.URL(), Keys: dev.Keys(), Audiences: bearer.DefaultAudiences})
		claims, err := rbac.NewClaimAuthorizer(dev.URL())
		if err != nil {
			return id, err
		}
		deciders = append(deciders, claims)
		id.dev = dev
	}
	v, err := bearer.New(cfg)
	if err != nil {
		return id, fmt.Errorf("oidc: %w", err)
	}
	id.tokens = v
	if o.roles == "" {
		id.roles = deciders
		log.Info("bearer tokens", "issuers", v.Issuers())
		return id, nil
	}
	roles, err := rbac.NewAuthorizer(o.roles, rbac.Options{OnReload: func(err error) {
		if err != nil {
			log.Warn("role assignments: the file changed but is refused; the assignments before it stay", "file", o.roles, "err", err)
			return
		}
		log.Info("role assignments: read again", "file", o.roles)
	}})
	if err != nil {
		return id, fmt.Errorf("role assignments: %w", err)
	}
	go roles.Watch(ctx)
	if met != nil {
		if err := met.Register(rolesCollector(roles)); err != nil {
			return id, fmt.Errorf("metrics: %w", err)
		}
	}
	log.Info("bearer tokens", "issuers", v.Issuers(), "role_assignments", o.roles, "assignments", len(roles.Policy().Assignments()))
	id.roles = append(rbac.Union{roles}, deciders...)
	return id, nil
}

// rolesCollector exposes the role assignments file's state: how many assignments are in
// force, and whether the file's latest change was refused (the ones before it stay).
func rolesCollector(a *rbac.Authorizer) prometheus.Collector {
	return collectorList{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cerulean_role_assignments",
			Help: "Role assignments in force (--role-assignments).",
		}, func() float64 { return float64(a.Status().Assignments) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cerulean_role_assignments_refused",
			Help: "1 while the role assignments file holds a change that was refused (it does not parse); the assignments before it stay in force. 0 otherwise.",
		}, func() float64 {
			if a.Status().Err != nil {
				return 1
			}
			return 0
		}),
	}
}

// collectorList is several collectors registered as one.
type collectorList []prometheus.Collector

func (l collectorList) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range l {
		c.Describe(ch)
	}
}

func (l collectorList) Collect(ch chan<- prometheus.Metric) {
	for _, c := range l {
		c.Collect(ch)
	}
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// printDevIssuer tells the user of --dev-issuer where the issuer is and how to get a
// token (never a token itself: the banner may be collected as a log).
func printDevIssuer(w io.Writer, dev *devissuer.Issuer, o serveOptions) {
	if o.id.autoTLS {
		fmt.Fprintln(w, "HTTPS is on: --dev-issuer turned --tls-self-signed on, since bearer tokens are taken over HTTPS only.")
	}
	data := ""
	if o.data != "./data" {
		data = " --data " + o.data
	}
	fmt.Fprintf(w, "Development issuer (--dev-issuer): %s\n  a token for a token credential: TOKEN=$(cerulean token --role contributor%s)  (or --role reader, --table NAME; cerulean help token)\n", dev.URL(), data)
}
