package odata

import (
	"fmt"
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
)

const benchFilter = "PartitionKey eq 'customers' and RowKey ge 'empid_000100' and RowKey le 'empid_000199' " +
	"and (Age gt 30 or LastName eq 'O''Neil') and not IsActive and Joined ge datetime'2020-01-01T00:00:00Z'"

func BenchmarkParse(b *testing.B) {
	for _, c := range []struct{ name, filter string }{
		{"point", "PartitionKey eq 'customers' and RowKey eq 'empid_000150'"},
		{"complex", benchFilter},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.filter)))
			for b.Loop() {
				if _, err := Parse(c.filter); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchProps is a 12-property entity; the filters read one or two of them.
func benchProps() []byte {
	var props []entity.Property
	for i := range 8 {
		props = append(props, entity.Property{Name: fmt.Sprintf("Field%d", i), Value: entity.StringValue("some value of moderate length")})
	}
	props = append(props,
		entity.Property{Name: "Age", Value: entity.Int32Value(42)},
		entity.Property{Name: "LastName", Value: entity.StringValue("Smith")},
		entity.Property{Name: "IsActive", Value: entity.BoolValue(false)},
		entity.Property{Name: "Joined", Value: entity.Value{Type: entity.DateTime, Int: 637_000_000_000_000_000}},
	)
	return entity.AppendProps(nil, props)
}

func BenchmarkMatchEncoded(b *testing.B) {
	enc := benchProps()
	for _, c := range []struct{ name, filter string }{
		{"keys", "PartitionKey eq 'p' and RowKey ge 'a' and RowKey lt 'z'"},
		{"int", "Age gt 30"},
		{"string", "LastName eq 'Smith'"},
		{"two", "Age gt 30 and LastName eq 'Smith'"},
		{"complex", benchFilter},
	} {
		f := MustParse(c.filter)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.MatchEncoded("customers", "empid_000150", 0, enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkMatch(b *testing.B) {
	props, _ := entity.DecodeProps(benchProps())
	e := entity.Entity{PartitionKey: "customers", RowKey: "empid_000150", Props: props}
	f := MustParse("Age gt 30 and LastName eq 'Smith'")
	b.ReportAllocs()
	for b.Loop() {
		f.Match(&e, 0)
	}
}
