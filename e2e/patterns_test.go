package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// TestDesignPatterns runs the query patterns of Azure's table design guide through the Go
// SDK: intra- and inter-partition secondary indexes (key ranges), log tail ($top on
// inverted-tick RowKeys), compound keys, heterogeneous entity types in one partition,
// "or" across partitions, continuation over unusual keys, typed filters, $select, Query
// Tables with $filter, malformed filters, and paging through 25,000 entities.
func TestDesignPatterns(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	ld := newLoader(t, srv)

	t.Run("IntraPartitionIndex", func(t *testing.T) {
		t.Parallel()
		// One partition holds employees under two RowKey schemes: "empid_<id>" and
		// "email_<address>" (the intra-partition secondary index pattern).
		c, name := newTable(t, svc)
		var rows []patRow
		for i := range 300 {
			props := map[string]any{"FirstName": fmt.Sprintf("First%03d", i), "EmployeeID": int32(i)}
			rows = append(rows,
				newPatRow(t, "Sales", fmt.Sprintf("empid_%06d", i), props),
				newPatRow(t, "Sales", fmt.Sprintf("email_first%03d@contoso.com", i), props))
		}
		// The same ids in another department, and keys on both sides of the range.
		for i := 100; i < 200; i++ {
			rows = append(rows, newPatRow(t, "Dev", fmt.Sprintf("empid_%06d", i), nil))
		}
		rows = append(rows, newPatRow(t, "Sales", "empid_", nil), newPatRow(t, "Sales", "empid_000199x", nil),
			newPatRow(t, "Sales", "empid_0001", nil), newPatRow(t, "Sales", "empid_00020", nil))
		ld.load(t, name, rows)

		want := func(pk string) []patKey {
			var w []patKey
			for i := 100; i <= 199; i++ {
				w = append(w, patKey{pk, fmt.Sprintf("empid_%06d", i)})
			}
			return w
		}
		got := queryKeys(t, c, "PartitionKey eq 'Sales' and RowKey ge 'empid_000100' and RowKey le 'empid_000199'", 0)
		requireKeys(t, "Sales empid range", got, want("Sales"))

		// Without the PartitionKey the same range reads every partition, in key order.
		got = queryKeys(t, c, "RowKey ge 'empid_000100' and RowKey le 'empid_000199'", 0)
		requireKeys(t, "empid range, all partitions", got, append(want("Dev"), want("Sales")...))

		// In a table that holds a single partition, exactly the 100.
		c1, name1 := newTable(t, svc)
		var one []patRow
		for i := range 300 {
			one = append(one, newPatRow(t, "Sales", fmt.Sprintf("empid_%06d", i), nil))
		}
		ld.load(t, name1, one)
		got = queryKeys(t, c1, "RowKey ge 'empid_000100' and RowKey le 'empid_000199'", 0)
		requireKeys(t, "single-partition table", got, want("Sales"))

		// The email index: a prefix range.
		got = queryKeys(t, c, "PartitionKey eq 'Sales' and RowKey ge 'email_first01' and RowKey lt 'email_first02'", 0)
		var w []patKey
		for i := 10; i < 20; i++ {
			w = append(w, patKey{"Sales", fmt.Sprintf("email_first%03d@contoso.com", i)})
		}
		requireKeys(t, "email prefix", got, w)

		// Paged in pages of 7, the same 100.
		got = queryKeys(t, c, "PartitionKey eq 'Sales' and RowKey ge 'empid_000100' and RowKey le 'empid_000199'", 7)
		requireKeys(t, "Sales empid range, $top=7", got, want("Sales"))
	})

	t.Run("InterPartitionIndex", func(t *testing.T) {
		t.Parallel()
		// Each employee is stored twice, in partitions "empid_<dept>" (RowKey the id) and
		// "email_<dept>" (RowKey the address): the inter-partition secondary index pattern.
		// Neighbouring partition keys test the prefix bounds: "email" and "emailZ" sort
		// before "email_", "email`x" at the exclusive upper bound.
		c, name := newTable(t, svc)
		depts := []string{"Dev", "HR", "Sales"}
		var rows []patRow
		for _, d := range depts {
			for i := range 150 {
				rows = append(rows,
					newPatRow(t, "empid_"+d, fmt.Sprintf("%06d", i), map[string]any{"Email": fmt.Sprintf("e%03d@%s.contoso.com", i, d)}),
					newPatRow(t, "email_"+d, fmt.Sprintf("e%03d@%s.contoso.com", i, d), map[string]any{"EmployeeID": fmt.Sprintf("%06d", i)}))
			}
		}
		for _, pk := range []string{"email", "emailZ", "email`x", "emaim_", "empid", "empid`"} {
			rows = append(rows, newPatRow(t, pk, "000150", nil), newPatRow(t, pk, "e150@x.contoso.com", nil))
		}
		rows = append(rows, newPatRow(t, "email_", "e999@nodept", nil))
		ld.load(t, name, rows)

		// Every email index entry: all "email_…" partitions, nothing else.
		var want []patKey
		want = append(want, patKey{"email_", "e999@nodept"})
		for _, d := range depts {
			for i := range 150 {
				want = append(want, patKey{"email_" + d, fmt.Sprintf("e%03d@%s.contoso.com", i, d)})
			}
		}
		got := queryKeys(t, c, "PartitionKey ge 'email_' and PartitionKey lt 'email`'", 0)
		requireKeys(t, "email_ partitions", got, want)
		got = queryKeys(t, c, "PartitionKey ge 'email_' and PartitionKey lt 'email`'", 7)
		requireKeys(t, "email_ partitions, $top=7", got, want)

		// An id range over the empid index, across its partitions.
		want = nil
		for _, d := range depts {
			for i := 100; i <= 119; i++ {
				want = append(want, patKey{"empid_" + d, fmt.Sprintf("%06d", i)})
			}
		}
		got = queryKeys(t, c, "PartitionKey ge 'empid_' and PartitionKey lt 'empid`' and RowKey ge '000100' and RowKey le '000119'", 0)
		requireKeys(t, "empid range across partitions", got, want)
		got = queryKeys(t, c, "PartitionKey ge 'empid_' and PartitionKey lt 'empid`' and RowKey ge '000100' and RowKey le '000119'", 7)
		requireKeys(t, "empid range across partitions, $top=7", got, want)

		// One department's email range.
		want = nil
		for i := 10; i < 20; i++ {
			want = append(want, patKey{"email_HR", fmt.Sprintf("e%03d@HR.contoso.com", i)})
		}
		got = queryKeys(t, c, "PartitionKey eq 'email_HR' and RowKey ge 'e010' and RowKey lt 'e020'", 0)
		requireKeys(t, "email_HR range", got, want)
	})

	t.Run("LogTail", func(t *testing.T) {
		t.Parallel()
		// RowKeys are DateTime.MaxValue.Ticks minus the event's ticks, zero-padded to 19
		// digits, so the newest entry sorts first and "$top=10" reads the log's tail.
		c, name := newTable(t, svc)
		const maxTicks = 3155378975999999999 // .NET DateTime.MaxValue.Ticks
		base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		inverted := func(ts time.Time) string {
			ticks := ts.UnixNano()/100 + 621355968000000000 // .NET ticks since 0001-01-01
			return fmt.Sprintf("%019d", maxTicks-ticks)
		}
		var rows []patRow
		for i := range 60 {
			ts := base.Add(time.Duration(i) * 1237 * time.Millisecond)
			rows = append(rows,
				newPatRow(t, "log_app1", inverted(ts), map[string]any{"Seq": int32(i), "Message": fmt.Sprintf("event %d", i)}),
				newPatRow(t, "log_app2", inverted(ts.Add(time.Hour)), map[string]any{"Seq": int32(1000 + i)}))
		}
		ld.load(t, name, rows)

		filter := "PartitionKey eq 'log_app1'"
		top := int32(10)
		p := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter, Top: &top})
		if !p.More() {
			t.Fatal("pager has no first page")
		}
		page, err := p.NextPage(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Entities) != 10 {
			t.Fatalf("first page of $top=10 holds %d entities, want exactly 10", len(page.Entities))
		}
		for i, b := range page.Entities {
			var e struct {
				RowKey string
				Seq    int32
			}
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatal(err)
			}
			if want := int32(59 - i); e.Seq != want {
				t.Errorf("log tail entry %d: Seq %d, want %d (newest first)", i, e.Seq, want)
			}
		}
		if !p.More() {
			t.Error("log tail: no continuation after the first 10 of 60")
		}
		// The whole log, newest first, in pages of 10.
		got := queryKeys(t, c, filter, 10)
		if len(got) != 60 || !slices.IsSortedFunc(got, func(a, b patKey) int { return strings.Compare(a.RK, b.RK) }) {
			t.Errorf("whole log: %d entries, sorted %v", len(got), slices.IsSortedFunc(got, func(a, b patKey) int { return strings.Compare(a.RK, b.RK) }))
		}
		// The same through a raw request: $top=10 answers 10 with a continuation.
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + srv.Default().Name + "/" + name + "()",
			Query: "$top=10&$filter=" + url.QueryEscape(filter)})
		requireStatus(t, r, http.StatusOK, "log tail $top=10")
		var body struct{ Value []map[string]any }
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		if len(body.Value) != 10 || body.Value[0]["Message"] != "event 59" {
			t.Errorf("raw $top=10: %d entities, first %v", len(body.Value), body.Value[0])
		}
		if r.Header.Get("x-ms-continuation-NextPartitionKey") == "" || r.Header.Get("x-ms-continuation-NextRowKey") == "" {
			t.Errorf("raw $top=10: continuation headers missing: %v", r.Header)
		}
		// "Everything since" a point in time is a RowKey upper bound.
		since := inverted(base.Add(50 * 1237 * time.Millisecond))
		got = queryKeys(t, c, "PartitionKey eq 'log_app1' and RowKey le '"+since+"'", 0)
		if len(got) != 10 {
			t.Errorf("events since #50: %d, want 10", len(got))
		}
	})

	t.Run("CompoundKeys", func(t *testing.T) {
		t.Parallel()
		// RowKey "<employee id>_<year>" (the compound key pattern): the reviews of one
		// employee are a prefix range, and keys order lexically, not numerically.
		c, name := newTable(t, svc)
		var rows []patRow
		for id := 118; id <= 125; id++ {
			for year := 2010; year <= 2014; year++ {
				rows = append(rows, newPatRow(t, "reviews", fmt.Sprintf("%06d_%d", id, year), map[string]any{"Rating": int32(id%5 + year%3)}))
			}
		}
		// Unpadded keys sort lexically: "10_2012" < "9_2012".
		rows = append(rows, newPatRow(t, "unpadded", "9_2012", nil), newPatRow(t, "unpadded", "10_2012", nil),
			newPatRow(t, "unpadded", "100_2012", nil))
		ld.load(t, name, rows)

		var want []patKey
		for year := 2010; year <= 2014; year++ {
			want = append(want, patKey{"reviews", fmt.Sprintf("000123_%d", year)})
		}
		requireKeys(t, "employee 123's reviews",
			queryKeys(t, c, "PartitionKey eq 'reviews' and RowKey ge '000123_' and RowKey lt '000123`'", 0), want)
		requireKeys(t, "employee 123, 2011–2013",
			queryKeys(t, c, "PartitionKey eq 'reviews' and RowKey ge '000123_2011' and RowKey le '000123_2013'", 2), want[1:4])
		// A compound point lookup as a query.
		requireKeys(t, "point", queryKeys(t, c, "PartitionKey eq 'reviews' and RowKey eq '000123_2012'", 0), want[2:3])
		// Employees 119–121 in 2012: a range plus a residual on the key's suffix is not
		// expressible, so read the range and check the order across ids.
		got := queryKeys(t, c, "PartitionKey eq 'reviews' and RowKey ge '000119' and RowKey lt '000122'", 0)
		if len(got) != 15 || got[0].RK != "000119_2010" || got[14].RK != "000121_2014" {
			t.Errorf("ids 119–121: %v", got)
		}
		requireKeys(t, "lexical order", queryKeys(t, c, "PartitionKey eq 'unpadded'", 0),
			[]patKey{{"unpadded", "100_2012"}, {"unpadded", "10_2012"}, {"unpadded", "9_2012"}})
	})

	t.Run("HeterogeneousEntities", func(t *testing.T) {
		t.Parallel()
		// Employees and a department entity share a partition, told apart by an EntityType
		// property; some entities have no EntityType, one has it as an Int32.
		c, name := newTable(t, svc)
		var rows []patRow
		var employees []patKey
		for i := range 20 {
			rk := fmt.Sprintf("Employee_%03d", i)
			rows = append(rows, newPatRow(t, "Sales", rk, map[string]any{"EntityType": "Employee", "FirstName": fmt.Sprintf("F%d", i), "Salary": int32(40000 + 1000*i)}))
			employees = append(employees, patKey{"Sales", rk})
		}
		rows = append(rows,
			newPatRow(t, "Sales", "Department", map[string]any{"EntityType": "Department", "DepartmentName": "Sales", "EmployeeCount": int32(20)}),
			newPatRow(t, "Sales", "Legacy_001", map[string]any{"FirstName": "NoType"}),
			newPatRow(t, "Sales", "Legacy_002", map[string]any{"Salary": int32(99999)}),
			newPatRow(t, "Sales", "Numeric", map[string]any{"EntityType": int32(1)}),
			newPatRow(t, "Dev", "Department", map[string]any{"EntityType": "Department", "DepartmentName": "Dev"}),
			newPatRow(t, "Dev", "Employee_000", map[string]any{"EntityType": "Employee"}))
		ld.load(t, name, rows)

		requireKeys(t, "EntityType eq 'Employee'",
			queryKeys(t, c, "PartitionKey eq 'Sales' and EntityType eq 'Employee'", 0), employees)
		requireKeys(t, "EntityType eq 'Employee', $top=3",
			queryKeys(t, c, "PartitionKey eq 'Sales' and EntityType eq 'Employee'", 3), employees)
		// ne matches only entities that have the property with a comparable value.
		requireKeys(t, "EntityType ne 'Employee'",
			queryKeys(t, c, "PartitionKey eq 'Sales' and EntityType ne 'Employee'", 0), []patKey{{"Sales", "Department"}})
		requireKeys(t, "EntityType ne 'Nothing' (table-wide)",
			queryKeys(t, c, "EntityType ne 'Nothing'", 0), append([]patKey{{"Dev", "Department"}, {"Dev", "Employee_000"}, {"Sales", "Department"}}, employees...))
		requireKeys(t, "departments", queryKeys(t, c, "EntityType eq 'Department'", 0),
			[]patKey{{"Dev", "Department"}, {"Sales", "Department"}})
		// A property only employees (and one legacy row) have.
		want := append(slices.Clone(employees[15:]), patKey{"Sales", "Legacy_002"})
		slices.SortFunc(want, func(a, b patKey) int { return strings.Compare(a.RK, b.RK) })
		requireKeys(t, "Salary ge 55000", queryKeys(t, c, "PartitionKey eq 'Sales' and Salary ge 55000", 0), want)
		// The RowKey-prefix form of the same pattern.
		requireKeys(t, "RowKey prefix Employee_",
			queryKeys(t, c, "PartitionKey eq 'Sales' and RowKey ge 'Employee_' and RowKey lt 'Employee`'", 0), employees)
		requireKeys(t, "EntityType eq 1", queryKeys(t, c, "EntityType eq 1", 0), []patKey{{"Sales", "Numeric"}})
	})

	t.Run("OrAcrossPartitions", func(t *testing.T) {
		t.Parallel()
		c, name := newTable(t, svc)
		var rows []patRow
		for _, pk := range []string{"a", "b", "c", "O'Neil", "d"} {
			for i := range 5 {
				rows = append(rows, newPatRow(t, pk, strconv.Itoa(i), map[string]any{"N": int32(i)}))
			}
		}
		ld.load(t, name, rows)
		keys := func(pk string, rks ...int) []patKey {
			var out []patKey
			for _, rk := range rks {
				out = append(out, patKey{pk, strconv.Itoa(rk)})
			}
			return out
		}
		all := []int{0, 1, 2, 3, 4}
		for _, tc := range []struct {
			filter string
			top    int32
			want   []patKey
		}{
			{"PartitionKey eq 'a' or PartitionKey eq 'c'", 0, append(keys("a", all...), keys("c", all...)...)},
			{"PartitionKey eq 'c' or PartitionKey eq 'a'", 3, append(keys("a", all...), keys("c", all...)...)},
			{"PartitionKey eq 'O''Neil' or PartitionKey eq 'd'", 0, append(keys("O'Neil", all...), keys("d", all...)...)},
			{"(PartitionKey eq 'a' and RowKey eq '2') or (PartitionKey eq 'c' and RowKey eq '1')", 0, append(keys("a", 2), keys("c", 1)...)},
			{"(PartitionKey eq 'd' and RowKey eq '4') or (PartitionKey eq 'a' and RowKey eq '0') or (PartitionKey eq 'b' and RowKey eq '3')", 1,
				append(append(keys("a", 0), keys("b", 3)...), keys("d", 4)...)},
			// and binds tighter than or.
			{"PartitionKey eq 'a' and RowKey eq '1' or PartitionKey eq 'b'", 0, append(keys("a", 1), keys("b", all...)...)},
			{"PartitionKey eq 'b' or PartitionKey eq 'a' and RowKey eq '1'", 0, append(keys("a", 1), keys("b", all...)...)},
			{"(PartitionKey eq 'a' or PartitionKey eq 'b') and RowKey ge '3'", 0, append(keys("a", 3, 4), keys("b", 3, 4)...)},
			{"(PartitionKey eq 'a' or PartitionKey eq 'd') and N lt 2", 0, append(keys("a", 0, 1), keys("d", 0, 1)...)},
			{"PartitionKey eq 'a' and RowKey ge '3' or PartitionKey eq 'c' and RowKey lt '2'", 2, append(keys("a", 3, 4), keys("c", 0, 1)...)},
			{"not (PartitionKey ne 'b') or RowKey eq '4' and PartitionKey eq 'd'", 0, append(keys("b", all...), keys("d", 4)...)},
		} {
			requireKeys(t, tc.filter, queryKeys(t, c, tc.filter, tc.top), tc.want)
		}
	})

	t.Run("PagingSpecialKeys", func(t *testing.T) {
		t.Parallel()
		// Continuation tokens must carry any key: quotes, '%', '+', spaces, non-ASCII,
		// empty strings. Every page size from 1 up returns every entity once, in order.
		c, name := newTable(t, svc)
		pks := []string{"", " ", "%", "%25", "+", "a'b", "a''", "é", "日本", "😀"}
		rks := []string{"", "'", "%2F", "+ +", "=", "é", "😀", "~"}
		var rows []patRow
		var want []patKey
		for _, pk := range pks {
			for _, rk := range rks {
				rows = append(rows, newPatRow(t, pk, rk, map[string]any{"V": int32(len(want))}))
				want = append(want, patKey{pk, rk})
			}
		}
		ld.load(t, name, rows)
		slices.SortFunc(want, func(a, b patKey) int {
			if a.PK != b.PK {
				return strings.Compare(a.PK, b.PK)
			}
			return strings.Compare(a.RK, b.RK)
		})
		for _, top := range []int32{1, 2, 3, 7, 1000} {
			requireKeys(t, fmt.Sprintf("all, $top=%d", top), queryKeys(t, c, "V ge 0", top), want)
		}
		var sub []patKey
		for _, k := range want {
			if k.PK == "a'b" || k.PK == "%" || k.PK == "😀" {
				sub = append(sub, k)
			}
		}
		requireKeys(t, "or of special partitions, $top=1",
			queryKeys(t, c, "PartitionKey eq 'a''b' or PartitionKey eq '%' or PartitionKey eq '😀'", 1), sub)
	})

	t.Run("TypedFilters", func(t *testing.T) {
		t.Parallel()
		c, name := newTable(t, svc)
		const big = int64(1) << 53 // Big holds 2^53+i: neighbours that collide as float64
		day0 := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
		guid := func(i int) string { return fmt.Sprintf("%08x-0000-4000-8000-%012x", 0xabc00000+i, i) }
		names := []string{"Ann", "O'Neil", "bob", "Émile", "", "ann", "100%", "Zoë", "a b", "Ann "}
		var rows []patRow
		for i := range 10 {
			when := day0.AddDate(0, 0, i).Add(time.Duration(i) * 100) // i days and i ticks
			rows = append(rows, patRow{pk: "typed", rk: fmt.Sprintf("r%d", i), body: marshal(t, map[string]any{
				"PartitionKey": "typed", "RowKey": fmt.Sprintf("r%d", i),
				"Num":            int32(i * 10),
				"Big@odata.type": "Edm.Int64", "Big": strconv.FormatInt(big+int64(i), 10),
				"When@odata.type": "Edm.DateTime", "When": when.Format("2006-01-02T15:04:05.0000000Z"),
				"Id@odata.type": "Edm.Guid", "Id": guid(i),
				"Bin@odata.type": "Edm.Binary", "Bin": base64.StdEncoding.EncodeToString([]byte{byte(i), 0xff}),
				"Ratio@odata.type": "Edm.Double", "Ratio": float64(i) + 0.5,
				"Flag": i%2 == 0,
				"Name": names[i],
			})})
		}
		before := time.Now().UTC().Add(-2 * time.Second)
		ld.load(t, name, rows)
		after := time.Now().UTC().Add(2 * time.Second)
		r := func(is ...int) []patKey {
			out := []patKey{}
			for _, i := range is {
				out = append(out, patKey{"typed", fmt.Sprintf("r%d", i)})
			}
			return out
		}
		for _, tc := range []struct {
			filter string
			want   []patKey
		}{
			// Int32.
			{"Num ge 50 and Num lt 80", r(5, 6, 7)},
			{"Num eq 0", r(0)},
			{"Num ne 0 and Num le 20", r(1, 2)},
			{"-1 lt Num and 15 gt Num", r(0, 1)},
			// Int64, compared exactly: 2^53 and 2^53+1 are one float64.
			{fmt.Sprintf("Big eq %dL", big+1), r(1)},
			{fmt.Sprintf("Big gt %dL and Big lt %dL", big, big+3), r(1, 2)},
			{fmt.Sprintf("Big ge %dl", big+8), r(8, 9)},
			{fmt.Sprintf("Big ne %dL", big), r(1, 2, 3, 4, 5, 6, 7, 8, 9)},
			// DateTime at 100 ns, in any zone and with any number of fraction digits.
			{"When ge datetime'2020-01-04T00:00:00.0000003Z'", r(3, 4, 5, 6, 7, 8, 9)},
			{"When gt datetime'2020-01-04T00:00:00.0000003Z'", r(4, 5, 6, 7, 8, 9)},
			{"When eq datetime'2020-01-04T05:30:00.0000003+05:30'", r(3)},
			{"When lt datetime'2020-01-03T00:00:00Z'", r(0, 1)},
			{"When lt datetime'2020-01-03T00:00Z'", r(0, 1)},
			{"When le datetime'2020-01-03T00:00:00.00000020Z'", r(0, 1, 2)},
			{"When eq datetime'2020-01-01T00:00:00.0Z'", r(0)},
			// Guid, any hex case.
			{"Id eq guid'" + guid(4) + "'", r(4)},
			{"Id eq guid'" + strings.ToUpper(guid(7)) + "'", r(7)},
			{"Id ne guid'" + guid(4) + "' and Num lt 30", r(0, 1, 2)},
			// Binary, both prefixes.
			{"Bin eq X'05ff'", r(5)},
			{"Bin eq binary'05FF'", r(5)},
			{"Bin ge X'0800'", r(8, 9)},
			{"Bin lt X'01'", r(0)},
			// Double.
			{"Ratio gt 6.5", r(7, 8, 9)},
			{"Ratio le 2.5", r(0, 1, 2)},
			{"Ratio eq 3.5", r(3)},
			{"Ratio ge 8.5E0 and Ratio lt 1e1", r(8, 9)},
			{"Ratio eq 4.5d", r(4)},
			// Boolean.
			{"Flag eq true", r(0, 2, 4, 6, 8)},
			{"Flag eq false and Num lt 40", r(1, 3)},
			{"Flag ne true", r(1, 3, 5, 7, 9)},
			// String: ordinal, case-sensitive, quotes doubled.
			{"Name eq 'O''Neil'", r(1)},
			{"Name eq 'Ann'", r(0)},
			{"Name ge 'a' and Name lt 'b'", r(5, 8)},
			{"Name eq ''", r(4)},
			{"Name gt 'Zz'", r(2, 3, 5, 8)},
			// Timestamp, the system DateTime property.
			{"Timestamp ge datetime'" + before.Format("2006-01-02T15:04:05.0000000Z") + "' and Timestamp lt datetime'" +
				after.Format("2006-01-02T15:04:05Z") + "'", r(0, 1, 2, 3, 4, 5, 6, 7, 8, 9)},
			{"Timestamp lt datetime'" + before.Format("2006-01-02T15:04:05Z") + "'", r()},
			{"Timestamp gt datetime'" + after.Format("2006-01-02T15:04:05.000Z") + "'", r()},
			// A type mismatch matches nothing, ne included.
			{"Num eq '10'", r()},
			{"Name ne 1", r()},
			{"Flag ne 'true'", r()},
		} {
			requireKeys(t, tc.filter, queryKeys(t, c, tc.filter, 0), tc.want)
		}
	})

	t.Run("Select", func(t *testing.T) {
		t.Parallel()
		c, name := newTable(t, svc)
		var rows []patRow
		for i := range 30 {
			rows = append(rows, patRow{pk: "sel", rk: fmt.Sprintf("%02d", i), body: marshal(t, map[string]any{
				"PartitionKey": "sel", "RowKey": fmt.Sprintf("%02d", i),
				"Name": fmt.Sprintf("n%d", i), "Age": int32(20 + i),
				"Big@odata.type": "Edm.Int64", "Big": "9223372036854775807",
				"Other": "x",
			})})
		}
		ld.load(t, name, rows)
		sel := "Name,Age,Big"
		filter := "Age ge 40"
		top := int32(4)
		p := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Select: &sel, Filter: &filter, Top: &top})
		n := 0
		for pages := 0; p.More(); pages++ {
			page, err := p.NextPage(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range page.Entities {
				e := decodeEDM(t, b)
				if len(e.Properties) != 3 || e.Properties["Age"] != int32(40+n) || e.Properties["Name"] != fmt.Sprintf("n%d", 20+n) ||
					e.Properties["Big"] != aztables.EDMInt64(math.MaxInt64) {
					t.Errorf("$select=%s entity %d: %v", sel, n, e.Properties)
				}
				n++
			}
			if pages > 10 {
				t.Fatal("runaway paging")
			}
		}
		if n != 10 {
			t.Errorf("$select with $filter=%s: %d entities, want 10", filter, n)
		}
		// A selected property the entity lacks, and the keys.
		sel = "RowKey,Missing"
		filter = "RowKey eq '07'"
		got := listAll(t, c, &aztables.ListEntitiesOptions{Select: &sel, Filter: &filter})
		if len(got) != 1 {
			t.Fatalf("$select=%s: %d entities", sel, len(got))
		}
		var m map[string]any
		if err := json.Unmarshal(got[0], &m); err != nil {
			t.Fatal(err)
		}
		if m["RowKey"] != "07" || m["Name"] != nil || m["Age"] != nil {
			t.Errorf("$select=%s: %v", sel, m)
		}
	})

	t.Run("QueryTables", func(t *testing.T) {
		t.Parallel()
		prefix := "pat" + runID
		var created []string
		for _, s := range []string{"a1", "b1", "b2", "b3", "b30", "c1", "ba"} {
			n := prefix + s
			if _, err := svc.CreateTable(ctx(t), n, nil); err != nil {
				t.Fatal(err)
			}
			created = append(created, n)
		}
		for _, tc := range []struct {
			filter string
			top    int32
			want   []string
		}{
			{"TableName ge '" + prefix + "b' and TableName lt '" + prefix + "c'", 0, []string{"b1", "b2", "b3", "b30", "ba"}},
			{"TableName ge '" + prefix + "b' and TableName lt '" + prefix + "c'", 2, []string{"b1", "b2", "b3", "b30", "ba"}},
			{"TableName gt '" + prefix + "b3' and TableName le '" + prefix + "c1'", 1, []string{"b30", "ba", "c1"}},
			{"TableName eq '" + prefix + "a1' or TableName eq '" + prefix + "c1'", 0, []string{"a1", "c1"}},
			{"TableName eq '" + prefix + "a1' or TableName eq '" + prefix + "c1'", 1, []string{"a1", "c1"}},
			{"TableName ge '" + prefix + "' and TableName lt '" + prefix + "~' and not (TableName lt '" + prefix + "b2')", 3, []string{"b2", "b3", "b30", "ba", "c1"}},
			{"TableName eq '" + prefix + "zz'", 0, nil},
		} {
			var opts aztables.ListTablesOptions
			opts.Filter = &tc.filter
			if tc.top > 0 {
				opts.Top = &tc.top
			}
			p := svc.NewListTablesPager(&opts)
			var got []string
			for pages := 0; p.More(); pages++ {
				page, err := p.NextPage(ctx(t))
				if err != nil {
					t.Fatalf("ListTables $filter=%s: %v", tc.filter, err)
				}
				if tc.top > 0 && len(page.Tables) > int(tc.top) {
					t.Errorf("ListTables $top=%d: page of %d", tc.top, len(page.Tables))
				}
				for _, tb := range page.Tables {
					got = append(got, strings.TrimPrefix(*tb.Name, prefix))
				}
				if pages > 20 {
					t.Fatal("runaway paging")
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("ListTables $filter=%s $top=%d: %v, want %v", tc.filter, tc.top, got, tc.want)
			}
		}
		for _, n := range created {
			if _, err := svc.DeleteTable(ctx(t), n, nil); err != nil {
				t.Errorf("DeleteTable(%s): %v", n, err)
			}
		}
	})

	t.Run("FilterErrors", func(t *testing.T) {
		t.Parallel()
		c, name := newTable(t, svc)
		ld.load(t, name, []patRow{newPatRow(t, "p", "r", map[string]any{"Num": int32(1)})})
		for _, filter := range []string{
			"PartitionKey eq",
			"PartitionKey eq 'a",
			"(PartitionKey eq 'a'",
			"PartitionKey eq 'a')",
			"Num eqq 1",
			"Num eq 1 and",
			"Num eq 1.5m",
			"Num eq 2147483648",  // Int32 overflow: the client must write 2147483648L
			"Num eq -2147483649", // likewise
			"Num eq 9223372036854775808L",
			"When eq datetime'2020-13-01T00:00:00Z'",
			"Id eq guid'not-a-guid'",
			"Bin eq X'abc'",
		} {
			t.Run(filter, func(t *testing.T) {
				f := filter
				_, err := listAllErr(t, c, &aztables.ListEntitiesOptions{Filter: &f})
				requireRespErr(t, err, http.StatusBadRequest, "InvalidInput")
			})
		}
		// The overflowing literal written as Int64 is fine.
		if got := queryKeys(t, c, "Num lt 2147483648L", 0); len(got) != 1 {
			t.Errorf("Num lt 2147483648L: %v", got)
		}
		// Query Tables rejects a malformed filter the same way.
		bad := "TableName eq"
		p := svc.NewListTablesPager(&aztables.ListTablesOptions{Filter: &bad})
		_, err := p.NextPage(ctx(t))
		requireRespErr(t, err, http.StatusBadRequest, "InvalidInput")
	})

	t.Run("Paging25000", func(t *testing.T) {
		t.Parallel()
		// 25,000 entities in 25 partitions of 1,000; pages of 7 straddle partitions.
		const parts, perPart = 25, 1000
		c, name := newTable(t, svc)
		rows := make([]patRow, 0, parts*perPart)
		want := make([]patKey, 0, parts*perPart)
		for p := range parts {
			pk := fmt.Sprintf("p%02d", p)
			for i := range perPart {
				rk := fmt.Sprintf("r%05d", i)
				rows = append(rows, patRow{pk: pk, rk: rk,
					body: fmt.Appendf(nil, `{"PartitionKey":%q,"RowKey":%q,"Bucket":%d}`, pk, rk, i%100)})
				want = append(want, patKey{pk, rk})
			}
		}
		start := time.Now()
		ld.load(t, name, rows)
		t.Logf("loaded %d entities in %v (%s)", len(rows), time.Since(start).Round(time.Millisecond), ld.mode())

		for _, tc := range []struct {
			filter string
			top    int32
		}{
			{"", 1000},
			{"", 7},
			{"", 0},
			// A key range over every partition plus a residual predicate.
			{"PartitionKey ge 'p' and PartitionKey lt 'q' and Bucket ge 0", 1000},
		} {
			start := time.Now()
			var opts aztables.ListEntitiesOptions
			if tc.filter != "" {
				opts.Filter = &tc.filter
			}
			if tc.top > 0 {
				opts.Top = &tc.top
			}
			maxPage := 1000
			if tc.top > 0 {
				maxPage = int(tc.top)
			}
			got := make([]patKey, 0, len(want))
			p := c.NewListEntitiesPager(&opts)
			pages := 0
			for p.More() {
				page, err := p.NextPage(ctx(t))
				if err != nil {
					t.Fatalf("$filter=%q $top=%d page %d: %v", tc.filter, tc.top, pages, err)
				}
				if len(page.Entities) > maxPage {
					t.Fatalf("$top=%d: page %d holds %d entities", tc.top, pages, len(page.Entities))
				}
				if pages == 0 && len(page.Entities) != maxPage {
					t.Errorf("$filter=%q $top=%d: first page holds %d entities, want %d", tc.filter, tc.top, len(page.Entities), maxPage)
				}
				for _, b := range page.Entities {
					got = append(got, decodeKey(t, b))
				}
				pages++
				if pages > len(want)+10 {
					t.Fatal("runaway paging")
				}
			}
			requireKeys(t, fmt.Sprintf("$filter=%q $top=%d", tc.filter, tc.top), got, want)
			t.Logf("$filter=%q $top=%d: %d entities in %d pages, %v", tc.filter, tc.top, len(got), pages,
				time.Since(start).Round(time.Millisecond))
		}
	})
}

// ---------------------------------------------------------------------------------------
// Helpers

// patKey is an entity's keys.
type patKey struct{ PK, RK string }

func (k patKey) String() string { return strconv.Quote(k.PK) + "/" + strconv.Quote(k.RK) }

// patRow is an entity to load: its keys and JSON body.
type patRow struct {
	pk, rk string
	body   []byte
}

func newPatRow(t testing.TB, pk, rk string, props map[string]any) patRow {
	m := map[string]any{"PartitionKey": pk, "RowKey": rk}
	for k, v := range props {
		m[k] = v
	}
	return patRow{pk: pk, rk: rk, body: marshal(t, m)}
}

func decodeKey(t testing.TB, b []byte) patKey {
	t.Helper()
	var k struct{ PartitionKey, RowKey string }
	if err := json.Unmarshal(b, &k); err != nil {
		t.Fatalf("decode entity %s: %v", truncate(b), err)
	}
	return patKey{k.PartitionKey, k.RowKey}
}

// queryKeys drains a filtered query (top 0: the server's page size) and returns the keys.
func queryKeys(t testing.TB, c *aztables.Client, filter string, top int32) []patKey {
	t.Helper()
	opts := &aztables.ListEntitiesOptions{Filter: &filter}
	if top > 0 {
		opts.Top = &top
	}
	p := c.NewListEntitiesPager(opts)
	var out []patKey
	for pages := 0; p.More(); pages++ {
		page, err := p.NextPage(ctx(t))
		if err != nil {
			t.Fatalf("$filter=%s $top=%d: page %d: %v", filter, top, pages, err)
		}
		if top > 0 && len(page.Entities) > int(top) {
			t.Errorf("$filter=%s $top=%d: page %d holds %d entities", filter, top, pages, len(page.Entities))
		}
		for _, b := range page.Entities {
			out = append(out, decodeKey(t, b))
		}
		if pages > 100000 {
			t.Fatalf("$filter=%s: runaway paging", filter)
		}
	}
	return out
}

// requireKeys compares a query's keys with the expected ones, in order.
func requireKeys(t testing.TB, what string, got, want []patKey) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: got %d entities, want %d", what, len(got), len(want))
	seen := map[patKey]int{}
	for i, k := range got {
		if seen[k]++; seen[k] == 2 {
			fmt.Fprintf(&b, "\n  duplicate %v at %d", k, i)
		}
	}
	wantSet := map[patKey]bool{}
	for _, k := range want {
		wantSet[k] = true
	}
	shown := 0
	for _, k := range want {
		if seen[k] == 0 && shown < 10 {
			fmt.Fprintf(&b, "\n  missing %v", k)
			shown++
		}
	}
	shown = 0
	for _, k := range got {
		if !wantSet[k] && shown < 10 {
			fmt.Fprintf(&b, "\n  unexpected %v", k)
			shown++
		}
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			fmt.Fprintf(&b, "\n  first difference at %d: got %v, want %v", i, got[i], want[i])
			break
		}
	}
	t.Error(b.String())
}

// loader writes entities as fast as the server allows: entity group transactions of up
// to 100 entities of one partition if the server accepts them (tried once per server),
// otherwise AddEntity; 16 requests in flight either way, over a client that keeps a
// connection per worker (the SDK's default keeps only 10 idle connections per host).
type loader struct {
	srv     *server
	hc      *http.Client
	mu      sync.Mutex
	probed  bool
	batches bool
}

const loadWorkers = 16

func newLoader(t *testing.T, srv *server) *loader {
	hc := &http.Client{
		Timeout: time.Minute,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 2 * loadWorkers,
			IdleConnTimeout:     time.Minute,
		},
	}
	t.Cleanup(hc.CloseIdleConnections)
	return &loader{srv: srv, hc: hc}
}

func (ld *loader) mode() string {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if ld.batches {
		return "entity group transactions"
	}
	return "AddEntity"
}

// load inserts rows into the table through a client of its own.
func (ld *loader) load(t *testing.T, table string, rows []patRow) {
	t.Helper()
	a := ld.srv.Default()
	c := newServiceClientFor(t, ld.srv.Endpoint(a.Name), a.Name, a.Key, ld.hc).NewClient(table)

	// Group rows into transactions of at most 100 rows of one partition.
	var groups [][]patRow
	byPK := map[string][]patRow{}
	var order []string
	for _, r := range rows {
		if _, ok := byPK[r.pk]; !ok {
			order = append(order, r.pk)
		}
		byPK[r.pk] = append(byPK[r.pk], r)
	}
	for _, pk := range order {
		rs := byPK[pk]
		for len(rs) > 0 {
			n := min(len(rs), 100)
			groups = append(groups, rs[:n])
			rs = rs[n:]
		}
	}

	ld.mu.Lock()
	if !ld.probed && len(groups) > 0 {
		ld.probed = true
		_, err := c.SubmitTransaction(ctx(t), actions(groups[0]), nil)
		if err == nil {
			ld.batches = true
			groups = groups[1:]
		} else {
			t.Logf("SubmitTransaction is not available (%d: %v); loading with AddEntity", statusOf(err), firstLine(err))
		}
	}
	batches := ld.batches
	ld.mu.Unlock()

	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Bool
	run := func(n int, do func(i int) error) {
		for range loadWorkers {
			wg.Go(func() {
				for !failed.Load() {
					i := int(next.Add(1) - 1)
					if i >= n {
						return
					}
					if err := do(i); err != nil {
						failed.Store(true)
						t.Errorf("loading table %s: %v", table, err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	cx := ctxFor(t, 5*time.Minute)
	if batches {
		run(len(groups), func(i int) error {
			_, err := c.SubmitTransaction(cx, actions(groups[i]), nil)
			return err
		})
	} else {
		run(len(rows), func(i int) error {
			_, err := c.AddEntity(cx, rows[i].body, nil)
			return err
		})
	}
	if failed.Load() {
		t.FailNow()
	}
}

func actions(rows []patRow) []aztables.TransactionAction {
	out := make([]aztables.TransactionAction, len(rows))
	for i, r := range rows {
		out[i] = aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: r.body}
	}
	return out
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
