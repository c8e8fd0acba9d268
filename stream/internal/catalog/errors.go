package catalog

import (
	"errors"
	"strings"

	"github.com/foldstream/foldstream/foldtype"
)

// The store's refusals are *foldtype.Error values with codes from the one catalogue in package
// foldstream (match them with errors.Is against foldtype.ErrStreamNotFound and friends). The data
// an HTTP answer needs travels in Error.Data under the keys below; read it with the accessors.

// Keys of foldtype.Error.Data set by the store.
const (
	// DataTail is the stream's tail (int64) on STREAM_CLOSED and on an OFFSET_CONFLICT of a
	// protocol append.
	DataTail = "tail"
	// DataEpoch is the producer's current epoch (int64) on STALE_EPOCH.
	DataEpoch = "epoch"
	// DataExpectedSeq and DataReceivedSeq describe a SEQUENCE_GAP (int64 each).
	DataExpectedSeq = "expectedSeq"
	DataReceivedSeq = "receivedSeq"
)

// Perr builds a coded refusal with a formatted message.
func Perr(code foldtype.Code, format string, args ...any) *foldtype.Error {
	return foldtype.NewError(code, nil, format, args...)
}

// StreamClosedError is the refusal of an append to a stream its writer closed.
func StreamClosedError(path string, tail int64) *foldtype.Error {
	return foldtype.NewError(foldtype.CodeStreamClosed, map[string]any{"path": path, DataTail: tail},
		"stream %s is closed", QuotePath(path))
}

// StaleEpochError refuses a producer whose epoch is older than the stream's.
func StaleEpochError(current int64) *foldtype.Error {
	return foldtype.NewError(foldtype.CodeStaleEpoch, map[string]any{DataEpoch: current},
		"producer epoch is stale (the current epoch is %d)", current)
}

// SequenceGapError refuses a producer that skipped sequence numbers.
func SequenceGapError(expected, received int64) *foldtype.Error {
	return foldtype.NewError(foldtype.CodeSequenceGap, map[string]any{DataExpectedSeq: expected, DataReceivedSeq: received},
		"producer sequence gap: expected seq %d, got %d", expected, received)
}

// DataInt64 returns the int64 stored under key in the Data of the first *foldtype.Error in err's
// chain.
func DataInt64(err error, key string) (int64, bool) {
	var e *foldtype.Error
	if !errors.As(err, &e) {
		return 0, false
	}
	v, ok := e.Data[key].(int64)
	return v, ok
}

// TailOf returns the stream's tail carried by a STREAM_CLOSED or OFFSET_CONFLICT refusal.
func TailOf(err error) (int64, bool) { return DataInt64(err, DataTail) }

// EpochOf returns the producer's current epoch carried by a STALE_EPOCH refusal.
func EpochOf(err error) (int64, bool) { return DataInt64(err, DataEpoch) }

// SequenceGapOf returns the expected and received producer seqs carried by a SEQUENCE_GAP refusal.
func SequenceGapOf(err error) (expected, received int64, ok bool) {
	expected, ok1 := DataInt64(err, DataExpectedSeq)
	received, ok2 := DataInt64(err, DataReceivedSeq)
	return expected, received, ok1 && ok2
}

// QuotePath quotes a stream path for messages.
func QuotePath(p string) string { return `"` + strings.ReplaceAll(p, `"`, `\"`) + `"` }
