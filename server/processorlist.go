package server

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
)

// ProcessorsPath lists the processors of every stream, filtered by state:
// GET ProcessorsPath?state=…&prefix=…&after=…&limit=… (docs/server.md#processor-listing). It is
// served when the server has a processor host (Config.Processors).
const ProcessorsPath = "/v1/processors"

// StateLagging is the filter of ProcessorsPath that keeps the processors with durable events
// left to reduce (a lag above zero), whatever their state.
const StateLagging = "lagging"

// processorListStates are the values ProcessorsPath's state filter takes: the states a host
// reports ([foldtype.ProcessorStatus].State; "paused" for the hosts that pause processors) and
// StateLagging.
var processorListStates = []string{foldtype.StateRunning, foldtype.StateCatchingUp, foldtype.StateFailing,
	foldtype.StateParked, "paused", foldtype.StateIdle, foldtype.StateUnowned, StateLagging}

// ProcessorEntry is one processor on one stream in the answer of ProcessorsPath: its status as
// InfoPath reports it, with the stream and how far behind the stream's tail it is.
type ProcessorEntry struct {
	// Stream is the store path of the stream the processor runs on.
	Stream string `json:"stream"`
	// Tail is the stream's tail (a protocol offset): after its last durable event.
	Tail string `json:"tail"`
	foldtype.ProcessorStatus
	// Lag is the number of the stream's durable events after Offset that the processor
	// consumes: what it has left to process. Ephemeral events (live-state deltas) take offsets
	// but are not counted, nor are events of types it does not consume. It is the lag the
	// metrics report (ProcessorLagger, [stream.Events.Lag]).
	Lag int64 `json:"lag"`
	// LagEstimated reports that Lag passed [stream.LagCountLimit] messages and counts the
	// positions after them as events: an upper bound.
	LagEstimated bool `json:"lagEstimated,omitempty"`
	// LagSeconds is how long the oldest of those events has waited: the store's clock now less
	// its commit time; 0 without lag.
	LagSeconds float64 `json:"lagSeconds"`
	// OldestUnprocessed is the commit time of that event; absent without lag.
	OldestUnprocessed *time.Time `json:"oldestUnprocessed,omitempty"`
	// LagUnknown reports that the lag could not be read (the stream went while it was listed):
	// Lag then counts the offsets between Offset and Tail.
	LagUnknown bool `json:"lagUnknown,omitempty"`
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
	lagger, _ := s.cfg.Processors.(ProcessorLagger)
	now := s.st.Clock().Now()
	for _, info := range infos {
		if r.Context().Err() != nil {
			return // the client is gone
		}
		for _, st := range durableStatuses(clientStatuses(pl.ProcessorsOn(r.Context(), info.Path)), info.Tail) {
			e := ProcessorEntry{Stream: info.Path, Tail: FormatOffset(info.Tail), ProcessorStatus: st}
			if st.Offset < info.Tail {
				lag, err := processorLag(r.Context(), s.st, lagger, info.Path, st.Slug, st.Offset)
				if err != nil {
					e.Lag, e.LagUnknown = info.Tail-st.Offset, true
				} else {
					e.Lag, e.LagEstimated, e.LagSeconds = lag.Events, lag.Estimated, lagSeconds(lag, now)
					if !lag.Oldest.IsZero() {
						at := lag.Oldest.UTC()
						e.OldestUnprocessed = &at
					}
				}
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

// processorLag is what processor slug on the stream at path has yet to process after offset
// after, for the listing and the metrics alike: from the host (lagger), which knows the events the
// processor consumes, or, without one, every durable event after the offset.
func processorLag(ctx context.Context, st *stream.Store, lagger ProcessorLagger, path, slug string, after int64) (stream.Lag, error) {
	if lagger != nil {
		return lagger.ProcessorLag(ctx, path, slug, after)
	}
	return st.Events().Lag(ctx, path, after, nil)
}

// lagSeconds is how long the oldest event of lag has waited at now (0 without one).
func lagSeconds(lag stream.Lag, now time.Time) float64 {
	if lag.Oldest.IsZero() {
		return 0
	}
	return max(0, now.Sub(lag.Oldest).Seconds())
}
