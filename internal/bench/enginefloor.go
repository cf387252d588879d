package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

// The engine floor (--engine-floor DIR): the floor, except that each request that changes
// data is first written into Cerulean's own storage engine — the embedded one (Pebble),
// opened in DIR with the options a server has by default — as one synced Apply of as many
// entities as the request carries: the engine's whole work for them (the existence check,
// the row locks, the encoding, the write-ahead log and its group-committed sync, the
// memtable, and in the background the flushes and compactions), and none of the
// protocol's (authentication, the multipart and JSON parsing, validation, the answer's
// encoding). Between the durable floor, which only appends a log, and the server, it
// splits what a write costs in two: engine floor ÷ durable floor is what the storage
// engine leaves of the durable floor on this machine, and server ÷ engine floor what the
// protocol layer leaves of that. A target on the server's ratio to the durable floor
// above the engine floor's own is out of reach of any protocol layer over this engine.
//
// What each request becomes, by its method (the floor reads no JSON, so the entities are
// stand-ins of the same size: the body shared out as one string property each):
//   - POST $batch: one Apply of inserts, one per operation part of the body, of new row
//     keys in one partition (a bench batch inserts new rows into one partition);
//   - POST (an insert): an insert of a new row key;
//   - PATCH or MERGE (upsert, merge): an insert-or-merge of the entity the URL names;
//   - PUT (replace, insert-or-replace): an insert-or-replace of the entity the URL names
//     (the floor keeps no versions, so an If-Match is not checked);
//   - DELETE: a delete of the entity the URL names, if it is there.
//
// The engine lives in the bench process beside the load generator, as the durable
// floor's log does; the bench then gives Go's scheduler pebble.BackgroundProcs more Ps,
// as a server does, so that flushes and compactions do not hold the ones the client
// needs. Rows written into partitions the measured server had preloaded (upsert) are new
// to the engine floor the first time: an insert where the server merged.

// engineFloorAccount and engineFloorTable name the one table the engine floor writes.
const (
	engineFloorAccount = "devstoreaccount1"
	engineFloorTable   = "enginefloor"
	// engineFloorPartitions is how many partitions single inserts and batches spread
	// over, as the bench's own keys do (Options.Partitions' default).
	engineFloorPartitions = DefaultPartitions
)

// engineLog is the engine floor's store: a Pebble engine in a directory of its own.
type engineLog struct {
	eng *pebble.Engine
	dir string
	seq atomic.Uint64 // the last row key number handed out
}

// openEngineLog opens a fresh engine in a new directory under dir with the server's
// default options and creates its table. Like a server on the embedded engine, the
// process gets pebble.BackgroundProcs more Ps (pebble.RaiseProcs).
func openEngineLog(dir string) (*engineLog, error) {
	pebble.RaiseProcs()
	d, err := os.MkdirTemp(dir, "cerulean-bench-engine-floor-")
	if err != nil {
		return nil, fmt.Errorf("engine floor: %w", err)
	}
	eng, err := pebble.Open(d, pebble.Options{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		os.RemoveAll(d)
		return nil, fmt.Errorf("engine floor: %w", err)
	}
	if err := eng.CreateTable(context.Background(), engineFloorAccount, engineFloorTable, storage.TableSettings{}); err != nil {
		eng.Close()
		os.RemoveAll(d)
		return nil, fmt.Errorf("engine floor: %w", err)
	}
	return &engineLog{eng: eng, dir: d}, nil
}

// write stores what request r with body changes (see the engine floor above) and returns
// once the engine has synced it. A delete of an entity that is not there, or any other
// mutation the engine refuses for its precondition, is not an error: the floor answers
// as the server did either way.
func (l *engineLog) write(r *http.Request, body []byte) error {
	pk, muts := l.mutations(r, body)
	if len(muts) == 0 {
		return nil
	}
	_, err := l.eng.Apply(r.Context(), engineFloorAccount, engineFloorTable, pk, muts)
	var refused *storage.ApplyError
	if err != nil && !errors.As(err, &refused) {
		return fmt.Errorf("engine floor: %w", err)
	}
	return nil
}

// mutations is what request r with body becomes: a partition key and its mutations.
func (l *engineLog) mutations(r *http.Request, body []byte) (string, []storage.Mutation) {
	path := r.URL.EscapedPath()
	if r.Method == http.MethodPost {
		n := 1
		if strings.HasSuffix(path, "/$batch") {
			n = max(1, bytes.Count(body, []byte("\nContent-Type: application/http")))
		}
		first := l.seq.Add(uint64(n)) - uint64(n) + 1
		pk := "p" + strconv.FormatUint(first%engineFloorPartitions, 10)
		muts := make([]storage.Mutation, n)
		for i := range muts {
			muts[i] = storage.Mutation{Op: storage.Insert, RowKey: rowKeyOf(first + uint64(i)), Props: share(body, i, n)}
		}
		return pk, muts
	}
	pk, rk, ok := entityKeys(path)
	if !ok {
		return "", nil
	}
	m := storage.Mutation{RowKey: rk, Props: share(body, 0, 1)}
	switch r.Method {
	case http.MethodPatch, "MERGE":
		m.Op = storage.InsertOrMerge
	case http.MethodPut:
		m.Op = storage.InsertOrReplace
	case http.MethodDelete:
		m.Op, m.Props = storage.Delete, nil
	default:
		return "", nil
	}
	return pk, []storage.Mutation{m}
}

// rowKeyOf is the engine floor's row key number n: zero-padded, so that keys handed out
// later sort later, as a bench worker's do.
func rowKeyOf(n uint64) string { return fmt.Sprintf("%012d", n) }

// share is part i of n of body as the one property of a stand-in entity.
func share(body []byte, i, n int) []entity.Property {
	part := body[i*len(body)/n : (i+1)*len(body)/n]
	return []entity.Property{{Name: "Data", Value: entity.Value{Type: entity.String, Str: string(part)}}}
}

// entityKeys reads the keys of an entity URL path (…/table(PartitionKey='a',RowKey='b')).
func entityKeys(escapedPath string) (pk, rk string, ok bool) {
	i := strings.Index(escapedPath, "(PartitionKey=")
	if i < 0 {
		return "", "", false
	}
	p, err := url.PathUnescape(escapedPath[i:])
	if err != nil {
		return "", "", false
	}
	p = strings.TrimPrefix(p, "(PartitionKey='")
	pk, rest, ok := strings.Cut(p, "',RowKey='")
	if !ok || !strings.HasSuffix(rest, "')") {
		return "", "", false
	}
	return strings.ReplaceAll(pk, "''", "'"), strings.ReplaceAll(strings.TrimSuffix(rest, "')"), "''", "'"), true
}

// close closes the engine and removes its directory.
func (l *engineLog) close() {
	l.eng.Close()
	os.RemoveAll(l.dir)
}
