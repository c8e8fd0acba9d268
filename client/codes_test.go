package client_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/internal/harness/codecheck"
)

// clientOwnCodes are the client's codes for failures no server reports; every other client code
// is one of the catalogue's.
var clientOwnCodes = map[string]bool{
	"CodeRateLimited": true, "CodeUnsupported": true, "CodeUnexpectedStatus": true, "CodeNetwork": true,
	"CodeParse": true, "CodeProducerClosed": true, "CodeInvalidArgument": true, "CodeInvalidOffset": true,
	"CodeProducerFailed": true,
}

// The client names the server's codes exactly as the catalogue of package foldtype
// (foldtype/errors.go) does: same constant name, same value; its own few codes collide with none of the catalogue's.
func TestClientCodesAreTheCatalogues(t *testing.T) {
	catalogue, err := codecheck.PackageConsts("../foldtype") // errors.go, and any other file of package foldtype
	if err != nil {
		t.Fatal(err)
	}
	ours, err := codecheck.Consts("errors.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(catalogue) < 30 || len(ours) < 30 {
		t.Fatalf("read %d catalogue codes and %d client codes; the files' shape changed", len(catalogue), len(ours))
	}
	byValue := map[string]string{}
	for name, v := range catalogue {
		byValue[v] = name
	}
	for name, v := range ours {
		want, inCatalogue := catalogue[name]
		switch {
		case clientOwnCodes[name] && inCatalogue:
			t.Errorf("client.%s is listed as the client's own but errors.go declares it too", name)
		case clientOwnCodes[name] && byValue[v] != "":
			t.Errorf("client.%s = %q collides with foldstream.%s", name, v, byValue[v])
		case clientOwnCodes[name]:
		case !inCatalogue:
			t.Errorf("client.%s = %q has no namesake in errors.go (add it to clientOwnCodes if it is the client's own)", name, v)
		case v != want:
			t.Errorf("client.%s = %q, but foldstream.%s = %q", name, v, name, want)
		}
	}
}

// Against foldstream's server the code is the one it names in Foldstream-Error-Code, also where
// the status alone says less; against the reference server, which sends no codes, it follows the
// status.
func TestErrorCodesComeFromTheServerElseFromTheStatus(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, base string) {
		ctx := ctxT(t)
		s := newStream(t, base)
		if _, err := s.Head(ctx); !errors.Is(err, client.ErrStreamNotFound) {
			t.Fatalf("head of a missing stream: got %v, want STREAM_NOT_FOUND", err)
		}
		if _, err := s.Create(ctx, client.CreateOptions{ContentType: "text/plain", Data: []byte("a")}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, []byte("b"), client.WithContentType("application/json")); !errors.Is(err, client.ErrConflict) {
			t.Errorf("append of another content type: got %v, want CONFLICT", err)
		}
		// A precondition only foldstream knows: its 409 is OFFSET_CONFLICT, not the status's CONFLICT.
		_, err := s.Append(ctx, []byte("c"), client.WithHeader("Foldstream-Expected-Offset", "-1"))
		if strings.HasSuffix(t.Name(), "/foldstream") {
			var ce *client.Error
			if !errors.Is(err, client.ErrOffsetConflict) || !errors.As(err, &ce) || ce.Status != http.StatusConflict {
				t.Errorf("append with a stale expected offset: got %v, want OFFSET_CONFLICT (409)", err)
			}
		} else if err != nil {
			t.Errorf("the reference server ignores Foldstream-Expected-Offset, but: %v", err)
		}
		if err := s.Delete(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx); !errors.Is(err, client.ErrStreamNotFound) && !errors.Is(err, client.ErrStreamGone) {
			t.Errorf("second delete: got %v, want STREAM_NOT_FOUND or STREAM_GONE", err)
		}
	})
}

// A URL in a message is readable and shows no credentials: no user information, no value of a
// credential-like query parameter.
func TestRedactURLShowsNoCredentials(t *testing.T) {
	for raw, want := range map[string]string{
		"http://ivan:secret@host:1/v1/stream/carts%2Fivan?offset=-1&token=secret": "http://host:1/v1/stream/carts/ivan?offset=-1&token=REDACTED",
		"https://h/v1/stream/a%20b?access_key=secret&live=sse":                    "https://h/v1/stream/a b?access_key=REDACTED&live=sse",
		"http://h/v1/stream/x?X-Amz-Signature=secret":                             "http://h/v1/stream/x?X-Amz-Signature=REDACTED",
		"http://h/%zz?token=secret":                                               "(unparsable URL)",
	} {
		if got := client.RedactURL(raw); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", raw, got, want)
		}
	}
	s, err := client.NewStream("http://ivan:secret@h/v1/stream/x?token=secret", client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s.String(), "secret") {
		t.Errorf("Stream.String() = %q shows the credentials", s.String())
	}
	e := &client.Error{Code: client.CodeUnauthorized, Status: 401, URL: "http://ivan:secret@h/v1/stream/x?token=secret"}
	if strings.Contains(e.Error(), "secret") {
		t.Errorf("Error() = %q shows the credentials", e.Error())
	}
}
