package server

import (
	"net/http"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
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

// Every code of the error catalogue (package foldtype, every file) has an answer: its HTTP status
// in statusByCode, or a place among serverFaults — the codes no request is answered with, each
// with its reason, answered 500 INTERNAL should one reach a handler. A new code that is in neither
// fails here instead of becoming a 500 unnoticed.
func TestEveryCatalogueCodeHasAnAnswer(t *testing.T) {
	catalogue, err := codecheck.PackageConsts("../foldtype")
	if err != nil {
		t.Fatal(err)
	}
	if len(catalogue) < 40 {
		t.Fatalf("read %d codes from the catalogue, want them all", len(catalogue))
	}
	known := map[foldtype.Code]bool{}
	for name, v := range catalogue {
		code := foldtype.Code(v)
		known[code] = true
		status, mapped := statusByCode[code]
		reason, fault := serverFaults[code]
		switch {
		case mapped && fault:
			t.Errorf("%s (%s) has status %d and is listed among the server's faults (%s): keep one", code, name, status, reason)
		case !mapped && !fault:
			t.Errorf("%s (%s) has no answer: give it its status in statusByCode, or list it in serverFaults with the reason no request is answered with it", code, name)
		case mapped && status == http.StatusInternalServerError && code != foldtype.CodeInternal:
			t.Errorf("%s (%s) maps to 500: a known state answers its own status", code, name)
		}
	}
	for code := range serverFaults {
		if !known[code] {
			t.Errorf("serverFaults lists %s, which the catalogue does not hold", code)
		}
	}
	for code := range statusByCode {
		if !known[code] {
			t.Errorf("statusByCode maps %s, which the catalogue does not hold", code)
		}
	}
}
