package testsupport

import (
	"encoding/json"
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// CommittedEvent returns a committed event for unit tests of reducers and processors
// (docs/engine.md#test-support): type typ at offset, path "/", createdAt offset seconds after the
// Unix epoch (as [ReduceProcessor] stamps them) and source.origin "/". payload may be nil (absent).
func CommittedEvent(offset int64, typ string, payload json.RawMessage) foldtype.Event {
	return foldtype.Event{
		Type: typ, Payload: payload, Offset: offset, Path: "/",
		CreatedAt: time.Unix(offset, 0).UTC().Format("2006-01-02T15:04:05.000Z"),
		Source:    &foldtype.Source{Origin: "/"},
	}
}
