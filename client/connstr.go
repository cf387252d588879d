package client

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// defaultHTTP is the data tools' HTTP client: enough idle connections per host for their
// parallel writers, and a bound on each response's headers so a stuck server is retried.
var defaultHTTP = &http.Client{Transport: &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	MaxIdleConns:          256,
	MaxIdleConnsPerHost:   64,
	IdleConnTimeout:       90 * time.Second,
	TLSHandshakeTimeout:   10 * time.Second,
	ResponseHeaderTimeout: 2 * time.Minute,
	ForceAttemptHTTP2:     true,
}}

// Development storage: the well-known account of Azurite and the storage emulator, which
// Cerulean serves by default too.
const (
	DevAccount  = "devstoreaccount1"
	DevKey      = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
	DevEndpoint = "http://127.0.0.1:10002/devstoreaccount1"
)

// Target is an endpoint the data tools read or write: a client of one account and,
// when the connection named one (a table SAS URL), the table.
type Target struct {
	*Client
	// Table is the table a SAS URL addresses ("" for an account-level connection).
	Table string
}

// Open makes a Target from what a user types: a connection string
// ("DefaultEndpointsProtocol=https;AccountName=…;AccountKey=…;EndpointSuffix=…",
// "UseDevelopmentStorage=true", "TableEndpoint=…;SharedAccessSignature=…") or a SAS URL
// ("https://acct.table.core.windows.net/mytable?sv=…&sig=…"). Secrets never appear in
// its errors.
func Open(s string) (*Target, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://") {
		return openSASURL(s)
	}
	return openConnectionString(s)
}

// ParseConnectionString splits a connection string into its fields (keys matched
// without regard to case, as the SDKs do). A value may itself contain '=' (base64 keys,
// SAS tokens).
func ParseConnectionString(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("connection string: %q is not key=value", redact(part))
		}
		k = strings.ToLower(strings.TrimSpace(k))
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("connection string: %s given twice", k)
		}
		out[k] = strings.TrimSpace(v)
	}
	if len(out) == 0 {
		return nil, errors.New("connection string: empty")
	}
	return out, nil
}

func redact(part string) string {
	k, _, _ := strings.Cut(part, "=")
	if len(k) > 40 {
		k = k[:40]
	}
	return k + "=…"
}

func openConnectionString(s string) (*Target, error) {
	f, err := ParseConnectionString(s)
	if err != nil {
		return nil, err
	}
	if strings.EqualFold(f["usedevelopmentstorage"], "true") {
		endpoint := DevEndpoint
		if proxy := f["developmentstorageproxyuri"]; proxy != "" {
			u, err := url.Parse(proxy)
			if err != nil || u.Host == "" {
				return nil, errors.New("connection string: DevelopmentStorageProxyUri is not a URL")
			}
			endpoint = u.Scheme + "://" + u.Hostname() + ":10002/" + DevAccount
		}
		c, err := New(endpoint, DevAccount, DevKey)
		if err != nil {
			return nil, err
		}
		c.HTTP = defaultHTTP
		return &Target{Client: c}, nil
	}
	account := f["accountname"]
	endpoint := f["tableendpoint"]
	if endpoint == "" {
		if account == "" {
			return nil, errors.New("connection string: neither TableEndpoint nor AccountName")
		}
		proto := f["defaultendpointsprotocol"]
		if proto == "" {
			proto = "https"
		}
		if proto != "http" && proto != "https" {
			return nil, fmt.Errorf("connection string: DefaultEndpointsProtocol %q is not http or https", proto)
		}
		suffix := f["endpointsuffix"]
		if suffix == "" {
			suffix = "core.windows.net"
		}
		endpoint = proto + "://" + account + ".table." + suffix
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("connection string: TableEndpoint %q is not an http(s) URL", endpoint)
	}
	if account == "" {
		account = accountOf(u)
	}
	if sas := f["sharedaccesssignature"]; sas != "" {
		q, err := url.ParseQuery(strings.TrimPrefix(sas, "?"))
		if err != nil || q.Get("sig") == "" {
			return nil, errors.New("connection string: SharedAccessSignature is not a SAS token (no sig)")
		}
		return &Target{Client: &Client{Endpoint: strings.TrimSuffix(endpoint, "/"), Account: account, sas: q, HTTP: defaultHTTP}}, nil
	}
	key := f["accountkey"]
	if key == "" || account == "" {
		return nil, errors.New("connection string: needs AccountName and AccountKey, or SharedAccessSignature")
	}
	c, err := New(endpoint, account, key)
	if err != nil {
		return nil, fmt.Errorf("connection string: %w", err)
	}
	c.HTTP = defaultHTTP
	return &Target{Client: c}, nil
}

// openSASURL reads a SAS URL. On a host-style endpoint (acct.table.core.windows.net) the
// first path segment is the table; on an IP address or localhost (path-style, as Azurite
// and Cerulean serve) the first is the account and the second the table.
func openSASURL(s string) (*Target, error) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return nil, errors.New("SAS URL: not a URL")
	}
	q := u.Query()
	if q.Get("sig") == "" {
		return nil, errors.New("SAS URL: no sig parameter (give a connection string or a URL with a SAS token)")
	}
	segs := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' })
	base := u.Scheme + "://" + u.Host
	account := ""
	if pathStyle(u.Hostname()) {
		if len(segs) == 0 {
			return nil, errors.New("SAS URL: a path-style URL needs the account in its path")
		}
		account, segs = segs[0], segs[1:]
		base += "/" + account
	} else {
		account = accountOf(u)
	}
	table := ""
	if len(segs) > 0 {
		table = strings.TrimSuffix(segs[0], "()")
		if len(segs) > 1 {
			return nil, fmt.Errorf("SAS URL: unexpected path %q", u.Path)
		}
	}
	return &Target{Client: &Client{Endpoint: base, Account: account, sas: q, HTTP: defaultHTTP}, Table: table}, nil
}

func pathStyle(host string) bool {
	return host == "localhost" || net.ParseIP(host) != nil || !strings.Contains(host, ".")
}

// accountOf is the account an endpoint URL names: the path's first segment on a
// path-style URL, else the host's first label.
func accountOf(u *url.URL) string {
	if pathStyle(u.Hostname()) {
		seg, _, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
		return seg
	}
	label, _, _ := strings.Cut(u.Hostname(), ".")
	return label
}
