package server

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"sync"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
)

// Live-state deltas reach SSE readers through one hub per stream path and node: the hub holds the
// path's one store subscription to LiveStateChangedType (local deltas and, on a shared store, the
// ones other nodes publish), decodes each delta once, renders its SSE frame once, and hands the
// frame to the readers of that delta's processor. A reader costs a channel send per delta; a
// delta of a processor nobody follows on this node costs its one decode.
//
// A reader joins before it reads its seed, so every delta committed after the seed was read
// reaches it: the chain from the seed's revision is intact (serveLiveStateSSE skips deltas the
// seed already holds and re-seeds on a gap).

// liveFrame is one delta as an SSE reader needs it.
type liveFrame struct {
	from, to int64
	frame    []byte // "event: delta" with data {from, to, patch}; nil for a null patch (re-seed)
}

// liveReader is one SSE client of one processor's live state.
type liveReader struct {
	slug     string
	frames   chan *liveFrame
	overflow chan struct{} // a frame did not fit: re-seed
}

// liveReaderBuffer is how many frames a reader may lag behind before it re-seeds.
const liveReaderBuffer = 256

type liveHub struct {
	ready chan struct{} // closed once sub (or err) is set
	sub   *stream.Subscription
	err   error

	mu      sync.RWMutex
	readers map[string]map[*liveReader]struct{} // by processor slug (the delta's key)
	count   int                                 // readers joined, under liveHubs.mu
}

type liveHubs struct {
	mu   sync.Mutex
	hubs map[string]*liveHub // by stream path
}

// joinLive adds a reader of slug's live state on path, subscribing the path's hub first if it is
// the path's first reader on this node. The reader must leave with leaveLive.
func (s *Server) joinLive(path, slug string) (*liveHub, *liveReader, error) {
	hs := &s.live
	hs.mu.Lock()
	h := hs.hubs[path]
	if h == nil {
		h = &liveHub{ready: make(chan struct{}), readers: map[string]map[*liveReader]struct{}{}}
		if hs.hubs == nil {
			hs.hubs = map[string]*liveHub{}
		}
		hs.hubs[path] = h
		h.count++
		hs.mu.Unlock()
		h.sub, h.err = s.st.Events().Subscribe(path, h.deliver, stream.SubscribeOptions{
			Consumes: []string{foldtype.LiveStateChangedType}, Name: "http-live-state " + path})
		close(h.ready)
	} else {
		h.count++
		hs.mu.Unlock()
		<-h.ready
	}
	if h.err != nil {
		s.leaveLive(path, h, nil)
		return nil, nil, h.err
	}
	r := &liveReader{slug: slug, frames: make(chan *liveFrame, liveReaderBuffer), overflow: make(chan struct{}, 1)}
	h.mu.Lock()
	set := h.readers[slug]
	if set == nil {
		set = map[*liveReader]struct{}{}
		h.readers[slug] = set
	}
	set[r] = struct{}{}
	h.mu.Unlock()
	return h, r, nil
}

// leaveLive removes r (nil: a join that failed) from h; the path's last reader closes the hub's
// subscription.
func (s *Server) leaveLive(path string, h *liveHub, r *liveReader) {
	if r != nil {
		h.mu.Lock()
		if set := h.readers[r.slug]; set != nil {
			delete(set, r)
			if len(set) == 0 {
				delete(h.readers, r.slug)
			}
		}
		h.mu.Unlock()
	}
	hs := &s.live
	hs.mu.Lock()
	h.count--
	last := h.count == 0
	if last && hs.hubs[path] == h {
		delete(hs.hubs, path)
	}
	hs.mu.Unlock()
	if last && h.sub != nil {
		h.sub.Close()
	}
}

// deliver is the hub's subscription: each delta is decoded once (key, revisions and patch in one
// json.Unmarshal), and, when its processor has readers here, rendered once and offered to them
// without blocking (a full reader is told to re-seed).
func (h *liveHub) deliver(_ context.Context, events []foldtype.Event, _ foldtype.ScannedRange) error {
	for _, ev := range events {
		if ev.Type != foldtype.LiveStateChangedType {
			continue
		}
		var d foldtype.LiveStateDelta
		if json.Unmarshal(ev.Payload, &d) != nil {
			continue
		}
		h.mu.RLock()
		followed := len(h.readers[d.Key]) > 0
		h.mu.RUnlock()
		if !followed {
			continue
		}
		f := renderDelta(&d)
		h.mu.RLock()
		for r := range h.readers[d.Key] {
			select {
			case r.frames <- f:
			default:
				select {
				case r.overflow <- struct{}{}:
				default:
				}
			}
		}
		h.mu.RUnlock()
	}
	return nil
}

// renderDelta renders a decoded delta's SSE frame: "event: delta", data {from, to, patch} with the
// patch as json.Marshal writes it.
func renderDelta(d *foldtype.LiveStateDelta) *liveFrame {
	f := &liveFrame{from: d.From, to: d.To}
	if d.Patch == nil {
		return f
	}
	patch, err := json.Marshal(d.Patch)
	if err != nil {
		return f // cannot be sent: the reader re-seeds
	}
	var b bytes.Buffer
	b.Grow(len(patch) + 64)
	b.WriteString("event: delta\ndata:{\"from\":")
	b.WriteString(strconv.FormatInt(d.From, 10))
	b.WriteString(`,"to":`)
	b.WriteString(strconv.FormatInt(d.To, 10))
	b.WriteString(`,"patch":`)
	b.Write(patch)
	b.WriteString("}\n\n")
	f.frame = b.Bytes()
	return f
}
