// Package console is the web console: a page served by cerulean itself at /-/ (a first
// path segment no account name can take) that shows and changes the data of the account
// the user signs in to, and watches the service.
//
// The page is static (embedded; vanilla JavaScript modules, no build step, nothing fetched
// from elsewhere: its Content-Security-Policy allows only its own origin). It talks to the
// service only through the Table REST API, signing each request itself with the key or
// appending the SAS the user gave, so it can do exactly what those credentials allow.
// Credentials stay in the browser tab's sessionStorage; the server never sees them
// except as the signatures every SDK sends.
//
// The one thing the REST API does not offer is Watch's data: /-/api/watch answers it,
// authenticated by a SharedKey signature of the account (as the API verifies it), and
// shows only that account's requests and partitions.
package console

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/edmjson"
	"github.com/ceruleandb/cerulean/internal/hotpart"
)

// Prefix is the path the console is served under. Account names are 3–24 lower-case
// letters and digits, so no path-style API request starts with it.
const Prefix = "/-/"

//go:embed static
var static embed.FS

// csp confines the page to its own origin: scripts, styles, images and every request
// (connect-src) — the browser itself refuses anything else.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

// Options configure the console.
type Options struct {
	// Accounts are the accounts whose signatures /-/api/watch accepts.
	Accounts []auth.Account
	// Rates are the request series Watch shows (an observer the server reports to).
	Rates *Rates
	// Hot is the hot-partition tracker the server reports to; nil shows none.
	Hot *hotpart.Tracker
	// Now is the clock request dates are checked against (default time.Now).
	Now func() time.Time
}

// Console serves the page and its Watch endpoint.
type Console struct {
	verifier *auth.Verifier
	rates    *Rates
	hot      *hotpart.Tracker
	files    http.Handler
}

// New makes the console.
func New(o Options) *Console {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Console{verifier: auth.NewVerifier(o.Accounts, o.Now), rates: o.Rates, hot: o.Hot,
		files: http.FileServer(http.FS(sub))}
}

// IsConsolePath reports whether an HTTP request path is the console's: "/-" or under
// "/-/". It is two byte comparisons, for the table API's hot path.
func IsConsolePath(p string) bool {
	return len(p) >= 2 && p[1] == '-' && p[0] == '/' && (len(p) == 2 || p[2] == '/')
}

// Mount returns a handler that sends the console's paths to c and every other request
// to api.
func Mount(c *Console, api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if IsConsolePath(r.URL.Path) {
			c.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// ServeHTTP serves the page's files under Prefix and the Watch endpoint under /-/api/.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	p := r.URL.Path
	if p == "/-" {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	if strings.HasPrefix(p, "/-/api/") {
		c.serveAPI(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	// The page changes with the binary: revalidate, never serve a stale module mix.
	h.Set("Cache-Control", "no-cache")
	r2 := *r
	u := *r.URL
	u.Path = strings.TrimPrefix(p, "/-")
	r2.URL = &u
	c.files.ServeHTTP(w, &r2)
}

// WatchResponse is what /-/api/watch answers: the account's request series and, for the
// table asked for (all the account's tables without one), its busiest partitions over
// the last minute.
type WatchResponse struct {
	Account    string         `json:"account"`
	Rates      Snapshot       `json:"rates"`
	Partitions hotpart.Report `json:"partitions"`
}

// serveAPI answers /-/api/watch?table=&seconds=&top=. The request must be signed with
// SharedKey or SharedKeyLite for the account named in its Authorization header, over the
// canonicalized resource /<account>/-/api/watch, as the API's requests are; otherwise it
// is refused as the API refuses (403 AuthenticationFailed, 401 without credentials).
func (c *Console) serveAPI(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/-/api/watch" {
		writeError(w, azerr.New(azerr.ResourceNotFound))
		return
	}
	if r.Method != http.MethodGet {
		writeError(w, azerr.New(azerr.UnsupportedHTTPVerb))
		return
	}
	_, account, _, err := auth.ParseAuthorization(r.Header.Get("Authorization"))
	if err == nil {
		err = c.verifier.Authenticate(r, account)
	} else if r.Header.Get("Authorization") == "" {
		err = azerr.New(azerr.NoAuthenticationInformation)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	seconds, top := 120, hotpart.DefaultTop
	if v := q.Get("seconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n >= Window {
			writeError(w, azerr.OutOfRange("seconds", v))
			return
		}
		seconds = n
	}
	if v := q.Get("top"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, azerr.OutOfRange("top", v))
			return
		}
		top = n
	}
	resp := WatchResponse{Account: account, Rates: c.rates.Snapshot(account, seconds),
		Partitions: hotpart.Report{TargetPerSec: hotpart.Target, Tables: []hotpart.TableReport{}}}
	if c.hot != nil {
		// Filter.Account keeps the report to the signed-in account's own partitions. The
		// tracker's total is every account's, so entities_per_sec here is the sum of the
		// partitions shown instead.
		resp.Partitions = c.hot.Report(hotpart.Filter{Account: account, Table: q.Get("table"), Top: top})
		resp.Partitions.EntitiesPerSec = 0
		for _, t := range resp.Partitions.Tables {
			for _, p := range t.Partitions {
				resp.Partitions.EntitiesPerSec += p.EntitiesPerSec
			}
		}
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(resp) // the client went away
}

// writeError answers as the table API does: x-ms-error-code and an odata.error body.
func writeError(w http.ResponseWriter, err error) {
	e, _ := azerr.As(err)
	msg := e.Message
	if e.Detail != "" {
		msg += "\n" + e.Detail
	}
	h := w.Header()
	h.Set("X-Ms-Error-Code", string(e.Code))
	h.Set("Content-Type", "application/json;odata=minimalmetadata")
	w.WriteHeader(e.Status)
	_, _ = w.Write(edmjson.AppendError(nil, string(e.Code), msg))
}
