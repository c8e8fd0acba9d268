package stream

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// The event view: appends and reads of events over the store's records
// (docs/store.md#the-store).
//
// Offsets of one stream come from one sequence shared by durable and ephemeral events. The writer
// owns it (kernel.StreamState.HighestAssigned, .Tail); the durable mark — the end of the last
// committed batch that carried a durable event — is the End of the stream's last record, written
// in the same transaction as the batch, so it is exactly as durable as the batch. Ephemeral
// offsets above the mark live only in memory: a new incarnation of the store hands the same
// numbers out again (docs/store.md#durability-guarantees-and-their-limits).

// EventContentType is the content type of streams the event view creates.
const EventContentType = "application/json"

// eventView is the store's in-memory state for the event view (outside the writer).
type eventView struct {
	// readBudget is a read page's byte budget: ReadBudgetBytes (tests lower it).
	readBudget int
}

func newEventView() *eventView { return &eventView{readBudget: ReadBudgetBytes} }

// useEventFace sets up the event face's in-memory state and registers its part in Close: at once no subscription starts and the
// alarm loop stops taking alarms (the running handlers get their context cancelled); the drain
// waits for those handlers.
func (s *Store) useEventFace() {
	s.ev = newEventView()
	s.k.OnClose(func() {
		s.pushes.Halt() // no subscription starts after this
		s.procs.Halt()
	}, func() {
		s.procs.Drain() // the running alarm handlers
	})
}

// appendEventsAt is [EventStream.Append] with the choice to create a missing stream for a batch
// that carries a durable event (create); an ephemeral-only batch never creates one: to a missing
// stream it is dropped, and with dropAll to a deleted or closed one too. With fence set, a batch
// that carries a durable event checks the fence in its transaction first ([EventStream.Fenced]).
func (s *Store) appendEventsAt(ctx context.Context, path string, inputs []foldtype.EventInput, prepared []preparedInput, create, dropAll bool, fence *driver.Fence) ([]foldtype.Event, error) {
	ephemeralOnly := true
	for _, in := range inputs {
		if !in.Ephemeral {
			ephemeralOnly = false
			break
		}
	}
	create = create && !ephemeralOnly
	if err := s.checkInputs(path, inputs); err != nil {
		return nil, err
	}
	var out []foldtype.Event
	dropped := false
	err := s.k.WriteTo(ctx, path, func(t *kernel.Tx) error {
		out, dropped = nil, false
		m, err := s.eventStreamFor(t, path, create)
		if err != nil {
			if ephemeralOnly && droppable(err, dropAll) {
				dropped = true
				return nil
			}
			return err
		}
		if fence != nil && !ephemeralOnly {
			if err := t.Driver().CheckFence(t.Context(), fence, "append to "+quotePath(path)); err != nil {
				return err
			}
		}
		out, err = s.appendEvents(t, m, prepared, false)
		return err
	})
	if err != nil {
		return nil, err
	}
	if dropped {
		out = make([]foldtype.Event, len(inputs))
		for i, in := range inputs {
			out[i] = foldtype.Event{Path: path, Type: in.Type, Payload: in.Payload, Metadata: in.Metadata, Ephemeral: true}
		}
	}
	return out, nil
}

// droppable reports whether an ephemeral-only batch refused with err is dropped instead: its
// stream is missing (or, with all, deleted or closed).
func droppable(err error, all bool) bool {
	var fe *foldtype.Error
	if !errors.As(err, &fe) {
		return false
	}
	switch fe.Code {
	case foldtype.CodeStreamNotFound:
		return true
	case foldtype.CodeStreamGone, foldtype.CodeStreamDeleted, foldtype.CodeStreamClosed:
		return all
	}
	return false
}

// eventStreamFor is eventStream when create is set, and existingEventStream otherwise.
func (s *Store) eventStreamFor(t *kernel.Tx, path string, create bool) (*kernel.StreamState, error) {
	if create {
		return s.eventStream(t, path)
	}
	return s.existingEventStream(t, path)
}

// existingEventStream is eventStream for a stream that must exist already: a missing path fails
// with STREAM_NOT_FOUND, a deleted one with STREAM_GONE.
func (s *Store) existingEventStream(t *kernel.Tx, path string) (*kernel.StreamState, error) {
	m, err := t.Stream(path)
	if errors.Is(err, driver.ErrNoStream) {
		return nil, foldtype.NewError(foldtype.CodeStreamNotFound, map[string]any{"path": path},
			"stream %s not found", quotePath(path))
	}
	if err != nil {
		return nil, err
	}
	if err := checkEventStream(&m.Row, m.Tail); err != nil {
		return nil, err
	}
	return m, nil
}

// eventStream returns the writer's state of the stream at path for an event append, creating the
// stream when missing.
//
// A path the writer holds nothing of (tx.unheld) is inserted without being read first, in one
// statement that leaves a taken path alone (as a create does, docs/store.md#one-writer): a batch
// on a fresh path costs one statement instead of a read and an insert. When the path is taken
// after all (an evicted stream, a deleted or expired one), nothing was written and the row is
// read and judged as before.
func (s *Store) eventStream(t *kernel.Tx, path string) (*kernel.StreamState, error) {
	if t.Unheld(path) && ValidateStreamName(path) == nil {
		row := s.newEventStreamRow(t, path)
		none := s.createsWithoutCheckpoints(t, path)
		id, inserted, err := t.InsertStreamIfAbsent(row)
		if err != nil {
			return nil, fmt.Errorf("create stream %s: %w", quotePath(path), err)
		}
		if inserted {
			return s.createdEventStream(t, row, id, none), nil
		}
	}
	m, err := t.Stream(path)
	if errors.Is(err, driver.ErrNoStream) {
		if err := ValidateStreamName(path); err != nil {
			return nil, err
		}
		row := s.newEventStreamRow(t, path)
		none := s.createsWithoutCheckpoints(t, path)
		id, err := t.Driver().InsertStream(t.Context(), row)
		if err != nil {
			return nil, fmt.Errorf("create stream %s: %w", quotePath(path), err)
		}
		m = s.createdEventStream(t, row, id, none)
	} else if err != nil {
		return nil, err
	}
	if err := checkEventStream(&m.Row, m.Tail); err != nil {
		return nil, err
	}
	return m, nil
}

// newEventStreamRow is the row of an event stream created at path by t.
func (s *Store) newEventStreamRow(t *kernel.Tx, path string) driver.Stream {
	ms := t.Now().UnixMilli()
	return driver.Stream{Path: path, ContentType: EventContentType, CreatedMs: ms, LastAccessMs: ms}
}

// createdEventStream stages the event stream t just inserted as row, with id; noCheckpoints: no
// checkpoint row has its path as scope (Store.createsWithoutCheckpoints).
func (s *Store) createdEventStream(t *kernel.Tx, row driver.Stream, id int64, noCheckpoints bool) *kernel.StreamState {
	row.ID = id
	m := &kernel.StreamState{Row: row}
	s.noCheckpointsExt.Set(m, noCheckpoints)
	t.Create(m)
	s.streamCreated(t, row.Path)
	return m
}

// checkEventStream refuses event appends to streams that cannot hold them.
func checkEventStream(row *driver.Stream, tail int64) error {
	if row.State != 0 {
		return foldtype.NewError(foldtype.CodeStreamGone, map[string]any{"path": row.Path},
			"stream %s was deleted", quotePath(row.Path))
	}
	if row.Closed {
		return streamClosedError(row.Path, tail)
	}
	if !isJSONContentType(row.ContentType) {
		return foldtype.NewError(foldtype.CodeInvalidEvent, map[string]any{"path": row.Path, "contentType": row.ContentType},
			"stream %s holds %s, not JSON events", quotePath(row.Path), row.ContentType)
	}
	return nil
}

func isJSONContentType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "application/json")
}

// appendEvents runs an event batch through the one insert path (the kernel's Tx.Admit and
// Tx.WriteRecord) and returns the receipts in input order. An exempt batch (the store's wake records) passes a paused stream.
func (s *Store) appendEvents(t *kernel.Tx, m *kernel.StreamState, prepared []preparedInput, exempt bool) ([]foldtype.Event, error) {
	createdAt := formatCreatedAt(t.Now())
	batch := make([]kernel.Pending, len(prepared))
	for i := range prepared {
		p := &prepared[i]
		batch[i] = kernel.Pending{Body: finishBody(p.prefix, createdAt), Key: p.in.IdempotencyKey, Probe: &p.in,
			Ephemeral: p.in.Ephemeral, Expect: p.in.Offset}
		batch[i].Ctl, batch[i].Reason = foldtype.ParseControl(p.in.Type, p.in.Payload, p.in.Ephemeral)
		batch[i].Exempt = exempt
	}
	adm, after, through, err := t.Admit(m, batch)
	if err != nil {
		return nil, err
	}
	path := m.Row.Path
	results := make([]foldtype.Event, len(prepared))
	committed := make([]foldtype.Event, 0, len(prepared))
	var ephemerals []foldtype.Event
	for i, p := range prepared {
		switch {
		case adm[i].DupOf >= 0:
			results[i] = results[adm[i].DupOf]
		case adm[i].Dup:
			results[i] = *adm[i].Existing
		default:
			in := p.in
			results[i] = foldtype.Event{Type: in.Type, Payload: in.Payload, Metadata: in.Metadata, Source: in.Source,
				IdempotencyKey: in.IdempotencyKey, Ephemeral: in.Ephemeral, Offset: adm[i].Offset, CreatedAt: createdAt, Path: path}
			committed = append(committed, results[i])
			if in.Ephemeral {
				ephemerals = append(ephemerals, results[i])
			}
		}
	}
	if len(committed) == 0 {
		return results, nil // every event deduped: no commit, no fan-out
	}
	prevTail := m.Tail
	if err := t.WriteRecord(m, batch, adm, after, through, nil); err != nil {
		return nil, err
	}
	if s.keepsRecent() {
		durable := committed // keepRecent copies the events it keeps
		if len(ephemerals) > 0 {
			durable = make([]foldtype.Event, 0, len(committed))
		}
		sizes := make([]int, 0, len(committed))
		for i := range prepared {
			if adm[i].DupOf < 0 && !adm[i].Dup && !prepared[i].in.Ephemeral {
				if len(ephemerals) > 0 {
					durable = append(durable, results[i])
				}
				sizes = append(sizes, len(batch[i].Body))
			}
		}
		if len(durable) > 0 {
			s.keepRecent(m, prevTail, durable, sizes)
		}
	}
	id := m.Row.ID
	if !s.exclusive && len(ephemerals) > 0 {
		t.AddEphemerals(id, ephemerals)
	}
	t.AfterCommit(func() {
		// Only once the batch landed: a refused batch leaves no phantom in the ring.
		if len(ephemerals) > 0 {
			s.pushes.RememberEphemerals(id, ephemerals)
		}
		s.pushes.Publish(path, committed, after, through) // to subscribers
	})
	return results, nil
}

// Read limits (docs/store.md#reading).
const (
	// DefaultReadLimit is the page size used when a read passes a limit <= 0.
	DefaultReadLimit = 500
	// MaxReadLimit is the largest page a read returns.
	MaxReadLimit = 1000
	// ReadBudgetBytes is a page's byte budget; a page always holds at least one event.
	ReadBudgetBytes = 8 << 20
)

// readOptions are per-call knobs of readEvents.
type readOptions struct {
	// IncludeEphemeral merges the ephemeral ring's events into the page: those inside the proven
	// span, and on an at-head page also those beyond the durable mark. They never count toward the
	// limit and never move the proof (docs/store.md#reading). The contract's reference stream
	// has it (acceptance cases S-04, S-05); no exported read sets it, since engines get
	// ephemerals by push, so only this package's tests read the ring.
	IncludeEphemeral bool
}

// readEvents is [EventStream.Read] with options, for the stream at path.
func (s *Store) readEvents(ctx context.Context, path string, after int64, limit int, opts readOptions) (foldtype.ReadPage, error) {
	var page foldtype.ReadPage
	var streamID int64
	err := s.k.Read(ctx, func(q driver.Reader) error {
		var err error
		page, streamID, err = s.readEventsIn(ctx, q, path, nil, after, limit)
		return err
	})
	if err != nil {
		return foldtype.ReadPage{}, err
	}
	if opts.IncludeEphemeral && streamID >= 0 {
		page.Events = s.pushes.MergeEphemerals(streamID, page.Events, after, page.ScannedThroughOffset, page.AtHead)
	}
	return page, nil
}

// readEventsIn is readEvents's page of durable events inside the read transaction q; streamID is
// -1 for a missing stream (an empty page at head). row is the stream's row when the caller read it
// in q already (nil: read here).
func (s *Store) readEventsIn(ctx context.Context, q driver.Reader, path string, row *driver.Stream, after int64, limit int) (foldtype.ReadPage, int64, error) {
	if limit <= 0 {
		limit = DefaultReadLimit
	}
	limit = min(limit, MaxReadLimit)
	if after < 0 {
		after = 0
	}
	page := foldtype.ReadPage{ScannedThroughOffset: after, AtHead: true}
	budget := s.ev.readBudget
	if row == nil {
		var err error
		row, err = kernel.LoadStreamByPath(ctx, q, path)
		if errors.Is(err, driver.ErrNoStream) {
			return page, -1, nil
		}
		if err != nil {
			return foldtype.ReadPage{}, -1, err
		}
	}
	// A JSON stream that is not a fork has one offset per message, so its tail bounds the page:
	// one allocation instead of the slice's doublings (an engine's opening reads such a page).
	page.Events = make([]foldtype.Event, 0, pageCap(row, after, limit))
	var last int64
	total, cut, n := 0, false, 0
	var decErr error
	err := kernel.ScanMessages(ctx, q, row, after, func(msg kernel.Message) bool {
		if n > 0 && total+len(msg.Body) > budget {
			cut = true
			return false
		}
		ev, err := decodeEvent(path, msg)
		if err != nil {
			decErr = err
			return false
		}
		total += len(msg.Body)
		page.Events = append(page.Events, ev)
		last = msg.Offset
		n++
		return n < limit
	})
	if err != nil {
		return foldtype.ReadPage{}, -1, err
	}
	if decErr != nil {
		return foldtype.ReadPage{}, -1, decErr
	}
	mark := row.Tail
	page.AtHead = !cut && (n < limit || last >= mark)
	if page.AtHead {
		page.ScannedThroughOffset = max(after, mark)
	} else {
		page.ScannedThroughOffset = max(after, last)
	}
	return page, row.ID, nil
}

// pageCap is the capacity to give a page of at most limit events after after on row: the events
// there when that is known from the row (a JSON stream that is not a fork), at most 64.
func pageCap(row *driver.Stream, after int64, limit int) int {
	if !IsJSONContentType(row.ContentType) || row.ForkedFrom.Valid || row.Tail <= after {
		return 0
	}
	return int(min(row.Tail-after, int64(limit), 64))
}

// endIncarnation ends what the event face keeps of one incarnation of the stream at path, in the
// write that deletes it (catalog.Hooks.Ended, run by every delete path of the protocol face): its
// processors' checkpoints and claims go (a stream created at the path again starts its
// processors from their initial state at offset 0), and once the delete commits its ephemeral
// ring is cleared and its subscriptions end with STREAM_DELETED
// (docs/store.md#deleting-a-stream).
func (s *Store) endIncarnation(t *kernel.Tx, id int64, path string) error {
	if err := t.Driver().DeleteProcessorState(t.Context(), path); err != nil {
		return err
	}
	t.AfterCommit(func() {
		s.pushes.ForgetRing(id)
		s.pushes.EndSubscriptions(path, foldtype.NewError(foldtype.CodeStreamDeleted, map[string]any{"path": path},
			"stream %s was deleted; its subscriptions, checkpoints and claims ended with it", quotePath(path)))
	})
	return nil
}
