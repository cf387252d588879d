package svcprops

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

const defaultPropsXML = `<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties>` +
	`<Logging><Version>1.0</Version><Delete>false</Delete><Read>false</Read><Write>false</Write><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></Logging>` +
	`<HourMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></HourMetrics>` +
	`<MinuteMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></MinuteMetrics>` +
	`<Cors /></StorageServiceProperties>`

func TestAppendPropertiesDefault(t *testing.T) {
	if got := string(AppendProperties(nil, DefaultProperties())); got != defaultPropsXML {
		t.Fatalf("\n got %s\nwant %s", got, defaultPropsXML)
	}
}

func TestAppendPropertiesFull(t *testing.T) {
	p := Properties{
		Logging:       Logging{Version: "2.0", Delete: true, Read: false, Write: true, RetentionPolicy: RetentionPolicy{Enabled: true, Days: 7}},
		HourMetrics:   Metrics{Version: "1.0", Enabled: true, IncludeAPIs: true, RetentionPolicy: RetentionPolicy{Enabled: true, Days: 365}},
		MinuteMetrics: Metrics{Version: "1.0", Enabled: true, IncludeAPIs: false},
		Cors: []CorsRule{
			{AllowedOrigins: []string{"http://a.com", "http://b.com"}, AllowedMethods: []string{"GET", "PUT"}, MaxAgeInSeconds: 500, ExposedHeaders: []string{"x-ms-meta-*"}, AllowedHeaders: []string{"x-ms-meta-abc"}},
			{AllowedOrigins: []string{"*"}, AllowedMethods: []string{"GET"}},
		},
	}
	want := `<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties>` +
		`<Logging><Version>2.0</Version><Delete>true</Delete><Read>false</Read><Write>true</Write><RetentionPolicy><Enabled>true</Enabled><Days>7</Days></RetentionPolicy></Logging>` +
		`<HourMetrics><Version>1.0</Version><Enabled>true</Enabled><IncludeAPIs>true</IncludeAPIs><RetentionPolicy><Enabled>true</Enabled><Days>365</Days></RetentionPolicy></HourMetrics>` +
		`<MinuteMetrics><Version>1.0</Version><Enabled>true</Enabled><IncludeAPIs>false</IncludeAPIs><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></MinuteMetrics>` +
		`<Cors><CorsRule><AllowedOrigins>http://a.com,http://b.com</AllowedOrigins><AllowedMethods>GET,PUT</AllowedMethods><MaxAgeInSeconds>500</MaxAgeInSeconds><ExposedHeaders>x-ms-meta-*</ExposedHeaders><AllowedHeaders>x-ms-meta-abc</AllowedHeaders></CorsRule>` +
		`<CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods><MaxAgeInSeconds>0</MaxAgeInSeconds><ExposedHeaders></ExposedHeaders><AllowedHeaders></AllowedHeaders></CorsRule></Cors>` +
		`</StorageServiceProperties>`
	got := AppendProperties(nil, p)
	if string(got) != want {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
	// Our own output parses back to the same properties.
	u, err := ParseProperties(got)
	if err != nil {
		t.Fatal(err)
	}
	if back := DefaultProperties().Apply(u); !reflect.DeepEqual(back, p) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, p)
	}
}

func TestParsePropertiesValid(t *testing.T) {
	rule := func(inner string) string {
		return `<StorageServiceProperties><Cors><CorsRule>` + inner + `</CorsRule></Cors></StorageServiceProperties>`
	}
	base := DefaultProperties()
	base.Cors = []CorsRule{{AllowedOrigins: []string{"*"}, AllowedMethods: []string{"GET"}}}
	tests := []struct {
		name string
		body string
		want Properties // base.Apply(parsed)
	}{
		{name: "empty root leaves everything", body: `<StorageServiceProperties/>`, want: base},
		{name: "go sdk root name", body: `<TableServiceProperties></TableServiceProperties>`, want: base},
		{name: "empty cors clears", body: `<StorageServiceProperties><Cors/></StorageServiceProperties>`, want: DefaultProperties()},
		{name: "logging only, fields in any order, missing fields default",
			body: `<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties><Logging><Write>TRUE</Write><Delete>0</Delete><Read>1</Read><RetentionPolicy><Days> 30 </Days><Enabled>true</Enabled></RetentionPolicy></Logging></StorageServiceProperties>`,
			want: func() Properties {
				p := base
				p.Logging = Logging{Version: "1.0", Read: true, Write: true, RetentionPolicy: RetentionPolicy{Enabled: true, Days: 30}}
				return p
			}()},
		{name: "disabled retention drops days", body: `<StorageServiceProperties><HourMetrics><Version>1.0</Version><Enabled>false</Enabled><IncludeAPIs>false</IncludeAPIs><RetentionPolicy><Enabled>false</Enabled><Days>0</Days></RetentionPolicy></HourMetrics></StorageServiceProperties>`,
			want: base},
		{name: "minute metrics enabled", body: `<StorageServiceProperties><MinuteMetrics><Version>1.0</Version><Enabled>true</Enabled><IncludeAPIs>true</IncludeAPIs><RetentionPolicy><Enabled>true</Enabled><Days>1</Days></RetentionPolicy></MinuteMetrics></StorageServiceProperties>`,
			want: func() Properties {
				p := base
				p.MinuteMetrics = Metrics{Version: "1.0", Enabled: true, IncludeAPIs: true, RetentionPolicy: RetentionPolicy{Enabled: true, Days: 1}}
				return p
			}()},
		{name: "cors lists trimmed, methods upper-cased and deduplicated, empty headers",
			body: rule(`<AllowedOrigins> http://a.com , HTTP://B.com,</AllowedOrigins><AllowedMethods>get, PATCH,MERGE,GET</AllowedMethods><AllowedHeaders></AllowedHeaders><ExposedHeaders/><MaxAgeInSeconds>0</MaxAgeInSeconds>`),
			want: func() Properties {
				p := DefaultProperties()
				p.Cors = []CorsRule{{AllowedOrigins: []string{"http://a.com", "HTTP://B.com"}, AllowedMethods: []string{"GET", "PATCH", "MERGE"}}}
				return p
			}()},
		{name: "five rules", body: `<StorageServiceProperties><Cors>` + strings.Repeat(`<CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>DELETE,GET,HEAD,MERGE,POST,OPTIONS,PUT,PATCH</AllowedMethods><MaxAgeInSeconds>5</MaxAgeInSeconds></CorsRule>`, 5) + `</Cors></StorageServiceProperties>`,
			want: func() Properties {
				p := DefaultProperties()
				r := CorsRule{AllowedOrigins: []string{"*"}, AllowedMethods: []string{"DELETE", "GET", "HEAD", "MERGE", "POST", "OPTIONS", "PUT", "PATCH"}, MaxAgeInSeconds: 5}
				p.Cors = []CorsRule{r, r, r, r, r}
				return p
			}()},
		{name: "two prefixed headers", body: rule(`<AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods><AllowedHeaders>x-ms-meta-*,x-ms-*,content-type</AllowedHeaders>`),
			want: func() Properties {
				p := DefaultProperties()
				p.Cors = []CorsRule{{AllowedOrigins: []string{"*"}, AllowedMethods: []string{"GET"}, AllowedHeaders: []string{"x-ms-meta-*", "x-ms-*", "content-type"}}}
				return p
			}()},
		{name: "utf-8 BOM and comments", body: "\xEF\xBB\xBF<?xml version=\"1.0\" encoding=\"UTF-8\"?><!-- c --><StorageServiceProperties/><!-- d -->\n", want: base},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u, err := ParseProperties([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if got := base.Apply(u); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParsePropertiesInvalid(t *testing.T) {
	cors := func(inner string) string {
		return `<StorageServiceProperties><Cors><CorsRule>` + inner + `</CorsRule></Cors></StorageServiceProperties>`
	}
	okRule := `<AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods>`
	hour := func(inner string) string {
		return `<StorageServiceProperties><HourMetrics>` + inner + `</HourMetrics></StorageServiceProperties>`
	}
	tests := []struct {
		name string
		body string
		code azerr.Code
	}{
		{"empty body", "", azerr.InvalidXMLDocument},
		{"malformed", "<StorageServiceProperties><Logging>", azerr.InvalidXMLDocument},
		{"mismatched tags", "<StorageServiceProperties></Logging>", azerr.InvalidXMLDocument},
		{"wrong root", "<SignedIdentifiers/>", azerr.InvalidXMLDocument},
		{"text", "hello", azerr.InvalidXMLDocument},
		{"utf-16 declared", `<?xml version="1.0" encoding="utf-16"?><StorageServiceProperties/>`, azerr.InvalidXMLDocument},
		{"six cors rules", `<StorageServiceProperties><Cors>` + strings.Repeat(`<CorsRule>`+okRule+`</CorsRule>`, 6) + `</Cors></StorageServiceProperties>`, azerr.InvalidXMLDocument},
		{"rule without origins", cors(`<AllowedMethods>GET</AllowedMethods>`), azerr.InvalidXMLDocument},
		{"rule without methods", cors(`<AllowedOrigins>*</AllowedOrigins>`), azerr.InvalidXMLDocument},
		{"empty origins", cors(`<AllowedOrigins> </AllowedOrigins><AllowedMethods>GET</AllowedMethods>`), azerr.InvalidXMLDocument},
		{"empty methods", cors(`<AllowedOrigins>*</AllowedOrigins><AllowedMethods></AllowedMethods>`), azerr.InvalidXMLDocument},
		{"unknown method", cors(`<AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET,TRACE</AllowedMethods>`), azerr.InvalidXMLDocument},
		{"negative max age", cors(okRule + `<MaxAgeInSeconds>-1</MaxAgeInSeconds>`), azerr.InvalidXMLDocument},
		{"non-numeric max age", cors(okRule + `<MaxAgeInSeconds>ten</MaxAgeInSeconds>`), azerr.InvalidXMLDocument},
		{"three prefixed headers", cors(okRule + `<AllowedHeaders>a*,b*,c*</AllowedHeaders>`), azerr.InvalidXMLDocument},
		{"65 origins", cors(`<AllowedOrigins>` + strings.TrimSuffix(strings.Repeat("http://a.com,", 65), ",") + `</AllowedOrigins><AllowedMethods>GET</AllowedMethods>`), azerr.InvalidXMLDocument},
		{"over-long origin", cors(`<AllowedOrigins>http://` + strings.Repeat("a", 256) + `</AllowedOrigins><AllowedMethods>GET</AllowedMethods>`), azerr.InvalidXMLDocument},
		{"days 0", hour(`<Enabled>false</Enabled><RetentionPolicy><Enabled>true</Enabled><Days>0</Days></RetentionPolicy>`), azerr.InvalidXMLDocument},
		{"days 366", hour(`<Enabled>false</Enabled><RetentionPolicy><Enabled>true</Enabled><Days>366</Days></RetentionPolicy>`), azerr.InvalidXMLDocument},
		{"enabled retention without days", hour(`<RetentionPolicy><Enabled>true</Enabled></RetentionPolicy>`), azerr.InvalidXMLDocument},
		{"disabled retention with junk days", hour(`<RetentionPolicy><Enabled>false</Enabled><Days>x</Days></RetentionPolicy>`), azerr.InvalidXMLDocument},
		{"include apis while disabled", hour(`<Enabled>false</Enabled><IncludeAPIs>true</IncludeAPIs>`), azerr.InvalidXMLDocument},
		{"bad bool", hour(`<Enabled>yes</Enabled>`), azerr.InvalidXMLDocument},
		{"bad metrics version", hour(`<Version>2.0</Version>`), azerr.InvalidXMLDocument},
		{"bad logging version", `<StorageServiceProperties><Logging><Version>3.0</Version></Logging></StorageServiceProperties>`, azerr.InvalidXMLDocument},
		{"bad logging bool", `<StorageServiceProperties><Logging><Read>yes</Read></Logging></StorageServiceProperties>`, azerr.InvalidXMLDocument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseProperties([]byte(tc.body))
			wantCode(t, err, tc.code, 400)
		})
	}
}

func TestApplyLeavesOmittedSections(t *testing.T) {
	p := DefaultProperties()
	p.Logging.Read = true
	p.Cors = []CorsRule{{AllowedOrigins: []string{"*"}, AllowedMethods: []string{"GET"}}}
	u, err := ParseProperties([]byte(`<StorageServiceProperties><HourMetrics><Enabled>true</Enabled><IncludeAPIs>false</IncludeAPIs></HourMetrics></StorageServiceProperties>`))
	if err != nil {
		t.Fatal(err)
	}
	got := p.Apply(u)
	if !got.Logging.Read || len(got.Cors) != 1 || !got.HourMetrics.Enabled || got.MinuteMetrics.Enabled {
		t.Fatalf("got %+v", got)
	}
	// Apply must not alias the update's rule slice.
	u2 := PropertiesUpdate{CorsSet: true, Cors: []CorsRule{{AllowedOrigins: []string{"x"}}}}
	got2 := p.Apply(u2)
	u2.Cors[0].MaxAgeInSeconds = 9
	if got2.Cors[0].MaxAgeInSeconds != 0 {
		t.Fatal("Apply aliases the update")
	}
}

func TestPropertiesPersistence(t *testing.T) {
	if got, err := UnmarshalProperties(nil); err != nil || !reflect.DeepEqual(got, DefaultProperties()) {
		t.Fatalf("got %+v, %v", got, err)
	}
	p := DefaultProperties()
	p.Logging = Logging{Version: "2.0", Delete: true, RetentionPolicy: RetentionPolicy{Enabled: true, Days: 3}}
	p.HourMetrics = Metrics{Version: "1.0", Enabled: true, IncludeAPIs: true}
	p.Cors = []CorsRule{{AllowedOrigins: []string{"http://a.com"}, AllowedMethods: []string{"GET"}, AllowedHeaders: []string{"x-*"}, ExposedHeaders: []string{"y"}, MaxAgeInSeconds: 60}}
	got, err := UnmarshalProperties(MarshalProperties(p))
	if err != nil || !reflect.DeepEqual(got, p) {
		t.Fatalf("got %+v, %v", got, err)
	}
	got, err = UnmarshalProperties(MarshalProperties(DefaultProperties()))
	if err != nil || !reflect.DeepEqual(got, DefaultProperties()) {
		t.Fatalf("default: got %+v, %v", got, err)
	}
	_, err = UnmarshalProperties([]byte(`{"v":2}`))
	wantCode(t, err, azerr.InternalError, 500)
}

func TestAppendStats(t *testing.T) {
	ts := time.Date(2024, 5, 1, 12, 0, 0, 999, time.FixedZone("CEST", 2*3600))
	want := `<?xml version="1.0" encoding="utf-8"?><StorageServiceStats><GeoReplication><Status>live</Status><LastSyncTime>Wed, 01 May 2024 10:00:00 GMT</LastSyncTime></GeoReplication></StorageServiceStats>`
	if got := string(AppendStats(nil, ts)); got != want {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
}
