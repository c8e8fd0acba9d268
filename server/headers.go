package server

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/foldstream/foldstream/internal/wire"
)

// Foldstream's own headers (beyond the protocol); the names live in internal/wire, shared with
// the client.
const (
	// HeaderExpectedOffset is an optional POST precondition: the stream's tail must be exactly
	// this offset, or the append is refused with 409 and Foldstream-Error-Code OFFSET_CONFLICT
	// (the stream's tail in Stream-Next-Offset).
	HeaderExpectedOffset = wire.HeaderExpectedOffset
	// HeaderErrorCode carries the foldstream error code of an error answer (OFFSET_CONFLICT,
	// IDEMPOTENCY_CONFLICT, STREAM_NOT_FOUND, ...; see foldtype.Code).
	HeaderErrorCode = wire.HeaderErrorCode
	// HeaderRequestID is on every answer: the id of the request, taken from the request's own
	// X-Request-Id when it is sane (1 to 64 letters, digits and ".-_:"), else made by the server.
	// The server logs what it withholds from an answer (docs/server.md#errors) under this id.
	HeaderRequestID = wire.HeaderRequestID
	// HeaderProcessorOffset carries, on a processor route's 503 CATCHING_UP or 504 timeout, the
	// offset the processor has reduced through (in the wire offset format).
	HeaderProcessorOffset = wire.HeaderProcessorOffset
	// HeaderPaused is "true" on a HEAD of a paused stream and on a 423 STREAM_PAUSED refusal
	// (docs/server.md#paused-streams).
	HeaderPaused = wire.HeaderPaused
	// HeaderPauseReason carries a paused stream's reason, percent-encoded.
	HeaderPauseReason = wire.HeaderPauseReason
)

// setPaused sets the pause headers of a paused stream.
func setPaused(h http.Header, reason string) {
	h.Set(HeaderPaused, "true")
	h.Set(HeaderPauseReason, url.PathEscape(reason))
}

// FormatOffset renders a position as a wire offset ("%016d_%016d"; docs/server.md#offsets).
func FormatOffset(pos int64) string { return wire.FormatOffset(pos) }

// beyondTail is the position an offset with a non-zero read sequence maps to: past any tail.
const beyondTail = wire.BeyondTail

// ParseOffset parses a wire offset strictly (docs/server.md#offsets): "-1" (start), "now" (tail,
// now=true) or exactly two runs of 16 decimal digits joined by "_". Anything else is an error.
func ParseOffset(s string) (pos int64, now bool, err error) { return wire.ParseOffset(s) }

// parseCanonicalUint parses a non-negative decimal integer without sign, leading zeros, decimal
// point or exponent, at most max.
func parseCanonicalUint(s string, max int64) (int64, bool) {
	if s == "" || len(s) > 19 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v > max {
		return 0, false
	}
	return v, true
}

// parseDigits parses a plain run of digits (leading zeros allowed), at most max.
func parseDigits(s string, max int64) (int64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v > max {
		return 0, false
	}
	return v, true
}

// maxSafeInteger is 2^53−1, the producer epoch and seq limit (docs/server.md#idempotent-producers).
const maxSafeInteger = 1<<53 - 1

// maxTTLSeconds bounds Stream-TTL (about 290 years) so expiry arithmetic never overflows.
const maxTTLSeconds = 1 << 33

// ParseTTL parses a Stream-TTL value (docs/server.md#ttl-and-expiry).
func ParseTTL(s string) (int64, error) {
	v, ok := parseCanonicalUint(s, maxTTLSeconds)
	if !ok {
		return 0, fmt.Errorf("malformed Stream-TTL %q: use a whole number of seconds like 3600", s)
	}
	return v, nil
}

// ParseExpiresAt parses a Stream-Expires-At value: an RFC 3339 timestamp.
func ParseExpiresAt(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		return time.Time{}, fmt.Errorf("malformed Stream-Expires-At %q: use an RFC 3339 timestamp like 2030-01-02T15:04:05.000Z", s)
	}
	if t.Year() < 1970 || t.Year() > 9999 {
		return time.Time{}, fmt.Errorf("Stream-Expires-At %q is out of range", s)
	}
	return t, nil
}

// isTrue reports whether a Stream-Closed value means true (case-insensitive; anything else is
// ignored; docs/server.md#writes).
func isTrue(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// cursorEpoch is the origin of cursor intervals (docs/server.md#caching-and-the-cursor).
var cursorEpoch = time.Date(2024, 10, 9, 0, 0, 0, 0, time.UTC)

// cursorInterval is the width of one cursor interval.
const cursorInterval = 20 * time.Second

// nextCursor applies the cursor rule (docs/server.md#caching-and-the-cursor): the current interval, or — when the client's
// cursor is not behind it — the client's cursor plus a random jitter of at least one, so cursors
// never repeat or go backwards.
func nextCursor(now time.Time, client string) string {
	cur := int64(now.Sub(cursorEpoch) / cursorInterval)
	if c, err := strconv.ParseInt(client, 10, 64); err == nil && c >= cur && c < math.MaxInt64-200 {
		j := rand.Int64N(3600) + 1
		return itoa(c + max(1, (j+19)/20))
	}
	return itoa(cur)
}
