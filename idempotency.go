package foldstream

import "strings"

// processorKey returns key in the processor namespace: ProcessorKeyPrefix + key, or key itself when
// it is empty or already carries the prefix. The engine applies it to every emitted event, so a
// retried batch that emits the same key dedupes against the first attempt's event.
func processorKey(key string) string {
	if key == "" || strings.HasPrefix(key, ProcessorKeyPrefix) {
		return key
	}
	return ProcessorKeyPrefix + key
}
