package host

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
)

// Reviving work that died with its host (docs/engine.md#background-work-and-claims) and the wake
// record an engine writes once per incarnation on a stream (docs/store.md#wake-records).

// revive is the alarm handler: it revives the processor a due claim names, opening its engine
// first when it is closed. An unknown processor (not registered yet, or no longer) fails, so the
// claim is kept with backoff; registering brings it forward.
func (h *Host) revive(ctx context.Context, c stream.DueClaim) error {
	sl, err := h.acquire(ctx, c.Path, c.Slug, openForWork)
	if err != nil {
		return err
	}
	defer h.release(sl)
	if err := sl.runner.Revive(ctx); err != nil {
		if errors.Is(err, foldtype.ErrPermanentFailure) {
			return h.workFailed(ctx, c, err)
		}
		h.failed(sl, "revive", err)
		return err
	}
	return nil
}

// workFailed ends the revives of a processor whose work kept dying with its host
// (docs/store.md#work-that-keeps-dying): it records the failure on the stream, drops the claim and
// answers the alarm loop with success, so no revive is owed. A new event starts the processor's
// work again.
func (h *Host) workFailed(ctx context.Context, c stream.DueClaim, cause error) error {
	h.log.Warn("host: processor work keeps dying with its host; it is not revived until it receives an event",
		"path", c.Path, "slug", c.Slug, "err", cause)
	// Both writes finish even when a shutdown cancels ctx (it waits for this handler): a record
	// without its dropped claim would be revived and recorded again by the next host.
	ctx = context.WithoutCancel(ctx)
	rec := foldtype.EventInput{Type: foldtype.WorkFailedType,
		Payload: foldtype.JSON(map[string]string{"facet": c.Slug, "error": cause.Error()})}
	if _, err := h.store.Events().Stream(c.Path).Append(ctx, rec); err != nil {
		return err // the claim stays, with backoff: the record is owed
	}
	return h.store.Events().Claim(ctx, c.Path, c.Slug, time.Time{})
}

// leftoverClaims lists the claims of processor slug on the streams pattern covers: the work a
// previous incarnation left (call it before the new engines start).
func (h *Host) leftoverClaims(ctx context.Context, p Pattern, slug string) ([]stream.ClaimRow, error) {
	all, err := h.store.Events().Claims(ctx)
	if err != nil {
		return nil, err
	}
	var out []stream.ClaimRow
	for _, c := range all {
		if c.Slug == slug && p.Match(c.Path) {
			out = append(out, c)
		}
	}
	return out, nil
}

// reviveNow brings claims a previous incarnation left forward to now, so the alarm loop revives
// their processors at once: the work died with its process, and waiting for its original due
// time (up to 30 minutes with backoff) would only delay it.
func (h *Host) reviveNow(ctx context.Context, claims []stream.ClaimRow) error {
	now := h.clock.Now()
	for _, c := range claims {
		if c.At.After(now) {
			if err := h.store.Events().Claim(ctx, c.Path, c.Slug, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// wakeOnce appends the stream's wake record unless this host woke it already or it is closed
// (docs/store.md#wake-records): at most one per stream per host start, and a reopened engine
// writes nothing. info is the stream as the caller last saw it (the zero value when unknown).
// It never creates a stream: a missing or deleted one fails with STREAM_NOT_FOUND or STREAM_GONE.
func (h *Host) wakeOnce(ctx context.Context, path string, info stream.StreamInfo, reason string) error {
	if info.Closed {
		return nil
	}
	if info.ID() != 0 && h.wokenAlready(path, info.ID()) {
		return nil
	}
	if _, err := h.store.Events().WakeExisting(ctx, path, reason); err != nil {
		return err
	}
	if info.ID() == 0 {
		now, err := h.store.Events().HeadStream(ctx, path)
		if err != nil {
			return nil // woken; gone again since
		}
		info = now
	}
	h.markWoken(path, info.ID())
	return nil
}

// idOf returns the id of the stream at path this host woke, if it remembers one.
func (w *wokenSet) idOf(path string) (int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	id, ok := w.m[path]
	return id, ok
}

// wokenAlready reports whether this host woke the stream with id at path.
func (h *Host) wokenAlready(path string, id int64) bool { return h.woken.has(path, id) }

// markWoken records that this host woke the stream with id at path.
func (h *Host) markWoken(path string, id int64) { h.woken.add(path, id) }

// maxWokenRemembered bounds the streams a host remembers having woken.
const maxWokenRemembered = 1 << 16

// wokenSet is the streams a host woke (path → the stream's id), so reopening an engine skips the
// store's wake: at most maxWokenRemembered, forgetting arbitrary ones beyond. Forgetting costs
// nothing but a call: the store appends a stream's wake record once per store incarnation
// whoever asks (docs/store.md#wake-records), so a forgotten stream's next wake writes nothing.
type wokenSet struct {
	mu sync.Mutex
	m  map[string]int64
}

func (w *wokenSet) has(path string, id int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	v, ok := w.m[path]
	return ok && v == id
}

func (w *wokenSet) add(path string, id int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = make(map[string]int64)
	}
	if _, ok := w.m[path]; !ok && len(w.m) >= maxWokenRemembered {
		for p := range w.m { // forget an arbitrary one
			delete(w.m, p)
			break
		}
	}
	w.m[path] = id
}

// len returns how many streams the set remembers.
func (w *wokenSet) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}
