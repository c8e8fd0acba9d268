package testsupport

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sync"
)

// KeyValue is an in-memory [foldstream.KeyValue] (docs/engine.md#work-that-keeps-dying): the
// stand-in for the processor's durable key-value store. Share one between engines to play
// successive hosts of one processor. It is safe for concurrent use.
type KeyValue struct {
	mu     sync.Mutex
	values map[string]json.RawMessage
}

// MemoryKeyValue returns an empty key-value store.
func MemoryKeyValue() *KeyValue { return &KeyValue{values: map[string]json.RawMessage{}} }

// Get returns the value under key.
func (kv *KeyValue) Get(_ context.Context, key string) (json.RawMessage, bool, error) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	v, ok := kv.values[key]
	return slices.Clone(v), ok, nil
}

// Put stores value under key.
func (kv *KeyValue) Put(_ context.Context, key string, value json.RawMessage) error {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	kv.values[key] = slices.Clone(value)
	return nil
}

// Delete removes key.
func (kv *KeyValue) Delete(_ context.Context, key string) error {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	delete(kv.values, key)
	return nil
}

// Keys returns the stored keys, sorted.
func (kv *KeyValue) Keys() []string {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	return slices.Sorted(maps.Keys(kv.values))
}
