package protocol

import (
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/catalog"
)

// The kernel's and the catalogue's vocabulary as the protocol face spells it.

// streamRow is a stream's row.
type streamRow = driver.Stream

// StreamInfo is a stream's protocol metadata ([catalog.StreamInfo]).
type StreamInfo = catalog.StreamInfo

// ListOptions selects one page of [Protocol.ListStreams] ([catalog.ListOptions]).
type ListOptions = catalog.ListOptions

// errNoStream reports a stream that does not exist.
var errNoStream = driver.ErrNoStream

var (
	perr               = catalog.Perr
	quotePath          = catalog.QuotePath
	streamClosedError  = catalog.StreamClosedError
	staleEpochError    = catalog.StaleEpochError
	sequenceGapError   = catalog.SequenceGapError
	dataInt64          = catalog.DataInt64
	decodeEvent        = catalog.DecodeEvent
	eventOf            = catalog.EventOf
	msgKeys            = catalog.MsgKeys
	infoOf             = catalog.InfoOf
	notLive            = catalog.NotLive
	validateProducerID = catalog.ValidateProducerID
)

// The indexes of the members catalog.MsgKeys names.
const (
	mType      = catalog.MType
	mKey       = catalog.MKey
	mPayload   = catalog.MPayload
	mMetadata  = catalog.MMetadata
	mSource    = catalog.MSource
	mEphemeral = catalog.MEphemeral
)

// The liveness of a stream (catalog.Liveness).
const (
	streamLive    = catalog.Live
	streamMissing = catalog.Missing
	streamGone    = catalog.Gone
)

// DataExpectedSeq is the key of a SEQUENCE_GAP's expected seq ([catalog.DataExpectedSeq]).
const DataExpectedSeq = catalog.DataExpectedSeq

// DataTail is the key of a refusal's stream tail ([catalog.DataTail]).
const DataTail = catalog.DataTail
