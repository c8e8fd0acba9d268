package protocol

import "github.com/foldstream/foldstream/stream/internal/catalog"

// The catalogue's names that package stream reaches through the protocol face.

// StreamInfo is a stream's protocol metadata ([catalog.StreamInfo]).
type StreamInfo = catalog.StreamInfo

// ListOptions selects one page of [Protocol.ListStreams] ([catalog.ListOptions]).
type ListOptions = catalog.ListOptions

// DataExpectedSeq is the key of a SEQUENCE_GAP's expected seq ([catalog.DataExpectedSeq]).
const DataExpectedSeq = catalog.DataExpectedSeq

// DataTail is the key of a refusal's stream tail ([catalog.DataTail]).
const DataTail = catalog.DataTail
