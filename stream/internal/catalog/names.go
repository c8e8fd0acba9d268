package catalog

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/foldstream/foldstream/foldtype"
)

// Limits on names, checked by the store so that both views (and every server in front of them)
// refuse the same names. See docs/store.md#names.
const (
	// MaxStreamNameBytes caps a stream path's length in UTF-8 bytes.
	MaxStreamNameBytes = 1024
	// MaxProducerIDBytes caps an idempotent producer's id in UTF-8 bytes.
	MaxProducerIDBytes = 256
)

// ValidateStreamName returns nil when name may name a new stream, and otherwise an
// INVALID_STREAM_NAME error saying why. A name is one or more segments separated by "/", with
// one optional leading "/" ("/orders/42", "orders"): valid UTF-8, at most MaxStreamNameBytes
// bytes, no control characters (NUL included), and no segment that is empty (no "//", no trailing
// "/"), "." or "..". The store checks names when it creates a stream; streams created before
// these rules keep working.
func ValidateStreamName(name string) error {
	if reason := streamNameProblem(name); reason != "" {
		return foldtype.NewError(foldtype.CodeInvalidStreamName, map[string]any{"path": name},
			"invalid stream name %s: %s", QuoteForMessage(name), reason)
	}
	return nil
}

func streamNameProblem(name string) string {
	switch {
	case name == "" || name == "/":
		return "the name is empty"
	case len(name) > MaxStreamNameBytes:
		return "longer than " + strconv.Itoa(MaxStreamNameBytes) + " bytes"
	case !utf8.ValidString(name):
		return "not valid UTF-8"
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return "it contains a control character"
		}
	}
	rest := strings.TrimPrefix(name, "/")
	for {
		seg, tail, more := strings.Cut(rest, "/")
		switch seg {
		case "":
			return "empty segments (\"//\" or a trailing \"/\") are not allowed"
		case ".", "..":
			return "\".\" and \"..\" segments are not allowed"
		}
		if !more {
			return ""
		}
		rest = tail
	}
}

// ValidateProducerID refuses producer ids the store does not keep: empty, longer than
// MaxProducerIDBytes, not valid UTF-8, or holding control characters.
func ValidateProducerID(id string) error {
	reason := ""
	switch {
	case id == "":
		reason = "it is empty"
	case len(id) > MaxProducerIDBytes:
		reason = "longer than " + strconv.Itoa(MaxProducerIDBytes) + " bytes"
	case !utf8.ValidString(id):
		reason = "not valid UTF-8"
	case strings.IndexFunc(id, unicode.IsControl) >= 0:
		reason = "it contains a control character"
	default:
		return nil
	}
	return foldtype.NewError(foldtype.CodeBadRequest, nil, "invalid producer id %s: %s", QuoteForMessage(id), reason)
}

// QuoteForMessage quotes s for an error message, cut to a readable length.
func QuoteForMessage(s string) string {
	const max = 80
	if len(s) > max {
		return strconv.Quote(s[:max]) + "…"
	}
	return strconv.Quote(s)
}
