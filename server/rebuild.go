package server

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/foldstream/foldstream/foldtype"
)

// ProcessorRebuilder is optionally implemented by a Processors: the rebuild of a processor's next
// version beside the running one, and reads by version
// (docs/operations.md#rebuild-beside-the-running-version). *host.Host implements it.
type ProcessorRebuilder interface {
	// Rebuild starts, or reports, the rebuild of the processor's registered next version.
	Rebuild(ctx context.Context, path, slug string) (foldtype.ProcessorRebuild, error)
	// VersionSnapshot reads the processor at one version: the running one answers; the one
	// being rebuilt fails with CATCHING_UP until the switch.
	VersionSnapshot(ctx context.Context, path, slug, version string) (foldtype.Snapshot[json.RawMessage], error)
}

// rebuildOp is the rebuild verb of serveProcessorOp:
//
//	POST /v1/processor/<slug>/<stream>?op=rebuild[&reason=…]
//	  → 200 {"op": "rebuild", "slug": …, "stream": …, "rebuild": {"version", "offset", "lag", "switched"}}
//
// A processor with no next version registered answers 409 CONFLICT. It returns the verb's run,
// which sets *answer to where the rebuild is, or nil when the processors take no rebuild (the
// answer is written here).
func rebuildOp(w http.ResponseWriter, p Processors, path, slug string, answer *map[string]any) func(ctx context.Context) error {
	rb, ok := p.(ProcessorRebuilder)
	if !ok {
		writeCoded(w, foldtype.CodeNoRoute, "this server's processors take no rebuild", 0)
		return nil
	}
	return func(ctx context.Context) error {
		st, err := rb.Rebuild(ctx, path, slug)
		if err == nil {
			*answer = map[string]any{"rebuild": st}
		}
		return err
	}
}

// serveProcessorVersion answers a snapshot read of one version of a processor:
//
//	GET /v1/processor/<slug>/<stream>?version=V → 200 {"offset", "state"} of the running version V;
//	  503 CATCHING_UP (with Foldstream-Processor-Offset) for the version being rebuilt beside it
func (s *Server) serveProcessorVersion(ctx context.Context, w http.ResponseWriter, r *http.Request, path, slug, version string) {
	rb, ok := s.cfg.Processors.(ProcessorRebuilder)
	if !ok {
		writeCoded(w, foldtype.CodeNoRoute, "this server's processors are not read by version", 0)
		return
	}
	snap, err := rb.VersionSnapshot(ctx, path, slug, version)
	if err != nil {
		s.writeProcessorError(w, r, path, slug, err)
		return
	}
	body, err := json.Marshal(snap)
	if err != nil {
		s.writeProcessorError(w, r, path, slug, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}
