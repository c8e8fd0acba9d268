package foldstream

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/foldstream/foldstream/foldtype"
)

// Work that keeps dying (docs/engine.md#work-that-keeps-dying). A background attempt's work may
// die with its host (a crash, a kill, a deploy) before it settles; the claim it held makes the next
// host revive the processor. Work that kills its host every time would be revived for ever, each
// revive doubling its delay up to 30 minutes. With a KeyValue store the engine counts those deaths
// and stops reviving after MaxDeaths of them on the same code.

// MaxDeaths is how many times a processor's in-flight work may die with its host, on the same
// code, before Revive fails with code PERMANENT_FAILURE.
const MaxDeaths = 5

// workStartedKey is the key-value key of the work-started marker.
const workStartedKey = "processor-work-started"

// KeyValue is a processor's small durable key-value store (one per processor and stream). The
// engine keeps its work-started marker there. Values are JSON.
type KeyValue interface {
	// Get returns the value under key, or ok=false when there is none.
	Get(ctx context.Context, key string) (value json.RawMessage, ok bool, err error)
	// Put stores value under key.
	Put(ctx context.Context, key string, value json.RawMessage) error
	// Delete removes key (no error when it is absent).
	Delete(ctx context.Context, key string) error
}

// workStarted is the work-started marker: written when the first background attempt starts,
// deleted when the last one settles. A marker found by a revive with no attempt in flight means
// the work died with its host.
type workStarted struct {
	// Deaths counts the deaths on CodeID so far.
	Deaths int `json:"deaths"`
	// CodeID names the code that ran the work (EngineConfig.CodeID).
	CodeID string `json:"codeId"`
}

// permanentFailureError builds the PERMANENT_FAILURE error of slug after deaths deaths.
func permanentFailureError(slug string, deaths int) *Error {
	return foldtype.NewError(foldtype.CodePermanentFailure, map[string]any{"slug": slug, "deaths": deaths},
		"processor %q: its work in flight died with its host %d times, so it is not started again until the processor receives an event",
		slug, deaths)
}

// checkpointKV is a KeyValue kept in checkpoint rows: key k of processor slug is the row
// "kv:<slug>:<k>" holding the value as its state; a deleted key is a row with no state.
type checkpointKV struct {
	cps  CheckpointStorage
	slug string
}

// CheckpointKeyValue returns a KeyValue for processor slug kept in cps's rows, beside the
// processor's checkpoint: row "kv:<slug>:<key>", the value as its state. The host uses it, so
// the marker lives in the processor's own storage and goes with its stream.
func CheckpointKeyValue(cps CheckpointStorage, slug string) KeyValue {
	return checkpointKV{cps: cps, slug: slug}
}

func (kv checkpointKV) row(key string) string { return "kv:" + kv.slug + ":" + key }

// WorkStartedRow returns the checkpoint row in which [CheckpointKeyValue] keeps processor slug's
// work-started marker, for a host that reads an engine's rows together: its checkpoint and this
// marker in one read.
func WorkStartedRow(slug string) string { return checkpointKV{slug: slug}.row(workStartedKey) }

func (kv checkpointKV) Get(ctx context.Context, key string) (json.RawMessage, bool, error) {
	cp, ok, err := kv.cps.ReadCheckpoint(ctx, kv.row(key))
	if err != nil || !ok || cp.State == nil {
		return nil, false, err
	}
	return cp.State, true, nil
}

func (kv checkpointKV) Put(ctx context.Context, key string, value json.RawMessage) error {
	return kv.cps.WriteCheckpoint(ctx, kv.row(key), Checkpoint{ReducerVersion: "kv", State: value}, true)
}

func (kv checkpointKV) Delete(ctx context.Context, key string) error {
	return kv.cps.WriteCheckpoint(ctx, kv.row(key), Checkpoint{ReducerVersion: "kv"}, true)
}

// readMarker reads the work-started marker.
func (e *Engine[S]) readMarker(ctx context.Context) (workStarted, bool, error) {
	raw, ok, err := e.kv.Get(ctx, workStartedKey)
	if err != nil || !ok {
		return workStarted{}, false, err
	}
	var m workStarted
	if err := json.Unmarshal(raw, &m); err != nil {
		return workStarted{}, false, fmt.Errorf("engine %q: decode the work-started marker: %w", e.c.Slug(), err)
	}
	return m, true, nil
}

func (e *Engine[S]) writeMarker(ctx context.Context, m workStarted) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return e.kv.Put(ctx, workStartedKey, b)
}

// queueMarkerLocked queues, on the claim chain, the marker's write (started) or deletion, so it
// lands in order with the claims. Failures are reported and swallowed like a claim's. e.mu must
// be held.
func (e *Engine[S]) queueMarkerLocked(started bool) {
	if e.kv == nil {
		return
	}
	prev, done := e.claimTail, make(chan struct{})
	e.claimTail = done
	go func() {
		defer close(done)
		<-prev
		err := callGuarded(func() error {
			ctx := context.Background()
			if !started {
				return e.kv.Delete(ctx, workStartedKey)
			}
			m, _, err := e.readMarker(ctx)
			if err != nil {
				return err
			}
			return e.writeMarker(ctx, workStarted{Deaths: m.Deaths, CodeID: e.codeID})
		})
		if err != nil {
			report(e.rep, SiteClaim, err, slog.String("slug", e.c.Slug()))
		}
	}()
}

// countDeath runs when the engine is built. A marker found then was left by a previous
// incarnation whose work was still in flight when its host went: that work died with its host.
// The death is counted (a marker of other code counts none and starts the count afresh) and, from
// the MaxDeaths-th death on, the engine starts failed: Revive fails with PERMANENT_FAILURE and no
// eventless pass runs until an event arrives. Judging at birth, not at the first revive, keeps the
// new incarnation from restarting the work (its opening catch-up's at-head pass) before the count.
func (e *Engine[S]) countDeath(ctx context.Context) error {
	if e.kv == nil {
		return nil
	}
	m, ok, err := e.readMarker(ctx)
	if err != nil || !ok {
		return err
	}
	deaths := 0
	if m.CodeID == e.codeID {
		deaths = m.Deaths + 1
	}
	if err := e.writeMarker(ctx, workStarted{Deaths: deaths, CodeID: e.codeID}); err != nil {
		return err
	}
	if deaths >= MaxDeaths {
		e.workFailed = permanentFailureError(e.c.Slug(), deaths)
	}
	return nil
}

func (e *Engine[S]) hasWorkFailed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.workFailed != nil
}

func (e *Engine[S]) clearWorkFailed() {
	e.mu.Lock()
	e.workFailed = nil
	e.mu.Unlock()
}

// failedRevive returns the PERMANENT_FAILURE an engine started with, until an event cleared it.
func (e *Engine[S]) failedRevive() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.workFailed != nil {
		return e.workFailed
	}
	return nil
}
