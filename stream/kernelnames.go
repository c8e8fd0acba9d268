package stream

import (
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// The kernel's vocabulary as the layers of this package spell it (package kernel).

// streamRow is a stream's row.
type streamRow = driver.Stream

// errNoStream reports a stream that does not exist.
var errNoStream = driver.ErrNoStream

// MediaType returns the lower-cased media type of a content type, parameters stripped.
func MediaType(contentType string) string { return kernel.MediaType(contentType) }

// IsJSONContentType reports whether a content type selects JSON mode.
func IsJSONContentType(contentType string) bool { return kernel.IsJSONContentType(contentType) }
