package server

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
)

// ProcessorsPath lists the processors of every stream, filtered by state:
// GET ProcessorsPath?state=…&prefix=…&after=…&limit=… (docs/server.md#processor-listing). It is
// served when the server has a processor host (Config.Processors).
const ProcessorsPath = "/v1/processors"

// MaxLagCount bounds the durable events counted for one processor's lag in the answers of
// ProcessorsPath: past it the lag is reported as at least MaxLagCount.
const MaxLagCount = 1000

// StateLagging is the filter of ProcessorsPath that keeps the processors with durable events
// left to reduce (a lag above zero), whatever their state.
const StateLagging = "lagging"

// processorListStates are the values ProcessorsPath's state filter takes: the states a host
// reports ([foldtype.ProcessorStatus].State; "paused" for the hosts that pause processors) and
// StateLagging.
var processorListStates = []string{foldtype.StateRunning, foldtype.StateCatchingUp, foldtype.StateFailing,
	foldtype.StateParked, "paused", foldtype.StateIdle, foldtype.StateUnowned, StateLagging}

// ProcessorConsumes is optionally implemented by a Processors: the event types a processor
// consumes (nil: every durable event), so that ProcessorsPath counts its lag in the events it has
// left to process. *host.Host implements it. Without it every durable event counts.
type ProcessorConsumes interface {
	// ConsumesOf returns the types processor slug consumes on the stream at path, and whether it
	// runs there.
	ConsumesOf(path, slug string) ([]string, bool)
}

// ProcessorEntry is one processor on one stream in the answer of ProcessorsPath: its status as
// InfoPath reports it, with the stream and how far behind the stream's tail it is.
type ProcessorEntry struct {
	// Stream is the store path of the stream the processor runs on.
	Stream string `json:"stream"`
	// Tail is the stream's tail (a protocol offset): after its last durable event.
	Tail string `json:"tail"`
	foldtype.ProcessorStatus
	// Lag is the number of the stream's durable events after Offset: what the processor has
	// left to reduce. Ephemeral events (live-state deltas) take offsets but are not counted.
	// It is counted up to MaxLagCount; LagAtLeast reports that there are more.
	Lag        int  `json:"lag"`
	LagAtLeast bool `json:"lagAtLeast,omitempty"`
}

// ProcessorList is the answer of ProcessorsPath: the processors of one page of streams, in path
// order and by slug, that pass the state filter; and, when more streams may follow, the cursor to
// pass as after for the next page.
type ProcessorList struct {
	// Processors is the page (never null).
	Processors []ProcessorEntry `json:"processors"`
	// Next, when not empty, is the after value of the next page: the last stream examined.
	Next string `json:"next,omitempty"`
}

// serveProcessorList answers GET ProcessorsPath: the processors of up to limit streams (default
// DefaultListLimit) whose path starts with prefix and sorts after after, those whose state is one
// of state (a comma-separated list; all when empty). It needs OpList on the prefix, as the stream
// listing does. A filter may leave a page empty while Next says that more streams follow.
func (s *Server) serveProcessorList(w http.ResponseWriter, r *http.Request) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeCoded(w, foldtype.CodeBadRequest, "malformed query string", 0)
		return
	}
	prefix := q.Get("prefix")
	authPath := prefix
	if authPath == "" {
		authPath = "/"
	}
	if !s.checkOrigin(w, r, OpList) {
		return
	}
	if _, ok := s.authorize(w, r, OpList, authPath); !ok {
		return
	}
	limit := DefaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			writeCoded(w, foldtype.CodeBadRequest, "limit must be an integer from 1 to "+strconv.Itoa(MaxListLimit), 0)
			return
		}
		limit = n
	}
	var states []string
	if v := q.Get("state"); v != "" {
		for st := range strings.SplitSeq(v, ",") {
			st = strings.TrimSpace(st)
			if !slices.Contains(processorListStates, st) {
				writeCoded(w, foldtype.CodeBadRequest, "state must be one or more of "+strings.Join(processorListStates, ", ")+", separated by commas", 0)
				return
			}
			states = append(states, st)
		}
	}
	infos, err := s.st.Protocol().ListStreams(r.Context(), stream.ListOptions{Prefix: prefix, After: q.Get("after"), Limit: min(limit+1, MaxListLimit)})
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	out := ProcessorList{Processors: []ProcessorEntry{}}
	if len(infos) > limit || (len(infos) == limit && limit == MaxListLimit) {
		infos = infos[:limit]
		out.Next = infos[len(infos)-1].Path
	}
	pl, ok := s.cfg.Processors.(ProcessorLister)
	if !ok {
		writeJSON(w, r, out)
		return
	}
	for _, info := range infos {
		if r.Context().Err() != nil {
			return // the client is gone
		}
		for _, st := range durableStatuses(clientStatuses(pl.ProcessorsOn(r.Context(), info.Path)), info.Tail) {
			e := ProcessorEntry{Stream: info.Path, Tail: FormatOffset(info.Tail), ProcessorStatus: st}
			if st.Offset < info.Tail {
				var consumes []string
				if pc, ok := s.cfg.Processors.(ProcessorConsumes); ok {
					consumes, _ = pc.ConsumesOf(info.Path, st.Slug)
				}
				e.Lag, e.LagAtLeast = s.durableLag(r.Context(), info.Path, consumes, st.Offset, info.Tail)
			}
			if matchesStates(e, states) {
				out.Processors = append(out.Processors, e)
			}
		}
	}
	writeJSON(w, r, out)
}

// matchesStates reports whether e passes the state filter states (all pass an empty one).
func matchesStates(e ProcessorEntry, states []string) bool {
	if len(states) == 0 {
		return true
	}
	for _, st := range states {
		if st == e.State || (st == StateLagging && e.Lag > 0) {
			return true
		}
	}
	return false
}

// durableStatuses caps each status's offset at the stream's durable tail, so that what people
// read counts durable events: an engine's cursor also moves over the ephemeral live-state deltas
// it publishes after the last durable event, which take offsets from the same sequence but are
// never stored, and which a later incarnation of the stream hands out again. A processor through
// every durable event is shown at the tail, never past it.
func durableStatuses(sts []foldtype.ProcessorStatus, tail int64) []foldtype.ProcessorStatus {
	for i := range sts {
		sts[i].Offset = min(sts[i].Offset, tail)
	}
	return sts
}

// durableLag counts the durable events of the stream at path with an offset in (after, tail] that
// a processor consuming consumes would process (foldtype.ConsumesEvent), reading at most
// MaxLagCount events (atLeast then reports that the count stopped there). A read that fails
// counts the offsets between instead, which may include ephemeral ones.
func (s *Server) durableLag(ctx context.Context, path string, consumes []string, after, tail int64) (n int, atLeast bool) {
	es := s.st.Events().Stream(path)
	for read := 0; read < MaxLagCount; {
		page, err := es.Read(ctx, after, min(MaxLagCount-read, stream.MaxReadLimit))
		if err != nil {
			return int(min(tail-after, MaxLagCount)), tail-after > MaxLagCount
		}
		for _, ev := range page.Events {
			if ev.Offset > tail {
				return n, false
			}
			read++
			after = ev.Offset
			if foldtype.ConsumesEvent(consumes, ev) {
				n++
			}
		}
		if page.AtHead || len(page.Events) == 0 {
			return n, false
		}
	}
	return n, after < tail
}
