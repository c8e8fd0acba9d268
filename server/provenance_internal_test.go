package server

import (
	"testing"

	"github.com/foldstream/foldstream/foldtype"
)

// A principal's source is marshalled once: every write of an equal principal (a custom Authorize
// may return a new pointer per request) shares its provenance; other principals get their own,
// and past the cache's bound a principal still gets the right stamp.
func TestProvenanceIsMadeOncePerPrincipal(t *testing.T) {
	var c stamps
	if p := c.provenanceOf(nil); p.Source != nil || p.ReservedKeyPrefix != reservedKeyPrefix {
		t.Fatalf("anonymous: source %s, prefix %q", p.Source, p.ReservedKeyPrefix)
	}
	alice := c.provenanceOf(&foldtype.Principal{Actor: "alice"})
	if got, want := string(alice.Source), `{"principal":{"actor":"alice"}}`; got != want {
		t.Fatalf("stamp %s, want %s", got, want)
	}
	if again := c.provenanceOf(&foldtype.Principal{Actor: "alice"}); again != alice {
		t.Errorf("an equal principal got a new provenance: the stamp was marshalled again")
	}
	bob := c.provenanceOf(&foldtype.Principal{Actor: "alice", Email: "a@example.com"})
	if bob == alice || string(bob.Source) != `{"principal":{"actor":"alice","email":"a@example.com"}}` {
		t.Errorf("another principal: %s", bob.Source)
	}
	for i := range maxCachedStamps {
		c.provenanceOf(&foldtype.Principal{Actor: "user", Email: itoa(int64(i))})
	}
	if n := len(c.by); n != maxCachedStamps {
		t.Errorf("cache holds %d principals, want the bound %d", n, maxCachedStamps)
	}
	past := c.provenanceOf(&foldtype.Principal{Actor: "carol"})
	if got, want := string(past.Source), `{"principal":{"actor":"carol"}}`; got != want {
		t.Errorf("past the bound: stamp %s, want %s", got, want)
	}
}
