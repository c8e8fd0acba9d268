package stream_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// §17.5 (docs/engine.md#cause-chains): the store stamps source.origin on commit when a source has
// none, keeps a given one, and adds no source to an event without one.
func TestStoreStampsOriginOnEventsWithASource(t *testing.T) {
	ctx := context.Background()
	s, err := storeopen.Open(ctx, filepath.Join(t.TempDir(), "s.db"), storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	given := &foldtype.Source{Grant: "g"}
	got, err := s.Events().Stream("/o").Append(ctx, foldtype.EventInput{Type: "a", Source: given}, foldtype.EventInput{Type: "b", Source: &foldtype.Source{Origin: "/upstream"}}, foldtype.EventInput{Type: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if given.Origin != "" {
		t.Fatal("the caller's source was changed")
	}
	page, err := s.Events().Stream("/o").Read(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, evs := range [][]foldtype.Event{got, page.Events} {
		if evs[0].Source.Origin != "/o" || evs[1].Source.Origin != "/upstream" || evs[2].Source != nil {
			t.Fatalf("view %d: sources %+v %+v %+v", i, evs[0].Source, evs[1].Source, evs[2].Source)
		}
	}
}
