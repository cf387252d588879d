package server

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/faults"
	"github.com/ceruleandb/cerulean/internal/table"
	"github.com/ceruleandb/cerulean/internal/throttle"
)

// The service's ServerBusy messages (docs/protocol.md §7.3): a partition over its target
// gets the general one, an account over its target the account one.
const (
	partitionBusyMessage = "The server is currently unable to receive requests. Please retry your request."
	accountBusyMessage   = "Operations per second is over the account limit."
)

// gate is the one point where the scale targets (package throttle) and injected faults
// (package faults) meet a request: every table operation's handler calls it after
// authentication and decoding, just before the table operation, with the table, the
// partition the operation addresses ("" when not one) and the entities it writes or
// reads as known then; its cost is throttle.Cost of those and the request body. Off, it
// is one nil check.
//
// Faults are drawn first, so a request failed by an injected fault costs no tokens: the
// added latency is slept (ending early if the client goes), an injected 503/500 is
// returned, reset-before closes the connection without an answer (the operation never
// runs), and reset-after and cut are noted for after the operation (afterOperation,
// cutQueryPage). Then the throttle admits or refuses.
func (s *Server) gate(rq *request, tbl, pk string, entities int) error {
	if s.faults == nil && s.throttle == nil {
		return nil
	}
	var after faults.Kind
	if s.faults != nil {
		op := s.operation(rq)
		d := s.faults.Decide(op)
		if d.Delay > 0 {
			rq.obs.Fault = faults.Latency.String()
			s.faults.Count(faults.Latency)
			t := time.NewTimer(d.Delay)
			select {
			case <-t.C:
			case <-rq.r.Context().Done():
				t.Stop()
				return rq.r.Context().Err()
			}
		}
		switch d.Kind {
		case faults.Busy, faults.Internal, faults.Timeout:
			s.injected(rq, op, d.Kind)
			return azerr.New(faultCodes[d.Kind])
		case faults.ResetBefore:
			s.injected(rq, op, d.Kind)
			rq.reset = true
			panic(http.ErrAbortHandler) // the HTTP server closes the connection, answering nothing
		case faults.ResetAfter:
			after = d.Kind
		case faults.Cut:
			if op == "QueryEntities" {
				after = d.Kind
			}
		}
		if after != faults.None {
			defer func() {
				if rq.gated || s.throttle == nil { // admitted: the operation runs
					rq.resetAfter = after == faults.ResetAfter
					rq.cutPage = after == faults.Cut
					if rq.resetAfter {
						s.injected(rq, op, after)
					} // a cut is counted when a page is cut (cutQueryPage)
				}
			}()
		}
	}
	if s.throttle == nil {
		return nil
	}
	cost := throttle.Cost(entities, rq.bytesIn)
	switch s.throttle.Admit(rq.account, tbl, pk, cost) {
	case throttle.Partition:
		rq.obs.Throttled = throttle.Partition.String()
		return azerr.Newf(azerr.ServerBusy, partitionBusyMessage)
	case throttle.Account:
		rq.obs.Throttled = throttle.Account.String()
		return azerr.Newf(azerr.ServerBusy, accountBusyMessage)
	}
	rq.gated, rq.charged, rq.gatePK = true, cost, pk
	if tbl != "" {
		rq.obs.Table = tbl
	}
	return nil
}

// faultCodes are the answers of the failure faults.
var faultCodes = map[faults.Kind]azerr.Code{
	faults.Busy:     azerr.ServerBusy,
	faults.Internal: azerr.InternalError,
	faults.Timeout:  azerr.OperationTimedOut,
}

// injected counts and logs (at debug) one injected fault and notes it for the observers.
func (s *Server) injected(rq *request, op string, k faults.Kind) {
	s.faults.Count(k)
	rq.obs.Fault = k.String()
	s.log.LogAttrs(context.Background(), slog.LevelDebug, "fault injected",
		slog.String("fault", k.String()), slog.String("op", op), slog.String("request_id", rq.id))
}

// afterOperation is called by the response writer as the answer's header goes out: a
// request drawn for reset-after has had its operation run, and now loses its connection
// instead of its answer — the "did my write happen?" case.
func (rq *request) afterOperation() {
	if rq.resetAfter {
		rq.resetAfter = false
		rq.reset = true
		panic(http.ErrAbortHandler)
	}
}

// cutQueryPage ends a page drawn for the cut fault early, as the service does at
// partition boundaries: it keeps 0 to n-1 of its n entities and continues at the next.
// A page of one entity is left whole: cut, it would be an empty page resuming where it
// began, and a query drawn for cuts every time would never end.
func (s *Server) cutQueryPage(rq *request, p *table.Page) {
	if !rq.cutPage || len(p.Records) < 2 {
		return
	}
	p.CutAt(s.faults.CutAt(len(p.Records)))
	rq.obs.PageCut = true
	s.injected(rq, "QueryEntities", faults.Cut)
}

// chargeRest charges an admitted request what it turned out to cost beyond what gate
// took: a query the entities it scanned, a read the size of what it returned. A query
// is charged to the partition its page came from, if one.
func (s *Server) chargeRest(rq *request) {
	o := &rq.obs
	entities := max(o.EntitiesRead+o.EntitiesWritten, o.EntitiesScanned, o.BatchSize)
	cost := throttle.Cost(entities, max(rq.bytesIn, rq.rw.bytesOut))
	pk := rq.gatePK
	if pk == "" {
		pk = o.QueryPartition
	}
	s.throttle.Charge(rq.account, o.Table, pk, cost-rq.charged)
}
