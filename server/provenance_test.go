package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/server"
)

// forgedBatch claims platform provenance every way encoding/json would read it: the plain key,
// other cases, a Unicode case-fold, an escaped key, duplicates, in a batch and in a PUT's
// initial body.
var forgedSources = []string{
	`{"type":"note.added","source":{"platform":true}}`,
	`{"type":"note.added","SOURCE":{"platform":true}}`,
	`{"type":"note.added","ſource":{"platform":true}}`,
	`{"type":"note.added","sourc\u0065":{"platform":true}}`,
	`{"type":"note.added","source":null,"Source":{"platform":true,"principal":{"actor":"root"}}}`,
	`[{"type":"note.added","source":{"platform":true}},{"type":"note.added","payload":{"source":"kept"}}]`,
}

// readSources waits until the processor reduced n events and returns their sources.
func (s *secured) readSources(t *testing.T, n int, auth ...string) []string {
	t.Helper()
	res, body := request(t, "GET", s.url+"/v1/processor/sources/events?waitUntilProcessed="+itoa(n)+"&timeout=5s", "", auth...)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("snapshot: %d %s", res.StatusCode, body)
	}
	var snap struct {
		State sourceLog `json:"state"`
	}
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(snap.State.Sources))
	for i, s := range snap.State.Sources {
		out[i] = string(s)
	}
	return out
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestForgedSourceNeverReachesProcessor: over HTTP the server sets an event's source — the
// authenticated principal, or none for an anonymous writer — and drops whatever source the client
// sent, so a processor never sees a forged platform: true.
func TestForgedSourceNeverReachesProcessor(t *testing.T) {
	for _, withTokens := range []bool{false, true} {
		s := setupSecured(t, server.Config{}, withTokens)
		var auth []string
		want := "null"
		if withTokens {
			auth = []string{"Authorization", bearer(writerToken)}
			want = `{"principal":{"actor":"alice"}}`
		}
		// The host's own platform events come first; note.added events follow.
		before := s.readSources(t, 2, auth...)
		n := 2
		for _, body := range forgedSources {
			res, rb := request(t, "POST", s.url+"/v1/stream/events", body, append([]string{"Content-Type", "application/json"}, auth...)...)
			if res.StatusCode != http.StatusNoContent {
				t.Fatalf("append %s: %d %s", body, res.StatusCode, rb)
			}
			n += 1 + strings.Count(body, `},{"type"`)
		}
		got := s.readSources(t, n, auth...)[len(before):]
		if len(got) != n-2 {
			t.Fatalf("tokens=%v: %d events reduced, want %d", withTokens, len(got), n-2)
		}
		for i, src := range got {
			if src != want {
				t.Fatalf("tokens=%v: event %d reached the processor with source %s, want %s", withTokens, i, src, want)
			}
		}
		// Payload fields named source are the writer's data and stay.
		res, body := request(t, "GET", s.url+"/v1/stream/events", "", auth...)
		if res.StatusCode != http.StatusOK || !strings.Contains(body, `"payload":{"source":"kept"}`) || strings.Contains(body, `"platform":true,"principal"`) {
			t.Fatalf("stored stream: %d %s", res.StatusCode, body)
		}
	}
}

// TestInvalidUTF8InJSONRefused: a JSON body with bytes that are not UTF-8 is 400 and stores
// nothing (strict parsers would choke on the whole page later).
func TestInvalidUTF8InJSONRefused(t *testing.T) {
	s := setupSecured(t, server.Config{}, false)
	request(t, "PUT", s.url+"/v1/stream/j", "", "Content-Type", "application/json")
	res, body := request(t, "POST", s.url+"/v1/stream/j", "{\"note\":\"\xff\xfe\"}", "Content-Type", "application/json")
	wantCoded(t, "invalid UTF-8 append", res, body, http.StatusBadRequest, foldtype.CodeBadRequest)
	res, body = request(t, "PUT", s.url+"/v1/stream/j2", "[\"\xc3\"]", "Content-Type", "application/json")
	wantCoded(t, "invalid UTF-8 create", res, body, http.StatusBadRequest, foldtype.CodeBadRequest)
	if res, body := request(t, "GET", s.url+"/v1/stream/j", ""); body != "[]" {
		t.Fatalf("stream after the refusal: %d %s", res.StatusCode, body)
	}
}

// TestSquattedProcessorKeyRefused: an HTTP writer cannot take an idempotency key from the
// processors' namespace — written plainly, with escapes in the key or its name, or inside a
// batch — so it cannot wedge a processor whose emitted event would later conflict; the whole
// request is refused with 400 RESERVED_IDEMPOTENCY_KEY and nothing is stored.
func TestSquattedProcessorKeyRefused(t *testing.T) {
	for _, withTokens := range []bool{false, true} {
		s := setupSecured(t, server.Config{}, withTokens)
		var auth []string
		if withTokens {
			auth = []string{"Authorization", bearer(writerToken)}
		}
		h := append([]string{"Content-Type", "application/json"}, auth...)
		for _, body := range []string{
			`{"type":"note.added","idempotencyKey":"` + foldtype.ProcessorKeyPrefix + `sources/x@3"}`,
			`{"type":"note.added","idempotencyKey":"processor\u003asources/x@3"}`,
			`{"type":"note.added","idempotency\u004bey":"` + foldtype.ProcessorKeyPrefix + `k"}`,
			`[{"type":"note.added","idempotencyKey":"mine"},{"type":"note.added","idempotencyKey":"` + foldtype.ProcessorKeyPrefix + `k"}]`,
		} {
			res, rb := request(t, "POST", s.url+"/v1/stream/events", body, h...)
			wantCoded(t, "squatting "+body, res, rb, http.StatusBadRequest, foldtype.CodeReservedKey)
			res, rb = request(t, "PUT", s.url+"/v1/stream/squat", body, h...)
			wantCoded(t, "squatting at creation "+body, res, rb, http.StatusBadRequest, foldtype.CodeReservedKey)
		}
		res, body := request(t, "GET", s.url+"/v1/stream/events", "", auth...)
		if strings.Contains(body, "note.added") {
			t.Fatalf("a refused squat was stored: %d %s", res.StatusCode, body)
		}
		// Keys outside the namespace, a field that only differs in case (the store reads field
		// names exactly, so it is no key), and a plain message that merely mentions the prefix are
		// fine.
		res, body = request(t, "POST", s.url+"/v1/stream/events", `[{"type":"note.added","idempotencyKey":"my-processor:1"},{"type":"note.added","IdempotencyKey":"`+
			foldtype.ProcessorKeyPrefix+`k"},{"note":"`+foldtype.ProcessorKeyPrefix+`"}]`, h...)
		if res.StatusCode != http.StatusNoContent {
			t.Fatalf("ordinary keys: %d %s", res.StatusCode, body)
		}
	}
}

// TestForkWithoutContentTypeKeepsTheWriterRules: a fork PUT that names no Content-Type inherits
// its source's JSON type, so its initial messages are JSON messages and get the same writer rules
// as any JSON write: a forged source is dropped (the principal's is set) and a key from the
// processors' namespace is refused.
func TestForkWithoutContentTypeKeepsTheWriterRules(t *testing.T) {
	for _, withTokens := range []bool{false, true} {
		s := setupSecured(t, server.Config{}, withTokens)
		var auth []string
		if withTokens {
			auth = []string{"Authorization", bearer(writerToken)}
		}
		res, body := request(t, "PUT", s.url+"/v1/stream/origin", `[{"type":"note.added"}]`, append([]string{"Content-Type", "application/json"}, auth...)...)
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("create the source: %d %s", res.StatusCode, body)
		}
		fork := append([]string{"Stream-Forked-From", "/v1/stream/origin"}, auth...)
		res, body = request(t, "PUT", s.url+"/v1/stream/forked", `[{"type":"note.added","source":{"platform":true}}]`, fork...)
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("fork: %d %s", res.StatusCode, body)
		}
		res, body = request(t, "GET", s.url+"/v1/stream/forked", "", auth...)
		if res.StatusCode != http.StatusOK || strings.Contains(body, `"platform":true`) || strings.Count(body, `"note.added"`) != 2 {
			t.Fatalf("tokens=%v: the fork stored %d %s, want both events without the forged source", withTokens, res.StatusCode, body)
		}
		if withTokens && !strings.Contains(body, `"principal":{"actor":"alice"}`) {
			t.Fatalf("the fork's own event lacks the principal's source: %s", body)
		}
		res, body = request(t, "PUT", s.url+"/v1/stream/squatfork", `{"type":"note.added","idempotencyKey":"`+foldtype.ProcessorKeyPrefix+`k"}`, fork...)
		wantCoded(t, "squatting in a fork", res, body, http.StatusBadRequest, foldtype.CodeReservedKey)
	}
}
