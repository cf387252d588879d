package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// TableSettings are a table's Cerulean settings as the REST extension carries them
// (docs/compatibility.md "Elastic tables: settings on the wire"). The zero value is a standard table.
type TableSettings struct {
	// Elastic marks an elastic table (time-to-live, bulk writes).
	Elastic bool `json:"Elastic"`
	// DefaultTimeToLive is the table's default time-to-live: 0 off, -1 on without a
	// default (only entities with their own TTL expire), or seconds (1 … 2^31−1).
	DefaultTimeToLive int32 `json:"DefaultTimeToLive,omitempty"`
	// TimeToLiveProperty names the per-entity TTL property; empty is the server's
	// default (TTLInSeconds).
	TimeToLiveProperty string `json:"TimeToLiveProperty,omitempty"`
	// ChangeFeedRetention turns the table's change feed on and keeps its records that
	// many seconds (1 … 2^31−1); 0 is off (docs/change-feed.md).
	ChangeFeedRetention int32 `json:"ChangeFeedRetention,omitempty"`
	// Indexes are an elastic table's secondary indexes (docs/indexes-design.md). A
	// settings change replaces them with these, so a change of other settings sends back
	// the ones it read.
	Indexes []Index `json:"Indexes,omitempty"`
}

// Index is a secondary index of an elastic table.
type Index struct {
	// Name names the index: letters and digits, starting with a letter.
	Name string `json:"Name"`
	// Properties are the properties it orders by, the first first (1 to 4).
	Properties []string `json:"Properties"`
	// Unique: no two entities hold equal values in all of Properties.
	Unique bool `json:"Unique,omitempty"`
	// State is the server's: building (writes maintain the index while a background
	// build adds the entities stored before it was declared), ready (queries may use
	// it) or failed (a unique index whose build met one value twice; never used).
	// State, Progress and Failure are ignored in a request.
	State string `json:"State,omitempty"`
	// Progress is the server's, while building: how many of the table's rows the build
	// has passed.
	Progress int64 `json:"Progress,omitempty"`
	// Failure is the server's, once failed: why (the entities holding one value).
	Failure string `json:"Failure,omitempty"`
}

// Table is a table's name (in the case it was created with) and settings.
type Table struct {
	Name string
	TableSettings
}

// tableJSON is the table object of the Create Table body, the settings endpoint and a
// Query Tables answer with $select.
type tableJSON struct {
	TableName string `json:"TableName"`
	TableSettings
}

// Error is an error answer of the service: its HTTP status, its error code
// (x-ms-error-code or the body's) and its message.
type Error struct {
	Status  int
	Code    string
	Message string
}

// Error is one line: status, code and message, without the request id and time lines
// the service appends to every message.
func (e *Error) Error() string {
	var parts []string
	for _, l := range strings.Split(e.Message, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "RequestId:") && !strings.HasPrefix(l, "Time:") {
			parts = append(parts, l)
		}
	}
	msg := strings.Join(parts, " ")
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.Code == "" {
		return fmt.Sprintf("%d: %s", e.Status, msg)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, msg)
}

// ResponseError returns nil for a 2xx response and otherwise an *Error read from it
// (the OData JSON error body, or the status alone when the body is not one). It reads
// the body of an error response but never closes it.
func ResponseError(resp *http.Response) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return errorOf(resp.StatusCode, resp.Header, b)
}

// errorOf is the *Error of a failed answer (a response or a batch's sub-response): its
// status, x-ms-error-code, and the code and message of its OData JSON error body when it
// has one (the header's code wins).
func errorOf(status int, h http.Header, b []byte) *Error {
	e := &Error{Status: status, Code: h.Get("x-ms-error-code")}
	var body struct {
		Err struct {
			Code    string `json:"code"`
			Message struct {
				Value string `json:"value"`
			} `json:"message"`
		} `json:"odata.error"`
	}
	if json.Unmarshal(b, &body) == nil {
		if e.Code == "" {
			e.Code = body.Err.Code
		}
		e.Message = body.Err.Message.Value
	}
	return e
}

// call sends a request and decodes a JSON answer into out (when non-nil), returning an
// *Error for an error answer.
func (c *Client) call(ctx context.Context, method, path string, query url.Values, header http.Header, body []byte, out any) (http.Header, error) {
	resp, err := c.Do(ctx, method, path, query, header, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if err := ResponseError(resp); err != nil {
		return nil, err
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return nil, fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Header, nil
}

// CreateTable creates a table. With nil settings the body has the table name only, as
// the SDKs send it, and the server's --elastic-tables rules decide; otherwise the body
// carries the settings (Elastic always, the others when set) and they decide.
func (c *Client) CreateTable(ctx context.Context, name string, settings *TableSettings) error {
	var body []byte
	if settings == nil {
		body, _ = json.Marshal(struct {
			TableName string `json:"TableName"`
		}{name})
	} else {
		body, _ = json.Marshal(tableJSON{name, *settings})
	}
	h := http.Header{"Prefer": {"return-no-content"}}
	_, err := c.call(ctx, http.MethodPost, "Tables", nil, h, body, nil)
	return err
}

// GetTableSettings reads a table's settings (GET /{table}?comp=properties).
func (c *Client) GetTableSettings(ctx context.Context, name string) (Table, error) {
	var t tableJSON
	if _, err := c.call(ctx, http.MethodGet, url.PathEscape(name), url.Values{"comp": {"properties"}}, nil, nil, &t); err != nil {
		return Table{}, err
	}
	return Table{t.TableName, t.TableSettings}, nil
}

// SetTableSettings replaces a table's settings (PUT /{table}?comp=properties). They apply
// to later writes; entities keep the expiry they were written with.
func (c *Client) SetTableSettings(ctx context.Context, name string, settings TableSettings) error {
	body, _ := json.Marshal(settings)
	_, err := c.call(ctx, http.MethodPut, url.PathEscape(name), url.Values{"comp": {"properties"}}, nil, body, nil)
	return err
}

// ListTables lists every table of the account, following continuations. With
// withSettings the query selects the settings members ($select); without it the
// settings are left zero, as the SDKs see tables.
func (c *Client) ListTables(ctx context.Context, withSettings bool) ([]Table, error) {
	var out []Table
	next := ""
	h := http.Header{"Accept": {"application/json;odata=nometadata"}}
	for {
		q := url.Values{}
		if withSettings {
			q.Set("$select", "TableName,Elastic,DefaultTimeToLive,TimeToLiveProperty,ChangeFeedRetention,Indexes")
		}
		if next != "" {
			q.Set("NextTableName", next)
		}
		var page struct {
			Value []tableJSON `json:"value"`
		}
		rh, err := c.call(ctx, http.MethodGet, "Tables", q, h, nil, &page)
		if err != nil {
			return nil, err
		}
		for _, t := range page.Value {
			out = append(out, Table{t.TableName, t.TableSettings})
		}
		if next = rh.Get("x-ms-continuation-NextTableName"); next == "" {
			return out, nil
		}
	}
}
