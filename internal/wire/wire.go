// Package wire holds the Durable Streams wire details that foldstream's server and client share,
// in one place: header names, query parameters and the offset format (docs/server.md#offsets).
// It imports nothing beyond the standard library, so the client stays importable on its own.
package wire

import (
	"fmt"
	"math"
	"strconv"
)

// Protocol header names.
const (
	HeaderStreamNextOffset    = "Stream-Next-Offset"
	HeaderStreamUpToDate      = "Stream-Up-To-Date"
	HeaderStreamCursor        = "Stream-Cursor"
	HeaderStreamClosed        = "Stream-Closed"
	HeaderStreamSeq           = "Stream-Seq"
	HeaderStreamTTL           = "Stream-TTL"
	HeaderStreamExpiresAt     = "Stream-Expires-At"
	HeaderStreamForkedFrom    = "Stream-Forked-From"
	HeaderStreamForkOffset    = "Stream-Fork-Offset"
	HeaderStreamForkSubOffset = "Stream-Fork-Sub-Offset"
	HeaderSSEDataEncoding     = "Stream-Sse-Data-Encoding"
	HeaderProducerID          = "Producer-Id"
	HeaderProducerEpoch       = "Producer-Epoch"
	HeaderProducerSeq         = "Producer-Seq"
	HeaderProducerExpectedSeq = "Producer-Expected-Seq"
	HeaderProducerReceivedSeq = "Producer-Received-Seq"
)

// Foldstream's own headers, beyond the protocol (docs/server.md#how-http-messages-become-events).
const (
	// HeaderExpectedOffset is an optional POST precondition: the stream's tail must be exactly
	// this offset, or the append is refused with 409 and HeaderErrorCode OFFSET_CONFLICT.
	HeaderExpectedOffset = "Foldstream-Expected-Offset"
	// HeaderErrorCode carries the foldstream error code of an error answer.
	HeaderErrorCode = "Foldstream-Error-Code"
	// HeaderRequestID names one request and its answer: the server's log lines about the request
	// carry the same id.
	HeaderRequestID = "X-Request-Id"
	// HeaderProcessorOffset carries the offset a processor has reduced through.
	HeaderProcessorOffset = "Foldstream-Processor-Offset"
	// HeaderPaused is "true" on a HEAD of a paused stream and on a 423 STREAM_PAUSED refusal.
	HeaderPaused = "Foldstream-Paused"
	// HeaderPauseReason carries a paused stream's reason, percent-encoded (as by JavaScript's
	// encodeURIComponent; decode with decodeURIComponent or url.PathUnescape).
	HeaderPauseReason = "Foldstream-Pause-Reason"
	// HeaderProcessorState marks a processor snapshot that is the processor's last good state
	// (paused or failing; docs/operations.md#last-good-state).
	HeaderProcessorState = "Foldstream-Processor-State"
)

// ProcessorPrefix is where a foldstream server serves its processor routes by default
// (server.DefaultProcessorPrefix): ProcessorPrefix + slug + stream path. A node forwards a
// processor read to its owner on this route.
const ProcessorPrefix = "/v1/processor/"

// ProblemContentType is the Content-Type of every error answer's body: an RFC 9457 problem
// details object (docs/server.md#errors).
const ProblemContentType = "application/problem+json"

// Query parameters of a read, and the values of live.
const (
	QueryOffset  = "offset"
	QueryLive    = "live"
	QueryCursor  = "cursor"
	LiveLongPoll = "long-poll"
	LiveSSE      = "sse"
)

// Special offsets: the start of a stream and its tail.
const (
	OffsetStart = "-1"
	OffsetNow   = "now"
)

// BeyondTail is the position an offset with a non-zero first part maps to: past any tail
// (foldstream never hands such offsets out).
const BeyondTail = math.MaxInt64

// FormatOffset renders a position (a byte count for byte streams, a message count for JSON
// streams) as a wire offset: two runs of 16 decimal digits joined by "_", the first always zero.
// Offsets of one stream sort as strings in position order.
func FormatOffset(pos int64) string {
	if pos < 0 || pos > 9_999_999_999_999_999 {
		// Not an offset the server hands out (BeyondTail is one): written as "%016d" writes it.
		return fmt.Sprintf("%016d_%016d", 0, pos)
	}
	// Every answer carries an offset or two: formatted into one buffer, one allocation.
	b := [33]byte{16: '_'}
	for i := range 16 {
		b[i] = '0'
	}
	for i := 32; i > 16; i-- {
		b[i] = byte('0' + pos%10)
		pos /= 10
	}
	return string(b[:])
}

// ParseOffset parses a wire offset strictly: OffsetStart (position 0), OffsetNow (now=true) or
// exactly two runs of 16 decimal digits joined by "_". Anything else is an error.
func ParseOffset(s string) (pos int64, now bool, err error) {
	switch s {
	case OffsetStart:
		return 0, false, nil
	case OffsetNow:
		return 0, true, nil
	}
	if len(s) != 33 || s[16] != '_' {
		return 0, false, fmt.Errorf("malformed offset %q: use -1, now, or an offset the server returned", s)
	}
	for i := 0; i < len(s); i++ {
		if i != 16 && (s[i] < '0' || s[i] > '9') {
			return 0, false, fmt.Errorf("malformed offset %q: use -1, now, or an offset the server returned", s)
		}
	}
	seq, _ := strconv.ParseInt(s[:16], 10, 64)
	pos, _ = strconv.ParseInt(s[17:], 10, 64)
	if seq != 0 {
		return BeyondTail, false, nil
	}
	return pos, false, nil
}
