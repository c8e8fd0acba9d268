package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/wire"
	"github.com/foldstream/foldstream/stream/driver"
)

// Reads of a processor another node runs (docs/postgres.md#processors-and-leases). When the
// owner's lease names its address, the read is asked of the owner's processor route, which
// answers with the owner's read-your-writes. Otherwise the node answers from the checkpoint in
// the database once that checkpoint covers the stream's head as of the read — no event the
// processor consumes lies between them — polling it until the read's bound.

// checkpointPoll is how often a read answered from the database re-reads the checkpoint.
const checkpointPoll = 20 * time.Millisecond

// errOwnerUnreachable is a forwarded read whose owner did not answer: the read falls back to
// the checkpoint.
var errOwnerUnreachable = errors.New("host: the owner did not answer")

// forwardable reports whether a read for l is asked of its holder over HTTP.
func (h *Host) forwardable(l driver.Lease) bool {
	return l.Addr != "" && l.Addr != h.leases.addr
}

// ownerURL is the processor route of slug on path at the node serving at addr, with q.
func (h *Host) ownerURL(addr, path, slug string, q url.Values) string {
	u := addr + (&url.URL{Path: strings.TrimRight(h.cfg.ProcessorPrefix, "/") + "/" + slug + path}).EscapedPath()
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// forward asks the owner at addr for the processor route and decodes its JSON answer into out.
func (h *Host) forward(ctx context.Context, addr, path, slug string, q url.Values, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.ownerURL(addr, path, slug, q), nil)
	if err != nil {
		return fmt.Errorf("host: ask the owner: %w", err)
	}
	resp, err := h.cfg.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return errOwnerUnreachable
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return errOwnerUnreachable
	}
	if resp.StatusCode == http.StatusOK {
		// The owner answered a paused or failing processor's last good state (marked): this node
		// answers the same, from the same checkpoint.
		switch resp.Header.Get(wire.HeaderProcessorState) {
		case foldtype.StatePaused:
			return foldtype.NewError(foldtype.CodeProcessorPaused, map[string]any{"path": path, "slug": slug},
				"host: processor %q on %q is paused", slug, path)
		case foldtype.StateFailing:
			return foldtype.NewError(foldtype.CodeProcessorFailing, map[string]any{"path": path, "slug": slug},
				"host: processor %q on %q is failing", slug, path)
		}
		if err := json.Unmarshal(body, out); err != nil {
			return fmt.Errorf("host: decode the owner's answer: %w", err)
		}
		return nil
	}
	code := foldtype.Code(resp.Header.Get(wire.HeaderErrorCode))
	msg := strings.TrimSpace(string(body))
	switch {
	case code != "":
		return foldtype.NewError(code, map[string]any{"path": path, "slug": slug}, "%s", msg)
	case resp.StatusCode == http.StatusNotFound:
		return notRegistered(path, slug)
	default:
		return errOwnerUnreachable
	}
}

// fromCheckpoint waits until the checkpoint of slug on path covers through (a negative through:
// the stream's head now) and returns it, or fails with CATCHING_UP when ctx ends at its bound.
func (h *Host) fromCheckpoint(ctx context.Context, path, slug string, through int64) (foldtype.Checkpoint, *registration, error) {
	key := procKey{path, slug}
	h.mu.Lock()
	reg := h.registrationFor(path, slug)
	h.mu.Unlock()
	if reg == nil {
		return foldtype.Checkpoint{}, nil, notRegistered(path, slug)
	}
	if through < 0 {
		info, err := h.store.Events().HeadStream(ctx, path)
		if err != nil {
			if errors.Is(err, foldtype.ErrStreamNotFound) || errors.Is(err, foldtype.ErrStreamGone) {
				if reg.pinned() {
					return foldtype.Checkpoint{ReducerVersion: reg.version, State: reg.initial}, reg, nil
				}
				return foldtype.Checkpoint{}, nil, notRegistered(path, slug)
			}
			return foldtype.Checkpoint{}, nil, err
		}
		through = info.Tail
	}
	cps, err := h.checkpoints(path)
	if err != nil {
		return foldtype.Checkpoint{}, nil, err
	}
	var cp foldtype.Checkpoint
	for {
		var ok bool
		cp, ok, err = cps.ReadCheckpoint(ctx, slug)
		if err != nil {
			break
		}
		if !ok {
			cp = foldtype.Checkpoint{ReducerVersion: reg.version, State: reg.initial}
		}
		if at := reg.atVersion(cp.ReducerVersion); at != nil {
			reg = at // the next version's, once switched (host/rebuild.go)
			var pending bool
			if pending, err = h.consumedBetween(ctx, reg.consumes, path, cp.ReducedThroughOffset, through); err != nil {
				break
			}
			if !pending {
				if cp.State == nil {
					cp.State = reg.initial
				}
				return cp, reg, nil
			}
		}
		t := time.NewTimer(checkpointPoll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			err = context.Cause(ctx)
		}
		if err != nil {
			break
		}
	}
	if errors.Is(err, errBound) || errors.Is(err, foldtype.ErrProcessTimeout) {
		return foldtype.Checkpoint{}, nil, catchingUp(key, cp.ReducedThroughOffset, err)
	}
	return foldtype.Checkpoint{}, nil, err
}

// errRecreated is a read whose engine turned out to follow a stream deleted since.
var errRecreated = errors.New("host: the stream was deleted and created again")

// catchUpShared gives a local read on a shared database read-your-writes across nodes: an append
// another node acknowledged reaches this node's engine by notification, possibly after the read
// began, so when the stream's head as of now holds an event the engine consumes and has not
// reduced, the engine catches up from the log first. A head it cannot read fails the read.
func (h *Host) catchUpShared(ctx context.Context, sl *slot) error {
	if h.store.Driver().Exclusive() {
		return nil
	}
	info, err := h.store.Events().HeadStream(ctx, sl.key.path)
	if errors.Is(err, foldtype.ErrStreamNotFound) || errors.Is(err, foldtype.ErrStreamGone) {
		return nil // the read itself reports a missing stream
	}
	if err != nil {
		// Without the head the read cannot tell whether another node acknowledged an append this
		// engine has not seen: it answers the failure rather than a state that may lack it.
		return err
	}
	if sl.streamID != 0 && info.ID() != sl.streamID {
		// Deleted and created again (through another node): the engine follows a dead stream.
		h.recreated(sl)
		return errRecreated
	}
	at := sl.runner.ReducedThroughOffset()
	if at >= info.Tail {
		return nil
	}
	pending, err := h.consumedBetween(ctx, sl.runner.Consumes(), sl.key.path, at, info.Tail)
	if err != nil || !pending {
		return err
	}
	return sl.runner.CatchUpFromLog(ctx)
}

// consumedBetween reports whether a durable event the registration consumes lies in (after, through].
func (h *Host) consumedBetween(ctx context.Context, consumes []string, path string, after, through int64) (bool, error) {
	for after < through {
		page, err := h.store.Events().Stream(path).Read(ctx, after, 256)
		if err != nil {
			return false, err
		}
		for _, ev := range page.Events {
			if ev.Offset <= through && foldtype.ConsumesEvent(consumes, ev) {
				return true, nil
			}
		}
		if page.ScannedThroughOffset <= after || page.AtHead {
			return false, nil
		}
		after = page.ScannedThroughOffset
	}
	return false, nil
}

// remoteSnapshot answers Snapshot for a processor another node runs.
func (h *Host) remoteSnapshot(ctx context.Context, l driver.Lease, path, slug string) (foldtype.Snapshot[json.RawMessage], error) {
	if h.forwardable(l) {
		var snap foldtype.Snapshot[json.RawMessage]
		err := h.forward(ctx, l.Addr, path, slug, url.Values{}, &snap)
		if !errors.Is(err, errOwnerUnreachable) {
			return snap, err
		}
	}
	// A paused or failing processor's checkpoint does not move: its stored state answers.
	if err := h.storedStateError(ctx, procKey{path, slug}); err != nil {
		return foldtype.Snapshot[json.RawMessage]{}, err
	}
	cp, _, err := h.fromCheckpoint(ctx, path, slug, -1)
	if err != nil {
		return foldtype.Snapshot[json.RawMessage]{}, err
	}
	return foldtype.Snapshot[json.RawMessage]{Offset: cp.ReducedThroughOffset, State: cp.State}, nil
}

// remoteLiveSnapshot answers LiveSnapshot for a processor another node runs. From the checkpoint
// the state is projected here and the revision is 0: no delta continues from it, so a live client
// re-seeds on the next one.
func (h *Host) remoteLiveSnapshot(ctx context.Context, l driver.Lease, path, slug string) (foldtype.LiveSnapshot[json.RawMessage], error) {
	if h.forwardable(l) {
		var seed foldtype.LiveSnapshot[json.RawMessage]
		err := h.forward(ctx, l.Addr, path, slug, url.Values{"view": {"live"}}, &seed)
		if !errors.Is(err, errOwnerUnreachable) {
			return seed, err
		}
	}
	cp, reg, err := h.fromCheckpoint(ctx, path, slug, -1)
	if err != nil {
		return foldtype.LiveSnapshot[json.RawMessage]{}, err
	}
	st, err := reg.project(cp.State)
	if err != nil {
		return foldtype.LiveSnapshot[json.RawMessage]{}, err
	}
	return foldtype.LiveSnapshot[json.RawMessage]{State: st}, nil
}

// remoteWait answers WaitUntilProcessed for a processor another node runs.
func (h *Host) remoteWait(ctx context.Context, l driver.Lease, path, slug string, offset int64, timeout time.Duration) error {
	if h.forwardable(l) {
		q := url.Values{"waitUntilProcessed": {strconv.FormatInt(offset, 10)}, "timeout": {timeout.String()}}
		var snap foldtype.Snapshot[json.RawMessage]
		err := h.forward(ctx, l.Addr, path, slug, q, &snap)
		if !errors.Is(err, errOwnerUnreachable) {
			return err
		}
	}
	wctx, cancel := context.WithTimeoutCause(ctx, timeout, foldtype.ErrProcessTimeout)
	defer cancel()
	_, _, err := h.fromCheckpoint(wctx, path, slug, offset)
	return err
}
