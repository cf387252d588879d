package svcprops

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

// fakeService is the minimal wiring a server needs: the four XML endpoints over an
// in-memory store that keeps what Marshal* produced, as an engine would.
type fakeService struct {
	mu         sync.Mutex
	props      []byte            // MarshalProperties output
	acl        map[string][]byte // table → MarshalACL output
	lastBodies []string
	lastSync   time.Time
}

func (f *fakeService) writeErr(w http.ResponseWriter, err error) {
	e, _ := azerr.As(err)
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("x-ms-error-code", string(e.Code))
	w.WriteHeader(e.Status)
	_, _ = io.WriteString(w, `<?xml version="1.0" encoding="utf-8"?><Error><Code>`+string(e.Code)+`</Code><Message>`+e.Message+`</Message></Error>`)
}

func (f *fakeService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	f.lastBodies = append(f.lastBodies, string(body))
	w.Header().Set("Date", time.Now().UTC().Format(http.TimeFormat))
	w.Header().Set("x-ms-version", "2019-02-02")
	q := r.URL.Query()
	path := strings.Trim(r.URL.Path, "/")
	switch {
	case q.Get("restype") == "service" && q.Get("comp") == "properties" && r.Method == http.MethodGet:
		p, err := UnmarshalProperties(f.props)
		if err != nil {
			f.writeErr(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		_, _ = w.Write(AppendProperties(nil, p))
	case q.Get("restype") == "service" && q.Get("comp") == "properties" && r.Method == http.MethodPut:
		u, err := ParseProperties(body)
		if err != nil {
			f.writeErr(w, err)
			return
		}
		p, err := UnmarshalProperties(f.props)
		if err != nil {
			f.writeErr(w, err)
			return
		}
		f.props = MarshalProperties(p.Apply(u))
		w.WriteHeader(http.StatusAccepted)
	case q.Get("restype") == "service" && q.Get("comp") == "stats" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/xml")
		_, _ = w.Write(AppendStats(nil, f.lastSync))
	case q.Get("comp") == "acl" && r.Method == http.MethodGet:
		ids, err := UnmarshalACL(f.acl[path])
		if err != nil {
			f.writeErr(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		_, _ = w.Write(AppendACL(nil, ids))
	case q.Get("comp") == "acl" && r.Method == http.MethodPut:
		ids, err := ParseACL(body)
		if err != nil {
			f.writeErr(w, err)
			return
		}
		f.acl[path] = MarshalACL(ids)
		w.WriteHeader(http.StatusNoContent)
	default:
		f.writeErr(w, azerr.New(azerr.NotImplemented))
	}
}

func newFake(t *testing.T) (*fakeService, string, *aztables.ClientOptions) {
	f := &fakeService{acl: map[string][]byte{}, lastSync: time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	opts := &aztables.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}}
	return f, srv.URL + "/devstoreaccount1", opts
}

func responseCode(t *testing.T, err error) (string, int) {
	t.Helper()
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		t.Fatalf("error %v is not *azcore.ResponseError", err)
	}
	return re.ErrorCode, re.StatusCode
}

func TestSDKServiceProperties(t *testing.T) {
	f, url, opts := newFake(t)
	svc, err := aztables.NewServiceClientWithNoCredential(url, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// Never set: defaults.
	got, err := svc.GetProperties(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *got.Logging.Version != "1.0" || *got.Logging.Read || *got.HourMetrics.Enabled || got.HourMetrics.IncludeAPIs != nil || *got.MinuteMetrics.RetentionPolicy.Enabled || got.Cors != nil {
		t.Fatalf("defaults: %+v", got.ServiceProperties)
	}

	// Set everything the SDK can express.
	props := aztables.ServiceProperties{
		Logging: &aztables.Logging{Version: to.Ptr("1.0"), Delete: to.Ptr(true), Read: to.Ptr(false), Write: to.Ptr(true),
			RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(true), Days: to.Ptr[int32](5)}},
		HourMetrics: &aztables.Metrics{Version: to.Ptr("1.0"), Enabled: to.Ptr(true), IncludeAPIs: to.Ptr(true),
			RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(true), Days: to.Ptr[int32](365)}},
		MinuteMetrics: &aztables.Metrics{Enabled: to.Ptr(false), RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(false)}},
		Cors: []*aztables.CorsRule{
			{AllowedOrigins: to.Ptr("http://a.com,http://b.com"), AllowedMethods: to.Ptr("GET,PUT"), MaxAgeInSeconds: to.Ptr[int32](500),
				ExposedHeaders: to.Ptr("x-ms-meta-*"), AllowedHeaders: to.Ptr("x-ms-meta-abc")},
			{AllowedOrigins: to.Ptr("*"), AllowedMethods: to.Ptr("DELETE,GET,HEAD,MERGE,POST,OPTIONS,PUT,PATCH"), MaxAgeInSeconds: to.Ptr[int32](0),
				ExposedHeaders: to.Ptr(""), AllowedHeaders: to.Ptr("")},
		},
	}
	if _, err := svc.SetProperties(ctx, props, nil); err != nil {
		t.Fatal(err)
	}
	// What aztables v1.4.1 sends: StorageServiceProperties, children in struct-field order.
	if sent := f.lastBodies[len(f.lastBodies)-1]; !strings.Contains(sent, "<StorageServiceProperties><HourMetrics><Enabled>true</Enabled>") {
		t.Fatalf("unexpected Go SDK body: %s", sent)
	}
	got, err = svc.GetProperties(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := got.Logging
	if *l.Version != "1.0" || !*l.Delete || *l.Read || !*l.Write || !*l.RetentionPolicy.Enabled || *l.RetentionPolicy.Days != 5 {
		t.Fatalf("logging %+v", l)
	}
	h := got.HourMetrics
	if !*h.Enabled || !*h.IncludeAPIs || *h.RetentionPolicy.Days != 365 || *h.Version != "1.0" {
		t.Fatalf("hour %+v", h)
	}
	m := got.MinuteMetrics
	if *m.Enabled || m.IncludeAPIs != nil || *m.RetentionPolicy.Enabled || m.RetentionPolicy.Days != nil || *m.Version != "1.0" {
		t.Fatalf("minute %+v", m)
	}
	if len(got.Cors) != 2 {
		t.Fatalf("cors %d rules", len(got.Cors))
	}
	for i, want := range props.Cors {
		c := got.Cors[i]
		if *c.AllowedOrigins != *want.AllowedOrigins || *c.AllowedMethods != *want.AllowedMethods || *c.MaxAgeInSeconds != *want.MaxAgeInSeconds ||
			*c.ExposedHeaders != *want.ExposedHeaders || *c.AllowedHeaders != *want.AllowedHeaders {
			t.Fatalf("rule %d: %+v", i, c)
		}
	}

	// Sections the SDK omits (nil) are left unchanged.
	if _, err := svc.SetProperties(ctx, aztables.ServiceProperties{MinuteMetrics: &aztables.Metrics{Version: to.Ptr("1.0"), Enabled: to.Ptr(true), IncludeAPIs: to.Ptr(false)}}, nil); err != nil {
		t.Fatal(err)
	}
	got, err = svc.GetProperties(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !*got.MinuteMetrics.Enabled || *got.MinuteMetrics.IncludeAPIs || !*got.HourMetrics.Enabled || len(got.Cors) != 2 || !*got.Logging.Delete {
		t.Fatalf("partial update: %+v", got.ServiceProperties)
	}

	// Invalid settings come back as the SDK's ResponseError with the service code.
	bad := []struct {
		props aztables.ServiceProperties
		code  azerr.Code
	}{
		{aztables.ServiceProperties{Cors: []*aztables.CorsRule{props.Cors[0], props.Cors[0], props.Cors[0], props.Cors[0], props.Cors[0], props.Cors[0]}}, azerr.InvalidXMLDocument},
		{aztables.ServiceProperties{Cors: []*aztables.CorsRule{{AllowedOrigins: to.Ptr("*"), AllowedMethods: to.Ptr("TRACE"), MaxAgeInSeconds: to.Ptr[int32](1)}}}, azerr.InvalidXMLDocument},
		{aztables.ServiceProperties{Cors: []*aztables.CorsRule{{AllowedOrigins: to.Ptr("*"), AllowedMethods: to.Ptr("GET"), MaxAgeInSeconds: to.Ptr[int32](-1)}}}, azerr.InvalidXMLDocument},
		{aztables.ServiceProperties{HourMetrics: &aztables.Metrics{Enabled: to.Ptr(true), RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(true), Days: to.Ptr[int32](366)}}}, azerr.InvalidXMLDocument},
		{aztables.ServiceProperties{Logging: &aztables.Logging{RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(true), Days: to.Ptr[int32](0)}}}, azerr.InvalidXMLDocument},
		{aztables.ServiceProperties{MinuteMetrics: &aztables.Metrics{Enabled: to.Ptr(false), IncludeAPIs: to.Ptr(true)}}, azerr.InvalidXMLDocument},
	}
	for i, b := range bad {
		_, err := svc.SetProperties(ctx, b.props, nil)
		if code, status := responseCode(t, err); code != string(b.code) || status != 400 {
			t.Errorf("bad %d: %s %d", i, code, status)
		}
	}
	// A refused update changed nothing.
	got, err = svc.GetProperties(ctx, nil)
	if err != nil || len(got.Cors) != 2 || *got.HourMetrics.RetentionPolicy.Days != 365 {
		t.Fatalf("after refused updates: %+v %v", got.ServiceProperties, err)
	}
}

func TestSDKStatistics(t *testing.T) {
	_, url, opts := newFake(t)
	svc, err := aztables.NewServiceClientWithNoCredential(url, opts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := svc.GetStatistics(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.GeoReplication == nil || *got.GeoReplication.Status != aztables.GeoReplicationStatusLive ||
		!got.GeoReplication.LastSyncTime.Equal(time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("stats %+v", got.GeoReplication)
	}
}

func TestSDKAccessPolicy(t *testing.T) {
	f, url, opts := newFake(t)
	client, err := aztables.NewClientWithNoCredential(url+"/mytable", opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	got, err := client.GetAccessPolicy(ctx, nil)
	if err != nil || len(got.SignedIdentifiers) != 0 {
		t.Fatalf("initial: %+v %v", got, err)
	}

	// Local-zone times with nanoseconds: the SDK sends RFC 3339 with an offset and 9 digits.
	zone := time.FixedZone("X", -5*3600)
	start := time.Date(2024, 1, 2, 3, 4, 5, 123456789, zone)
	expiry := start.Add(48 * time.Hour)
	acl := []*aztables.SignedIdentifier{
		{ID: to.Ptr("full"), AccessPolicy: &aztables.AccessPolicy{Start: &start, Expiry: &expiry, Permission: to.Ptr("raud")}},
		{ID: to.Ptr("read-only"), AccessPolicy: &aztables.AccessPolicy{Permission: to.Ptr("r")}},
		{ID: to.Ptr("expiry-only"), AccessPolicy: &aztables.AccessPolicy{Expiry: &expiry}},
	}
	if _, err := client.SetAccessPolicy(ctx, &aztables.SetAccessPolicyOptions{TableACL: acl}); err != nil {
		t.Fatal(err)
	}
	// What aztables v1.4.1 sends: UTC RFC 3339 with nine fraction digits, Id after AccessPolicy.
	if sent := f.lastBodies[len(f.lastBodies)-1]; !strings.Contains(sent, "<Start>2024-01-02T08:04:05.123456789Z</Start>") {
		t.Fatalf("unexpected Go SDK body: %s", sent)
	}
	got, err = client.GetAccessPolicy(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.SignedIdentifiers) != 3 {
		t.Fatalf("got %d identifiers", len(got.SignedIdentifiers))
	}
	trunc := func(x time.Time) time.Time { return x.Truncate(100 * time.Nanosecond) }
	s0 := got.SignedIdentifiers[0]
	if *s0.ID != "full" || !s0.AccessPolicy.Start.Equal(trunc(start)) || !s0.AccessPolicy.Expiry.Equal(trunc(expiry)) || *s0.AccessPolicy.Permission != "raud" {
		t.Fatalf("full: %+v", s0.AccessPolicy)
	}
	s1 := got.SignedIdentifiers[1]
	if *s1.ID != "read-only" || s1.AccessPolicy.Start != nil || s1.AccessPolicy.Expiry != nil || *s1.AccessPolicy.Permission != "r" {
		t.Fatalf("read-only: %+v", s1.AccessPolicy)
	}
	s2 := got.SignedIdentifiers[2]
	if *s2.ID != "expiry-only" || s2.AccessPolicy.Permission != nil || !s2.AccessPolicy.Expiry.Equal(trunc(expiry)) {
		t.Fatalf("expiry-only: %+v", s2.AccessPolicy)
	}

	// Invalid permission → 400 InvalidXmlDocument (the service's code for any refused value).
	_, err = client.SetAccessPolicy(ctx, &aztables.SetAccessPolicyOptions{TableACL: []*aztables.SignedIdentifier{{ID: to.Ptr("w"), AccessPolicy: &aztables.AccessPolicy{Permission: to.Ptr("rw")}}}})
	if code, status := responseCode(t, err); code != string(azerr.InvalidXMLDocument) || status != 400 {
		t.Fatalf("bad permission: %s %d", code, status)
	}
	// Six identifiers: the service says 400 InvalidXmlDocument, which the SDK turns into its own error.
	six := []*aztables.SignedIdentifier{}
	for i := 0; i < 6; i++ {
		six = append(six, &aztables.SignedIdentifier{ID: to.Ptr(string(rune('a' + i))), AccessPolicy: &aztables.AccessPolicy{Permission: to.Ptr("r")}})
	}
	_, err = client.SetAccessPolicy(ctx, &aztables.SetAccessPolicyOptions{TableACL: six})
	if err == nil || !strings.Contains(err.Error(), "five (5) access policies") {
		t.Fatalf("six: %v", err)
	}
	if !strings.Contains(f.lastBodies[len(f.lastBodies)-1], "<SignedIdentifier>") {
		t.Fatal("six identifiers were not sent to the server")
	}

	// Setting none (the SDK sends no body) clears the policies.
	if _, err := client.SetAccessPolicy(ctx, nil); err != nil {
		t.Fatal(err)
	}
	got, err = client.GetAccessPolicy(ctx, nil)
	if err != nil || len(got.SignedIdentifiers) != 0 {
		t.Fatalf("after clear: %+v %v", got, err)
	}
}
