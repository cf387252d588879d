package storage

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

func TestValidateIndexes(t *testing.T) {
	ix := func(name string, props ...string) IndexDef { return IndexDef{Name: name, Properties: props} }
	elastic := func(defs ...IndexDef) TableSettings { return TableSettings{Elastic: true, Indexes: defs} }
	many := make([]IndexDef, MaxIndexes+1)
	for i := range many {
		many[i] = ix("I"+strings.Repeat("x", i), "P")
	}
	for _, tc := range []struct {
		s    TableSettings
		want string // a part of the message; "" for valid
	}{
		{elastic(ix("ByEmail", "Email")), ""},
		{elastic(ix("ByCustDate", "CustomerId", "OrderDate"), IndexDef{Name: "Email2", Properties: []string{"Email"}, Unique: true}), ""},
		{elastic(many[:MaxIndexes]...), ""},
		{elastic(IndexDef{Name: "A", Properties: []string{"P"}, ID: 3, State: IndexReady}), ""},
		{TableSettings{Indexes: []IndexDef{ix("A", "P")}}, "elastic tables only"},
		{elastic(many...), "at most 8 indexes"},
		{elastic(ix("", "P")), "not valid"},
		{elastic(ix("1st", "P")), "not valid"},
		{elastic(ix("By_Email", "P")), "not valid"},
		{elastic(ix(strings.Repeat("a", MaxIndexNameLen+1), "P")), "not valid"},
		{elastic(ix(strings.Repeat("a", MaxIndexNameLen), "P")), ""},
		{elastic(ix("A", "P"), ix("a", "Q")), "declared twice"},
		{elastic(ix("A")), "1 to 4 properties"},
		{elastic(ix("A", "P", "Q", "R", "S", "T")), "1 to 4 properties"},
		{elastic(ix("A", "RowKey")), "not an indexable property"},
		{elastic(ix("A", "Timestamp")), "not an indexable property"},
		{elastic(ix("A", "P", "P")), "twice"},
		{elastic(ix("A", "1P")), "not a valid property name"},
		{elastic(IndexDef{Name: "A", Properties: []string{"P"}, State: "done"}), "none of building"},
	} {
		err := tc.s.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("Validate(%+v) = %v, want nil", tc.s.Indexes, err)
			}
			continue
		}
		var ae *azerr.Error
		if !errors.As(err, &ae) || ae.Code != azerr.InvalidInput || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want InvalidInput saying %q", tc.s.Indexes, err, tc.want)
		}
	}
}

// TestIndexSettingsRoundTrip: declarations survive the catalogue's encoding, and a table
// with only indexes is not standard.
func TestIndexSettingsRoundTrip(t *testing.T) {
	s := TableSettings{Elastic: true, IndexIDs: 2, Indexes: []IndexDef{
		{Name: "ByEmail", Properties: []string{"Email"}, Unique: true, ID: 1, State: IndexReady},
		{Name: "ByDate", Properties: []string{"Customer", "Date"}, ID: 2, State: IndexBuilding},
	}}
	back, err := UnmarshalSettings(MarshalSettings(s))
	if err != nil || !back.Equal(s) {
		t.Fatalf("round trip = %+v, %v; want %+v", back, err, s)
	}
	b, _ := json.Marshal(s)
	if !strings.Contains(string(b), `"indexes":[{"name":"ByEmail","properties":["Email"],"unique":true,"id":1,"state":"ready"}`) {
		t.Fatalf("stored form %s", b)
	}
	if (TableSettings{IndexIDs: 1}).IsStandard() || s.IsStandard() || !(TableSettings{}).IsStandard() {
		t.Fatal("IsStandard wrong about indexes")
	}
	other := s
	other.Indexes = append([]IndexDef(nil), s.Indexes...)
	other.Indexes[1].State = IndexReady
	if other.Equal(s) {
		t.Fatal("Equal ignores an index's state")
	}
}

// TestAssignIndexIDs: kept definitions keep their ids and states, new ones take ids
// above every id ever handed out, and nothing the caller says about ids counts.
func TestAssignIndexIDs(t *testing.T) {
	a := IndexDef{Name: "A", Properties: []string{"P"}}
	b := IndexDef{Name: "B", Properties: []string{"Q", "R"}, Unique: true}
	s1 := AssignIndexIDs(TableSettings{}, TableSettings{Elastic: true, Indexes: []IndexDef{a, b}}, true)
	if s1.IndexIDs != 2 || s1.Indexes[0].ID != 1 || s1.Indexes[1].ID != 2 || s1.Indexes[0].State != IndexReady {
		t.Fatalf("on an empty table: %+v", s1)
	}
	// Drop A, keep B, add C: C takes 3, B keeps 2 and its state.
	c := IndexDef{Name: "C", Properties: []string{"P"}, ID: 99, State: IndexReady}
	s2 := AssignIndexIDs(s1, TableSettings{Elastic: true, Indexes: []IndexDef{b, c}}, false)
	if s2.IndexIDs != 3 || s2.Indexes[0].ID != 2 || s2.Indexes[0].State != IndexReady || s2.Indexes[1].ID != 3 || s2.Indexes[1].State != IndexBuilding {
		t.Fatalf("after drop and add: %+v", s2)
	}
	// A again is a new index: it never gets its old id back.
	s3 := AssignIndexIDs(s2, TableSettings{Elastic: true, Indexes: []IndexDef{a}}, false)
	if s3.IndexIDs != 4 || s3.Indexes[0].ID != 4 {
		t.Fatalf("an index declared again: %+v", s3)
	}
	// B with another definition (not unique) is a new index too.
	b2 := b
	b2.Unique = false
	s4 := AssignIndexIDs(s2, TableSettings{Elastic: true, Indexes: []IndexDef{b2}}, false)
	if s4.Indexes[0].ID != 4 {
		t.Fatalf("a redefined index: %+v", s4)
	}
	// Without indexes the mark stays.
	if s5 := AssignIndexIDs(s4, TableSettings{Elastic: true}, false); s5.IndexIDs != 4 || len(s5.Indexes) != 0 {
		t.Fatalf("indexes all dropped: %+v", s5)
	}
}
