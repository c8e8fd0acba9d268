package stream

import "github.com/foldstream/foldstream/stream/internal/kernel"

// The kernel's content-type helpers, as package stream exports them (package kernel).

// MediaType returns the lower-cased media type of a content type, parameters stripped.
func MediaType(contentType string) string { return kernel.MediaType(contentType) }

// IsJSONContentType reports whether a content type selects JSON mode.
func IsJSONContentType(contentType string) bool { return kernel.IsJSONContentType(contentType) }
