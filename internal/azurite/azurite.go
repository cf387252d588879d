// Package azurite reads Azurite's table database — the LokiJS file
// __azurite_db_table__.json in Azurite's --location — so its data moves to Cerulean
// without a running Azurite: every account, table and entity, with its types and
// Timestamp.
//
// The file is one JSON document: "collections" holds "$TABLES_COLLECTION$" (one object
// per table: "account", "table") and one collection per table named
// "<account>$<table>", whose "data" objects carry the entity under "properties" as
// OData JSON with the annotations the client sent ("I64@odata.type":"Edm.Int64"), the
// keys, and "Timestamp". One quirk of Azurite's storage is undone here: an Edm.Guid
// value stored as the base64 of its text (read either way).
//
// Keys are taken as stored. Azurite stores an entity's keys as its client sent them —
// an insert's from the body, an update's, merge's or upsert's from the URL with OData's
// doubled quotes undone (TableHandler.createPersistedEntity, and
// tableStorageContext.middleware, the same in 3.31.0, 3.35.0 and 3.37.0) — and its
// queries answer the stored keys. A key with doubled quotes in a database was written so
// by its client (the Go SDK's aztables.EDMEntity doubles the quotes of the keys in the
// body it marshals, v1.4.1 entity.go prepareKey, and Azure stores them doubled too): it
// is that entity's key, which every SDK reading that Azurite sees, so it is kept.
//
// Tried with Azurite 3.37.0, 3.35.0, 3.31.0 (base64 Guids) and 3.20.1 (Guids as written),
// npm, LokiJS database version 1.5. Azurite keeps the whole database in memory and writes
// it whole, so reading it whole here costs no more than Azurite itself did.
package azurite

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/ceruleandb/cerulean/internal/edmjson"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/transfer/record"
)

// tablesCollection is the collection naming every table.
const tablesCollection = "$TABLES_COLLECTION$"

// DB is a parsed Azurite table database.
type DB struct {
	path   string
	tables []tableRef
	data   map[string][]json.RawMessage // collection name → its documents
}

type tableRef struct {
	Account string `json:"account"`
	Table   string `json:"table"`
}

// Open reads and parses the database file at path (or, given a directory, the
// __azurite_db_table__.json in it).
func Open(path string) (*DB, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = path + string(os.PathSeparator) + "__azurite_db_table__.json"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("azurite database: %w", err)
	}
	return Parse(path, b)
}

// Parse reads a database document; name is for errors.
func Parse(name string, b []byte) (*DB, error) {
	var doc struct {
		Collections []struct {
			Name string            `json:"name"`
			Data []json.RawMessage `json:"data"`
		} `json:"collections"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("azurite database %s: not a LokiJS database: %w", name, err)
	}
	db := &DB{path: name, data: map[string][]json.RawMessage{}}
	found := false
	for _, c := range doc.Collections {
		if c.Name == tablesCollection {
			found = true
			for i, d := range c.Data {
				var t tableRef
				if err := json.Unmarshal(d, &t); err != nil || t.Account == "" || t.Table == "" {
					return nil, fmt.Errorf("azurite database %s: table entry %d has no account or table", name, i)
				}
				db.tables = append(db.tables, t)
			}
			continue
		}
		db.data[c.Name] = c.Data
	}
	if !found {
		return nil, fmt.Errorf("azurite database %s: no %s collection: is it Azurite's table database (__azurite_db_table__.json)?", name, tablesCollection)
	}
	sort.Slice(db.tables, func(i, j int) bool {
		a, b := db.tables[i], db.tables[j]
		return a.Account < b.Account || a.Account == b.Account && a.Table < b.Table
	})
	return db, nil
}

// Accounts lists the accounts that have tables.
func (db *DB) Accounts() []string {
	var out []string
	for _, t := range db.tables {
		if len(out) == 0 || out[len(out)-1] != t.Account {
			out = append(out, t.Account)
		}
	}
	return out
}

// Tables lists an account's tables, by name.
func (db *DB) Tables(account string) []string {
	var out []string
	for _, t := range db.tables {
		if t.Account == account {
			out = append(out, t.Table)
		}
	}
	return out
}

// Reader yields every entity of the account's tables, table by table, each table in
// key order (PartitionKey, RowKey), as records naming their table. An entity the
// database holds but no service would accept is an error naming it.
func (db *DB) Reader(account string) (*Reader, error) {
	tables := db.Tables(account)
	if len(tables) == 0 {
		return nil, fmt.Errorf("azurite database %s: account %q has no tables (accounts with tables: %s)", db.path, account, strings.Join(db.Accounts(), ", "))
	}
	r := &Reader{db: db, account: account, tables: tables}
	for _, t := range tables {
		r.total += int64(len(db.data[account+"$"+t]))
	}
	return r, nil
}

// Reader reads one account's entities.
type Reader struct {
	db      *DB
	account string
	tables  []string
	ti      int
	cur     []record.Record
	ci      int
	total   int64
}

// Total is the number of entities the reader yields.
func (r *Reader) Total() int64 { return r.total }

// Read returns the next record, io.EOF after the last.
func (r *Reader) Read() (record.Record, error) {
	for r.ci >= len(r.cur) {
		if r.ti >= len(r.tables) {
			return record.Record{}, io.EOF
		}
		t := r.tables[r.ti]
		r.ti++
		recs, err := r.load(t)
		if err != nil {
			return record.Record{}, err
		}
		r.cur, r.ci = recs, 0
	}
	rec := r.cur[r.ci]
	r.cur[r.ci] = record.Record{}
	r.ci++
	return rec, nil
}

func (r *Reader) load(table string) ([]record.Record, error) {
	docs := r.db.data[r.account+"$"+table]
	out := make([]record.Record, 0, len(docs))
	for i, d := range docs {
		rec, err := Entity(d)
		if err != nil {
			return nil, fmt.Errorf("azurite database: table %s, entity %d: %w", table, i, err)
		}
		rec.Table = table
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := &out[i].Entity, &out[j].Entity
		return a.PartitionKey < b.PartitionKey || a.PartitionKey == b.PartitionKey && a.RowKey < b.RowKey
	})
	return out, nil
}

// Entity converts one entity document of the database, its keys as stored.
func Entity(doc []byte) (record.Record, error) {
	var d struct {
		PartitionKey     *string         `json:"PartitionKey"`
		RowKey           *string         `json:"RowKey"`
		Properties       json.RawMessage `json:"properties"`
		LastModifiedTime string          `json:"lastModifiedTime"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return record.Record{}, fmt.Errorf("not an entity document: %w", err)
	}
	if d.PartitionKey == nil || d.RowKey == nil || len(d.Properties) == 0 {
		return record.Record{}, errors.New("not an entity document: no PartitionKey, RowKey or properties")
	}
	pk, rk := *d.PartitionKey, *d.RowKey
	props, err := fixProperties(d.Properties, pk, rk)
	if err != nil {
		return record.Record{}, fmt.Errorf("PartitionKey %q, RowKey %q: %w", pk, rk, err)
	}
	rec, err := record.FromJSON(props)
	if err != nil {
		return record.Record{}, fmt.Errorf("PartitionKey %q, RowKey %q: %s", pk, rk, record.Detail(err))
	}
	if !rec.HasTimestamp && d.LastModifiedTime != "" {
		if ticks, err := entity.ParseDateTime(d.LastModifiedTime); err == nil {
			rec.Timestamp, rec.HasTimestamp = ticks, true
		}
	}
	return rec, nil
}

// fixProperties rewrites the properties object in order: the keys as given, and Edm.Guid
// values from base64 of their text back to the text.
func fixProperties(raw []byte, pk, rk string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("properties is not an object")
	}
	type member struct {
		key string
		val json.RawMessage
	}
	var ms []member
	guids := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("properties: %w", err)
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("properties: %w", err)
		}
		if strings.HasSuffix(k, "@odata.type") && string(v) == `"Edm.Guid"` {
			guids[strings.TrimSuffix(k, "@odata.type")] = true
		}
		ms = append(ms, member{k, v})
	}
	out := []byte{'{'}
	for i, m := range ms {
		v := m.val
		switch {
		case m.key == "PartitionKey":
			v = quote(pk)
		case m.key == "RowKey":
			v = quote(rk)
		case guids[m.key]:
			var s string
			if err := json.Unmarshal(v, &s); err == nil {
				if _, err := entity.ParseGUID(s); err != nil {
					if b, err := base64.StdEncoding.DecodeString(s); err == nil {
						v = quote(string(b))
					}
				}
			}
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, quote(m.key)...)
		out = append(out, ':')
		out = append(out, v...)
	}
	return append(out, '}'), nil
}

func quote(s string) []byte { return edmjson.AppendString(nil, s) }
