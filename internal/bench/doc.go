// Package bench is the whole-server load generator behind `cerulean bench`.
//
// It runs the partition stress test that Azure's Table Storage partitioning
// guide prescribes — create a test table, load it, drive peak load (at one
// partition with HotPartition), and compare the result with the target —
// against any endpoint that speaks the Azure Table REST API: Cerulean,
// Azurite, or real Azure. By default it talks through the official Go SDK
// (aztables) rather than hand-built requests, so the numbers are what an
// ordinary application would see, including the SDK's own client-side cost,
// and so a server that only works for the bench's own requests cannot pass.
//
// On a machine the server shares, the SDK's cost hides the server's: the Go
// SDK spends more CPU per request than Cerulean does. Options.Client
// ClientRaw sends the same requests (same URLs, headers, JSON and $batch
// layout) with the bench's own HTTP/1.1 client (raw.go), which costs a
// fraction of that. Options.Floor measures what the machine's HTTP stack
// allows at all: each workload runs again against an in-process server that
// replays the measured server's answers without doing any work (floor.go),
// and each result carries its ratio to that floor. Options.DurableFloor adds,
// for the write workloads, the floor made durable: it syncs each write to a log
// on the server's disk before answering (durable.go), the least any server that
// acknowledges only synced writes does. Options.EngineFloor adds the floor
// storing each write in Cerulean's own embedded engine before answering
// (enginefloor.go): the engine's whole work without the protocol's, which
// splits the server's distance from the durable floor into the engine's share
// and the protocol layer's. Options.Rounds repeats
// each workload and reports the median; Options.LatencyAt adds as many rounds
// paced at a fraction of the measured rate, for latency at a given load.
//
// Each workload runs for Options.Duration with Options.Workers goroutines
// (scan: at most 4), each with one request in flight:
//
//   - insert: AddEntity of new entities with unique keys.
//   - read:   GetEntity of random preloaded entities.
//   - upsert: UpsertEntity in its default mode (Merge: the InsertOrMerge
//     operation, PATCH without If-Match) of random preloaded entities, each
//     with the properties it was preloaded with: an update in place, last
//     writer wins, what the SDKs' UpsertEntity costs on existing entities.
//   - update: every worker increments one shared counter entity with
//     GetEntity then UpdateEntity(Replace, If-Match: etag), retrying on 412.
//     Afterwards the counter must equal the number of successful
//     increments; any difference is a lost or phantom update, reported as an
//     error and returned by Run.
//   - query:  the partition-query workload: reads of whole preloaded
//     partitions (PartitionKey eq '…', about 200 entities each), following
//     continuation tokens; entities/s counts entities returned. A read that
//     returns fewer entities than were preloaded into the partition counts as
//     an error.
//   - scan:   the full-scan workload: a filtered scan of every preloaded
//     entity for the 1% whose Ratio (a Double) is below 0.01 —
//     "PartitionKey ge 'r' and PartitionKey lt 's' and Ratio lt 0.01",
//     following continuation tokens. No key narrows it: the server must
//     examine every preloaded entity. The key bounds only fence off the rows
//     that other workloads write, so that the entities examined per scan are
//     known; with --workloads scan alone they cover the whole table.
//     entities/s counts entities EXAMINED (Preload × completed scans / time);
//     Notes give the entities returned. At most 4 scans run at once, since
//     each is long and every scan in flight at the end must finish. A scan
//     that returns fewer than the preload's matches counts as an error.
//   - batch:  100-entity insert transactions within one partition; skipped
//     (not failed) when the server rejects the first one.
//
// Measurement choices:
//
//   - SDK retries are off for the measured operations, so a throttled or
//     failed request is counted once as an error and latencies are those of
//     single attempts. Setup and teardown (table create/delete, preload,
//     verification reads) keep the SDK's default retries.
//   - All clients share one http.Client whose transport keeps Workers+8 idle
//     connections per host; the default of two would make most requests
//     open a fresh connection and measure TCP setup instead of the server.
//   - Latency percentiles come from a fixed-size log-linear histogram
//     (≤1.6% error), so memory does not grow with run length.
//   - Each workload writes into its own key space (partition prefixes i, r,
//     counter, b) tagged with a per-run ID, so workloads do not disturb one
//     another and a reused table does not cause key conflicts.
package bench
