package svcprops

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

var testRules = []CorsRule{
	{AllowedOrigins: []string{"http://a.com", "http://b.com"}, AllowedMethods: []string{"GET", "PUT"}, AllowedHeaders: []string{"x-ms-meta-*", "Content-Type"}, ExposedHeaders: []string{"x-ms-meta-*", "x-ms-request-id"}, MaxAgeInSeconds: 500},
	{AllowedOrigins: []string{"http://a.com"}, AllowedMethods: []string{"DELETE"}, MaxAgeInSeconds: 10},
	{AllowedOrigins: []string{"*"}, AllowedMethods: []string{"GET", "MERGE"}, AllowedHeaders: []string{"*"}, MaxAgeInSeconds: 60},
}

func TestPreflight(t *testing.T) {
	tests := []struct {
		name    string
		rules   []CorsRule
		origin  string
		method  string
		headers []string
		want    http.Header
		code    azerr.Code
		status  int
	}{
		{name: "missing origin", rules: testRules, method: "GET", code: azerr.InvalidHeaderValue, status: 400},
		{name: "missing method", rules: testRules, origin: "http://a.com", code: azerr.InvalidHeaderValue, status: 400},
		{name: "missing both without rules", code: azerr.InvalidHeaderValue, status: 400},
		{name: "no rules", origin: "http://a.com", method: "GET", code: azerr.CorsPreflightFailure, status: 403},
		{name: "first rule, case-insensitive origin, exact and prefix headers", rules: testRules, origin: "HTTP://A.COM", method: "PUT", headers: []string{"x-ms-meta-abc, content-type", "X-MS-META-Z"},
			want: http.Header{"Access-Control-Allow-Origin": {"HTTP://A.COM"}, "Access-Control-Allow-Methods": {"PUT"}, "Access-Control-Allow-Headers": {"x-ms-meta-abc,content-type,X-MS-META-Z"}, "Access-Control-Max-Age": {"500"}, "Access-Control-Allow-Credentials": {"true"}}},
		{name: "no request headers", rules: testRules, origin: "http://b.com", method: "GET",
			want: http.Header{"Access-Control-Allow-Origin": {"http://b.com"}, "Access-Control-Allow-Methods": {"GET"}, "Access-Control-Max-Age": {"500"}, "Access-Control-Allow-Credentials": {"true"}}},
		{name: "header not allowed by first rule falls to wildcard rule", rules: testRules, origin: "http://a.com", method: "GET", headers: []string{"x-custom"},
			want: http.Header{"Access-Control-Allow-Origin": {"http://a.com"}, "Access-Control-Allow-Methods": {"GET"}, "Access-Control-Allow-Headers": {"x-custom"}, "Access-Control-Max-Age": {"60"}, "Access-Control-Allow-Credentials": {"true"}}},
		{name: "second rule by method", rules: testRules, origin: "http://a.com", method: "DELETE",
			want: http.Header{"Access-Control-Allow-Origin": {"http://a.com"}, "Access-Control-Allow-Methods": {"DELETE"}, "Access-Control-Max-Age": {"10"}, "Access-Control-Allow-Credentials": {"true"}}},
		{name: "rule without allowed headers refuses requested header", rules: testRules, origin: "http://a.com", method: "DELETE", headers: []string{"x-ms-version"}, code: azerr.CorsPreflightFailure, status: 403},
		{name: "method not allowed anywhere", rules: testRules, origin: "http://c.com", method: "PUT", code: azerr.CorsPreflightFailure, status: 403},
		{name: "origin not allowed", rules: testRules[:2], origin: "http://c.com", method: "GET", code: azerr.CorsPreflightFailure, status: 403},
		{name: "prefix must be a prefix", rules: testRules[:1], origin: "http://a.com", method: "GET", headers: []string{"x-ms-met"}, code: azerr.CorsPreflightFailure, status: 403},
		{name: "exact header is not a prefix", rules: testRules[:1], origin: "http://a.com", method: "GET", headers: []string{"content-type-x"}, code: azerr.CorsPreflightFailure, status: 403},
		{name: "wildcard origin", rules: testRules, origin: "https://anywhere.example", method: "MERGE",
			want: http.Header{"Access-Control-Allow-Origin": {"https://anywhere.example"}, "Access-Control-Allow-Methods": {"MERGE"}, "Access-Control-Max-Age": {"60"}, "Access-Control-Allow-Credentials": {"true"}}},
		{name: "empty header list entries ignored", rules: testRules[1:2], origin: "http://a.com", method: "DELETE", headers: []string{"", " , "},
			want: http.Header{"Access-Control-Allow-Origin": {"http://a.com"}, "Access-Control-Allow-Methods": {"DELETE"}, "Access-Control-Max-Age": {"10"}, "Access-Control-Allow-Credentials": {"true"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Preflight(tc.rules, tc.origin, tc.method, tc.headers)
			if tc.code != "" {
				wantCode(t, err, tc.code, tc.status)
				if tc.code == azerr.InvalidHeaderValue && err.(*azerr.Error).Message != "A required CORS header is not present." {
					t.Fatalf("message %q", err.(*azerr.Error).Message)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Header(); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestActualRequestHeaders(t *testing.T) {
	tests := []struct {
		name   string
		rules  []CorsRule
		origin string
		method string
		want   http.Header
	}{
		{name: "no origin", rules: testRules, method: "GET"},
		{name: "no rules", origin: "http://a.com", method: "GET"},
		{name: "specific rule", rules: testRules, origin: "http://B.com", method: "PUT",
			want: http.Header{"Access-Control-Allow-Origin": {"http://B.com"}, "Access-Control-Expose-Headers": {"x-ms-meta-*,x-ms-request-id"}, "Vary": {"Origin"}, "Access-Control-Allow-Credentials": {"true"}}},
		{name: "specific rule without exposed headers", rules: testRules, origin: "http://a.com", method: "DELETE",
			want: http.Header{"Access-Control-Allow-Origin": {"http://a.com"}, "Vary": {"Origin"}, "Access-Control-Allow-Credentials": {"true"}}},
		{name: "wildcard rule", rules: testRules, origin: "http://z.com", method: "GET",
			want: http.Header{"Access-Control-Allow-Origin": {"*"}}},
		{name: "rules exist, none matches", rules: testRules, origin: "http://z.com", method: "DELETE",
			want: http.Header{"Vary": {"Origin"}}},
		{name: "origin list containing * is not a wildcard rule", rules: []CorsRule{{AllowedOrigins: []string{"http://a.com", "*"}, AllowedMethods: []string{"GET"}}}, origin: "http://q.com", method: "GET",
			want: http.Header{"Access-Control-Allow-Origin": {"http://q.com"}, "Vary": {"Origin"}, "Access-Control-Allow-Credentials": {"true"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ActualRequestHeaders(tc.rules, tc.origin, tc.method); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}
