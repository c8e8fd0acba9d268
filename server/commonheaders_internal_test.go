package server

import (
	"net/http"
	"testing"
)

// setCommonHeaders stores its headers under their keys as given: each must be canonical, or
// Header.Get would not find it; and an Add to one of them must leave the others as they were.
func TestCommonHeadersAreCanonicalAndApart(t *testing.T) {
	for _, k := range commonHeaderKeys {
		if c := http.CanonicalHeaderKey(k); c != k {
			t.Errorf("common header %q is not canonical (%q)", k, c)
		}
	}
	h := http.Header{}
	setCommonHeaders(h, "r-1")
	for i, k := range commonHeaderKeys {
		if got := h.Values(k); len(got) != 1 || got[0] != commonHeaderValues[i] {
			t.Errorf("%s: %q, want %q", k, got, commonHeaderValues[i])
		}
	}
	h.Add(commonHeaderKeys[0], "extra")
	if got := h.Values(commonHeaderKeys[1]); len(got) != 1 || got[0] != commonHeaderValues[1] {
		t.Errorf("after an Add to %s, %s is %q", commonHeaderKeys[0], commonHeaderKeys[1], got)
	}
}
