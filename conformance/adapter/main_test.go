package main

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/testserver"
)

func TestAdapterSession(t *testing.T) {
	base := testserver.Start(t)
	a := newAdapter()
	path := fmt.Sprintf("/v1/stream/adapter-%d", time.Now().UnixNano())
	for _, step := range []struct {
		cmd  string
		want map[string]any // fields that must match in the result
	}{
		{`{"type":"init","serverUrl":"` + base + `"}`, map[string]any{"type": "init", "success": true}},
		{`{"type":"create","path":"` + path + `","contentType":"application/json"}`, map[string]any{"status": 201.0}},
		{`{"type":"idempotent-append","path":"` + path + `","producerId":"p","epoch":0,"autoClaim":false,"data":"{\"a\": 1}"}`, map[string]any{"success": true}},
		{`{"type":"append","path":"` + path + `","data":"[{\"b\":2}]","seq":1}`, map[string]any{"success": true}},
		{`{"type":"append","path":"` + path + `","data":"{\"c\":3}","seq":1}`, map[string]any{"errorCode": "SEQUENCE_CONFLICT", "status": 409.0}},
		{`{"type":"read","path":"` + path + `"}`, map[string]any{"upToDate": true}},
		{`{"type":"read","path":"` + path + `","offset":"bogus"}`, map[string]any{"errorCode": "INVALID_OFFSET"}},
		{`{"type":"idempotent-close","path":"` + path + `","producerId":"p","epoch":0,"autoClaim":false}`, map[string]any{"success": true}},
		{`{"type":"head","path":"` + path + `"}`, map[string]any{"streamClosed": true, "contentType": "application/json"}},
		{`{"type":"head","path":"/v1/stream/missing-adapter"}`, map[string]any{"errorCode": "NOT_FOUND"}},
		{`{"type":"validate","target":{"target":"idempotent-producer","epoch":-1}}`, map[string]any{"errorCode": "INVALID_ARGUMENT"}},
		{`{"type":"benchmark","iterationId":"i1","operation":{"op":"throughput_append","path":"` + path + `-bench","count":100,"size":10,"concurrency":1}}`,
			map[string]any{"success": true, "iterationId": "i1", "metrics": map[string]any{"bytesTransferred": 1000.0, "messagesProcessed": 100.0}}},
		{`{"type":"benchmark","iterationId":"i2","operation":{"op":"roundtrip","path":"` + path + `-rt","size":50,"live":"sse","contentType":"application/json"}}`,
			map[string]any{"success": true, "iterationId": "i2"}},
	} {
		res, _ := a.handle([]byte(step.cmd))
		b, _ := json.Marshal(res)
		var got map[string]any
		json.Unmarshal(b, &got)
		for k, v := range step.want {
			gv, _ := json.Marshal(got[k])
			wv, _ := json.Marshal(v)
			if string(gv) != string(wv) {
				t.Errorf("%s\n  %s: got %s, want %s (result %s)", step.cmd, k, gv, wv, b)
			}
		}
	}
	res, _ := a.handle([]byte(`{"type":"read","path":"` + path + `"}`))
	chunks, _ := res["chunks"].([]chunkOut)
	if len(chunks) != 1 || chunks[0].Data != `[{"a":1},{"b":2}]` || chunks[0].Offset != res["offset"] || res["streamClosed"] != true {
		t.Errorf("read of a closed stream: got %v, want one chunk with both messages ending at the result's offset, and streamClosed", res)
	}
	if _, stop := a.handle([]byte(`{"type":"shutdown"}`)); !stop {
		t.Error("shutdown must stop the adapter")
	}
}
