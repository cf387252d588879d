package bearer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/sync/singleflight"
)

// fetchTimeout bounds one discovery or JWKS request, whatever the caller's deadline: the
// request is shared by every verification waiting for it.
const fetchTimeout = 10 * time.Second

// maxJWKSBytes bounds a key set document.
const maxJWKSBytes = 1 << 20

type timing struct {
	refresh, maxAge, retryMin, retryMax time.Duration
}

// issuer is one configured provider: its discovery state and its key cache.
type issuer struct {
	url       string
	audiences []string
	client    *http.Client
	timing    timing
	now       func() time.Time
	flight    singleflight.Group

	mu sync.Mutex
	// jwksURL is empty until discovery succeeds; then discovery is not repeated.
	jwksURL string
	// nextDiscovery is when discovery may be tried again after a failure; backoff is
	// the wait after the next failure; discoveryErr is the last failure.
	nextDiscovery time.Time
	backoff       time.Duration
	discoveryErr  error
	// keys are the last fetched keys (fetched at fetched; zero before any fetch).
	keys    []jose.JSONWebKey
	fetched time.Time
	// static is set for an issuer configured with its keys (IssuerConfig.Keys): keys are
	// those and never fetched.
	static bool
}

func newIssuer(ic IssuerConfig, client *http.Client, t timing, now func() time.Time) (*issuer, error) {
	iss := &issuer{url: ic.URL, audiences: ic.Audiences, client: client, timing: t, now: now}
	if len(ic.Keys) > 0 {
		keys := usableKeys(ic.Keys)
		if len(keys) == 0 {
			return nil, fmt.Errorf("issuer %s: no public signing key among its keys", ic.URL)
		}
		iss.keys, iss.static = keys, true
	}
	return iss, nil
}

// key returns the public key that verifies a token signed with alg under kid (kid may be
// empty when the issuer's set holds a single fitting key). It discovers the issuer and
// fetches its keys when needed: when none are cached, when the cache is older than
// KeyMaxAge, or when kid is unknown and the last fetch is older than KeyRefreshInterval.
func (iss *issuer) key(ctx context.Context, kid, alg string) (any, error) {
	if iss.static {
		k, found, fits := pick(iss.keys, kid, alg)
		return iss.answer(k, found, fits)
	}
	jwksURL, err := iss.discover(ctx)
	if err != nil {
		return nil, err
	}
	iss.mu.Lock()
	keys, fetched := iss.keys, iss.fetched
	iss.mu.Unlock()
	now := iss.now()
	stale := fetched.IsZero() || now.Sub(fetched) >= iss.timing.maxAge
	k, found, fits := pick(keys, kid, alg)
	if !stale && (found || now.Sub(fetched) < iss.timing.refresh) {
		return iss.answer(k, found, fits)
	}
	fresh, err := iss.fetchKeys(ctx, jwksURL)
	if err != nil {
		if !fetched.IsZero() && found {
			// The provider is unreachable but the cached key still verifies: prefer
			// availability to the freshness of the cache.
			return iss.answer(k, found, fits)
		}
		return nil, err
	}
	k, found, fits = pick(fresh, kid, alg)
	return iss.answer(k, found, fits)
}

func (iss *issuer) answer(k any, found, fits bool) (any, error) {
	switch {
	case !found:
		return nil, newError(KindUnknownKey, iss.url, errors.New("no key with the token's kid"))
	case !fits:
		return nil, newError(KindAlgorithm, iss.url, errors.New("alg does not fit the key"))
	}
	return k, nil
}

// pick finds the key for kid and alg: found says a signing key has that kid (or, for an
// empty kid, that the set has exactly one key that fits), fits that its type suits alg.
func pick(keys []jose.JSONWebKey, kid, alg string) (key any, found, fits bool) {
	if kid == "" {
		var fitting []jose.JSONWebKey
		for _, k := range keys {
			if keyFits(k, alg) {
				fitting = append(fitting, k)
			}
		}
		if len(fitting) != 1 {
			return nil, false, false
		}
		return fitting[0].Key, true, true
	}
	for _, k := range keys {
		if k.KeyID == kid {
			if keyFits(k, alg) {
				return k.Key, true, true
			}
			found = true
		}
	}
	return nil, found, false
}

// discover returns the issuer's jwks_uri, running OpenID Connect discovery when it has
// not succeeded yet. After a failure it is retried only once the backoff has passed
// (doubling from RetryMin to RetryMax); meanwhile verifications fail at once with
// KindUnavailable instead of each contacting the provider.
func (iss *issuer) discover(ctx context.Context) (string, error) {
	iss.mu.Lock()
	if iss.jwksURL != "" {
		defer iss.mu.Unlock()
		return iss.jwksURL, nil
	}
	if iss.now().Before(iss.nextDiscovery) {
		defer iss.mu.Unlock()
		return "", newError(KindUnavailable, iss.url, fmt.Errorf("discovery: %w", iss.discoveryErr))
	}
	iss.mu.Unlock()
	ch := iss.flight.DoChan("discovery", func() (any, error) {
		u, err := iss.runDiscovery()
		iss.mu.Lock()
		defer iss.mu.Unlock()
		if err != nil {
			iss.backoff = min(max(2*iss.backoff, iss.timing.retryMin), iss.timing.retryMax)
			iss.nextDiscovery = iss.now().Add(iss.backoff)
			iss.discoveryErr = err
			return "", err
		}
		iss.jwksURL, iss.backoff, iss.discoveryErr = u, 0, nil
		return u, nil
	})
	select {
	case <-ctx.Done():
		return "", newError(KindUnavailable, iss.url, ctx.Err())
	case r := <-ch:
		if r.Err != nil {
			return "", newError(KindUnavailable, iss.url, fmt.Errorf("discovery: %w", r.Err))
		}
		return r.Val.(string), nil
	}
}

func (iss *issuer) runDiscovery() (string, error) {
	ctx, cancel := context.WithTimeout(oidc.ClientContext(context.Background(), iss.client), fetchTimeout)
	defer cancel()
	p, err := oidc.NewProvider(ctx, iss.url)
	if err != nil {
		return "", err
	}
	var meta struct {
		JWKSURL string `json:"jwks_uri"`
	}
	if err := p.Claims(&meta); err != nil {
		return "", err
	}
	if meta.JWKSURL == "" {
		return "", errors.New("no jwks_uri")
	}
	return meta.JWKSURL, nil
}

// fetchKeys fetches the key set, once for all concurrent callers, and caches it.
func (iss *issuer) fetchKeys(ctx context.Context, jwksURL string) ([]jose.JSONWebKey, error) {
	ch := iss.flight.DoChan("keys", func() (any, error) {
		keys, err := iss.runFetch(jwksURL)
		iss.mu.Lock()
		defer iss.mu.Unlock()
		// A failed fetch counts as a fetch for the rate limit too, so an unreachable
		// provider is not asked again for every bogus kid.
		iss.fetched = iss.now()
		if err != nil {
			if iss.keys == nil {
				iss.fetched = time.Time{}
			}
			return nil, err
		}
		iss.keys = keys
		return keys, nil
	})
	select {
	case <-ctx.Done():
		return nil, newError(KindUnavailable, iss.url, ctx.Err())
	case r := <-ch:
		if r.Err != nil {
			return nil, newError(KindUnavailable, iss.url, fmt.Errorf("fetch keys: %w", r.Err))
		}
		return r.Val.([]jose.JSONWebKey), nil
	}
}

func (iss *issuer) runFetch(jwksURL string) ([]jose.JSONWebKey, error) {
	ctx, cancel := context.WithTimeout(context.Background(), fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, jwksURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := iss.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxJWKSBytes {
		return nil, errors.New("key set too large")
	}
	return parseKeySet(body)
}

// parseKeySet reads a JWKS, keeping the public signing keys go-jose understands and
// skipping the others (encryption keys, unknown key types, symmetric keys), as RFC 7517
// section 5 asks of implementations.
func parseKeySet(body []byte) ([]jose.JSONWebKey, error) {
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("decode key set: %w", err)
	}
	var keys []jose.JSONWebKey
	for _, r := range raw.Keys {
		var k jose.JSONWebKey
		if json.Unmarshal(r, &k) != nil {
			continue
		}
		keys = append(keys, k)
	}
	return usableKeys(keys), nil
}

// usableKeys keeps the signing keys of keys, each reduced to its public half, and drops
// encryption keys and keys without a public half (symmetric ones).
func usableKeys(keys []jose.JSONWebKey) []jose.JSONWebKey {
	var out []jose.JSONWebKey
	for _, k := range keys {
		if k.Use == "enc" {
			continue
		}
		if !k.IsPublic() {
			k = k.Public()
		}
		if !k.Valid() {
			continue
		}
		out = append(out, k)
	}
	return out
}
