package stream

import (
	"context"
	"time"

	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/catalog"
	"github.com/foldstream/foldstream/stream/internal/kernel"
	"github.com/foldstream/foldstream/stream/internal/protocol"
)

// The vocabulary both faces share (package catalog) and the protocol face's requests and results
// (package protocol), as this package offers them: the public names are aliases, so a caller
// sees one package, stream.

// StreamInfo is a stream's protocol metadata ([catalog.StreamInfo]).
type StreamInfo = catalog.StreamInfo

// ListOptions selects one page of [Protocol.ListStreams] and [Events.ListStreams].
type ListOptions = catalog.ListOptions

// Page sizes of ListStreams.
const (
	// DefaultListLimit is the page size when ListOptions.Limit is zero or negative.
	DefaultListLimit = catalog.DefaultListLimit
	// MaxListLimit is the largest page ListStreams returns.
	MaxListLimit = catalog.MaxListLimit
)

// CreateRequest asks to create (or idempotently ensure) a stream (docs/store.md#forks).
type CreateRequest = protocol.CreateRequest

// CreateResult is the outcome of [Protocol.CreateStream].
type CreateResult = protocol.CreateResult

// ProducerHeaders identify one request of an idempotent producer
// (docs/store.md#idempotent-producers).
type ProducerHeaders = protocol.ProducerHeaders

// AppendRequest asks to append a record, optionally closing the stream (docs/store.md#appending).
type AppendRequest = protocol.AppendRequest

// Provenance is what the HTTP server asks of a writer's JSON messages
// (docs/server.md#provenance); see [protocol.Provenance].
type Provenance = protocol.Provenance

// AppendResult is the outcome of [Protocol.AppendRecord].
type AppendResult = protocol.AppendResult

// ReadRequest asks for records of a stream ([Protocol.ReadRecords]).
type ReadRequest = protocol.ReadRequest

// ReadResult is the outcome of [Protocol.ReadRecords].
type ReadResult = protocol.ReadResult

// DefaultContentType is the content type of a stream created without one.
const DefaultContentType = protocol.DefaultContentType

// MaxMessagesPerRecord caps the messages of one JSON append, so one request cannot hold the
// writer for long.
const MaxMessagesPerRecord = protocol.MaxMessagesPerRecord

// DefaultReadMaxBytes is the default of ReadRequest.MaxBytes.
const DefaultReadMaxBytes = protocol.DefaultReadMaxBytes

// DefaultProducerReorderWait is the default of Config.ProducerReorderWait: long enough for a
// pipelined request that overtook its predecessor on loopback or a LAN even on a loaded machine,
// short enough that a real gap — a lost request, which its producer resends anyway — is still
// answered promptly.
const DefaultProducerReorderWait = protocol.DefaultProducerReorderWait

// MessageType is the event type the event view gives a stored JSON message that is not
// event-shaped ([catalog.MessageType]): an event of this type whose payload is
// {"value": <the message>}, so engines can run over any JSON stream.
const MessageType = catalog.MessageType

// MaxEventBytes is the ceiling on one event's stored body: [foldtype.MaxEventBytes].
const MaxEventBytes = catalog.MaxEventBytes

// Limits on names, checked by the store so that both views (and every server in front of them)
// refuse the same names. See docs/store.md#names.
const (
	// MaxStreamNameBytes caps a stream path's length in UTF-8 bytes.
	MaxStreamNameBytes = catalog.MaxStreamNameBytes
	// MaxProducerIDBytes caps an idempotent producer's id in UTF-8 bytes.
	MaxProducerIDBytes = catalog.MaxProducerIDBytes
)

// ValidateStreamName returns nil when name may name a new stream, and otherwise an
// INVALID_STREAM_NAME error saying why ([catalog.ValidateStreamName], docs/store.md#names).
func ValidateStreamName(name string) error { return catalog.ValidateStreamName(name) }

// Keys of foldtype.Error.Data set by the store; read them with the accessors below.
const (
	// DataTail is the stream's tail (int64) on STREAM_CLOSED and on an OFFSET_CONFLICT of a
	// protocol append.
	DataTail = catalog.DataTail
	// DataEpoch is the producer's current epoch (int64) on STALE_EPOCH.
	DataEpoch = catalog.DataEpoch
	// DataExpectedSeq and DataReceivedSeq describe a SEQUENCE_GAP (int64 each).
	DataExpectedSeq = catalog.DataExpectedSeq
	DataReceivedSeq = catalog.DataReceivedSeq
)

// TailOf returns the stream's tail carried by a STREAM_CLOSED or OFFSET_CONFLICT refusal.
func TailOf(err error) (int64, bool) { return catalog.TailOf(err) }

// EpochOf returns the producer's current epoch carried by a STALE_EPOCH refusal.
func EpochOf(err error) (int64, bool) { return catalog.EpochOf(err) }

// SequenceGapOf returns the expected and received producer seqs carried by a SEQUENCE_GAP refusal.
func SequenceGapOf(err error) (expected, received int64, ok bool) { return catalog.SequenceGapOf(err) }

// The catalogue's unexported vocabulary as the event face spells it.
var (
	perr              = catalog.Perr
	streamClosedError = catalog.StreamClosedError
	quotePath         = catalog.QuotePath
	infoOf            = catalog.InfoOf
	decodeEvent       = catalog.DecodeEvent
	eventOf           = catalog.EventOf
	unreadable        = catalog.Unreadable
	formatCreatedAt   = catalog.FormatCreatedAt
	msgKeys           = catalog.MsgKeys
)

// createdAtLayout is the ISO-8601 layout of createdAt: UTC with milliseconds.
const createdAtLayout = catalog.CreatedAtLayout

// The catalogue's reads of a stream's liveness (package catalog), as the event face calls them.

func (s *Store) loadLive(ctx context.Context, q driver.Reader, path string, now time.Time) (*driver.Stream, error) {
	return s.cat.LoadLive(ctx, q, path, now)
}

func (s *Store) liveStream(t *kernel.Tx, path string) (*kernel.StreamState, error) {
	return s.cat.LiveStream(t, path)
}

func (s *Store) expired(r *driver.Stream, now time.Time) bool { return s.cat.Expired(r, now) }
