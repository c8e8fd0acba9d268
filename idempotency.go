package foldstream

import (
	"strings"

	"github.com/foldstream/foldstream/foldtype"
)

// processorKey returns key in the processor namespace: foldtype.ProcessorKeyPrefix + key, or key itself when
// it is empty or already carries the prefix. The engine applies it to every emitted event, so a
// retried batch that emits the same key dedupes against the first attempt's event.
func processorKey(key string) string {
	if key == "" || strings.HasPrefix(key, foldtype.ProcessorKeyPrefix) {
		return key
	}
	return foldtype.ProcessorKeyPrefix + key
}
