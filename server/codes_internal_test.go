package server

import (
	"testing"

	"github.com/foldstream/foldstream/internal/harness/codecheck"
)

// Every code the server answers with has its constant in the Go client (client/errors.go), so a
// client user can match it with errors.Is; add it there, named as in errors.go.
func TestEveryServerCodeIsNamedInTheClient(t *testing.T) {
	clientCodes, err := codecheck.Consts("../client/errors.go")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, v := range clientCodes {
		known[v] = true
	}
	for code := range statusByCode {
		if !known[string(code)] {
			t.Errorf("the server answers %s, but client/errors.go names no such code: add Code… = %q there (and its Err… sentinel)", code, code)
		}
	}
	for _, code := range codeByStatus {
		if !known[string(code)] {
			t.Errorf("the server answers %s, but client/errors.go names no such code", code)
		}
	}
}
