package client

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Version is the x-ms-version the client sends.
const Version = "2020-12-06"

// Client calls one account's table endpoint. It is safe for concurrent use.
type Client struct {
	// Endpoint is the account's table endpoint, e.g. http://127.0.0.1:10002/devstoreaccount1
	// (path-style) or https://acct.table.core.windows.net.
	Endpoint string
	Account  string
	key      []byte
	// sas, when set, is a shared access signature's query: added to every request,
	// which is then not signed with a key.
	sas  url.Values
	HTTP *http.Client
}

// New returns a client for endpoint signing with the account's base64 key.
func New(endpoint, account, key string) (*Client, error) {
	k, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		return nil, fmt.Errorf("account key: %w", err)
	}
	if _, err := url.Parse(endpoint); err != nil {
		return nil, fmt.Errorf("endpoint: %w", err)
	}
	return &Client{Endpoint: strings.TrimSuffix(endpoint, "/"), Account: account, key: k, HTTP: http.DefaultClient}, nil
}

// Credentials returns what the client authenticates with: the decoded account key, or,
// for a client without one, the shared access signature's query (encoded, without '?').
// It is for callers that sign requests themselves, such as the bench's raw HTTP client.
func (c *Client) Credentials() (key []byte, sas string) {
	if c.key != nil {
		return c.key, ""
	}
	return nil, c.sas.Encode()
}

// Do sends a signed request for path (relative to the endpoint, e.g. "mytable" or
// "Tables('mytable')") with the query and headers given, and returns the response; the
// caller closes its body. A non-nil body is sent as application/json unless header sets
// Content-Type.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, header http.Header, body []byte) (*http.Response, error) {
	u := c.Endpoint + "/" + strings.TrimPrefix(path, "/")
	if len(c.sas) > 0 {
		q := url.Values{}
		for k, vs := range query {
			q[k] = vs
		}
		for k, vs := range c.sas {
			q[k] = vs
		}
		query = q
	}
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json;odata=minimalmetadata")
	}
	req.Header.Set("x-ms-version", Version)
	req.Header.Set("DataServiceVersion", "3.0")
	if c.key != nil {
		c.Sign(req)
	} else {
		req.Header.Set("x-ms-date", time.Now().UTC().Format(http.TimeFormat))
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, redactURLError(err)
	}
	return resp, nil
}

// redactURLError takes the SAS signature out of the URL net/http puts in its errors
// ("Get \"https://…?sv=…&sig=…\": dial tcp …: connection refused"), so that a transport
// error can be printed: the data tools print every error, and their stderr lands in CI
// logs.
func redactURLError(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	c := *ue
	c.URL = RedactURL(ue.URL)
	return &c
}

// RedactURL is u with the value of its sig query parameter (a SAS signature, which grants
// what the SAS allows to whoever holds it) replaced by "REDACTED"; the other SAS fields
// (permissions, expiry, version) stay, since they explain an error. A string that is not
// a URL with a query is returned as it is.
func RedactURL(u string) string {
	base, query, ok := strings.Cut(u, "?")
	if !ok {
		return u
	}
	parts := strings.Split(query, "&")
	for i, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		if dk, err := url.QueryUnescape(k); err == nil && strings.EqualFold(dk, "sig") {
			parts[i] = k + "=REDACTED"
		}
	}
	return base + "?" + strings.Join(parts, "&")
}

// Sign adds x-ms-date and a SharedKeyLite Authorization header to req.
func (c *Client) Sign(req *http.Request) {
	date := time.Now().UTC().Format(http.TimeFormat)
	req.Header.Set("x-ms-date", date)
	resource := "/" + c.Account + req.URL.EscapedPath()
	if comp := req.URL.Query().Get("comp"); comp != "" {
		resource += "?comp=" + comp
	}
	mac := hmac.New(sha256.New, c.key)
	mac.Write([]byte(date + "\n" + resource))
	req.Header.Set("Authorization", "SharedKeyLite "+c.Account+":"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
}
