package stream

import (
	"context"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/internal/catalog"
	"github.com/foldstream/foldstream/stream/internal/feeds"
	"github.com/foldstream/foldstream/stream/internal/kernel"
	"github.com/foldstream/foldstream/stream/internal/pause"
	"github.com/foldstream/foldstream/stream/internal/processors"
	"github.com/foldstream/foldstream/stream/internal/protocol"
	"github.com/foldstream/foldstream/stream/internal/substore"
)

// useLayers sets up the layers built on the kernel (docs/store.md#the-kernel-and-its-layers)
// while the store opens, before its writer and its listener start: what each layer needs the
// kernel to run for it goes through the kernel's hooks (package kernel), so the kernel names none of
// them.
func (s *Store) useLayers() {
	s.recentExt = kernel.NewRowExt[*recentEvents](s.k)
	s.noCheckpointsExt = kernel.NewRowExt[bool](s.k)
	// Package catalog: what both faces mean by a stream; the event face registers there what
	// it does when the protocol face writes (hooks), so neither face names the other.
	s.cat = catalog.New(s.k, s.clock)
	// Package feeds: the event face's subscriptions, the feeds that keep their pushes gapless on
	// a shared database (it registers with the kernel to hear other processes' commits) and the
	// rings of recent ephemerals.
	s.pushes = feeds.New(s.k, feeds.Config{
		Clock: s.clock, Logger: s.log, MaxEphemeralBytes: s.opts.MaxEphemeralBytes, Exclusive: s.exclusive,
		ReadDurable: func(ctx context.Context, path string, after int64) (foldtype.ReadPage, error) {
			return s.readEvents(ctx, path, after, MaxReadLimit, readOptions{})
		},
	})
	s.cat.Use(catalog.Hooks{
		CheckMessages: s.checkMessages,  // appendcheck.go
		Created:       s.streamCreated,  // list.go
		Ended:         s.endIncarnation, // events.go
		Listening:     s.pushes.Listening,
		Publish:       s.pushes.Publish,
	})
	// The event face (faces.go), the protocol face (package protocol) and the subscription
	// store (package substore).
	s.events = &Events{s: s}
	s.protocol = protocol.New(s.k, s.cat, protocol.Config{Clock: s.clock, ProducerReorderWait: s.opts.ProducerReorderWait})
	s.subs = substore.New(s.k, s.cat, substore.Config{Clock: s.clock, Logger: s.log, AppendJSON: func(t *kernel.Tx, path string, body []byte) error {
		return protocol.AppendJSON(s.protocol, t, path, body)
	}})
	// Package processors: claims and alarms, parked events, processor states and the audit,
	// which the event face offers (processors.go).
	s.procs = processors.New(s.k, s.clock, s.log)
	// events.go: the event face's state; Close stops its subscriptions and alarms.
	s.useEventFace()
	// Package pause: the paused stream's admission check and the fold of control events.
	pause.Use(s.k)
	// recent.go: the recent events an engine opening next reads from memory.
	s.useRecent()
}

// The layers' row extensions (kernel.RowExt): what they keep beside a stream's entry in the
// writer's cache, staged, copied and committed with the entry; the kernel carries them and never
// reads them.
//
//   - recentExt holds the durable events last appended through the event view, for an engine
//     opening next (recent.go); nil when none are kept.
//   - noCheckpointsExt reports that no checkpoint row has the stream's path as its scope, so an
//     engine opening in the writer reads none (checkpointsknown.go). Only on an exclusive
//     driver, for a stream this writer created; a checkpoint write to the path clears it.

// layerState is what the layers keep on the writer goroutine (Store.ls): only write functions and
// the hooks the writer runs touch it.
type layerState struct {
	// recent is what the cached states of the streams keep of recent events (recent.go).
	recent recentKept
	// checkpoints is what the writer knows of checkpoint rows whose scope no stream holds
	// (checkpointsknown.go).
	checkpoints streamlessCheckpoints
}
