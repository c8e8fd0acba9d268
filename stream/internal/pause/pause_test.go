package pause

import (
	"database/sql"
	"errors"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// A running stream's batches are not judged; a paused stream's admits control events, ephemerals
// and the store's own wake records, and refuses any other fresh event with the pause's reason.
func TestAdmitWhilePausedJudgesOnlyAPausedStream(t *testing.T) {
	if judge := admitWhilePaused(&driver.Stream{}); judge != nil {
		t.Fatal("a running stream's batch is judged")
	}
	judge := admitWhilePaused(&driver.Stream{Paused: sql.NullString{String: "disk swap", Valid: true}})
	for _, p := range []kernel.Pending{
		{Ctl: foldtype.ControlResume},
		{Ctl: foldtype.ControlPause, Reason: "again"},
		{Ephemeral: true},
		{Exempt: true},
	} {
		if err := judge(&p); err != nil {
			t.Fatalf("%+v refused: %v", p, err)
		}
	}
	err := judge(&kernel.Pending{})
	if !errors.Is(err, foldtype.ErrStreamPaused) || err.Error() != "stream paused: disk swap" {
		t.Fatalf("a plain event on a paused stream: %v, want STREAM_PAUSED with its reason", err)
	}
}
