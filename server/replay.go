package server

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/foldstream/foldstream/foldtype"
)

// ProcessorReplayer is optionally implemented by a Processors: the operator's replay of one
// processor from an offset (docs/operations.md#replay). *host.Host implements it.
type ProcessorReplayer interface {
	// Replay rebuilds the processor's state from the log; req.Effects says whether ProcessEvent
	// runs again for the events it had processed.
	Replay(ctx context.Context, path, slug string, req foldtype.ReplayRequest) (foldtype.ReplayResult, error)
}

// replayOp is the replay verb of serveProcessorOp:
//
//	POST /v1/processor/<slug>/<stream>?op=replay[&from=N][&effects=none|again][&reason=…]
//	  → 200 {"op": "replay", "slug": …, "stream": …, "from": …, "through": …, "effects": …, "reduced": …}
//
// from is the first offset replayed (0, the default, is the start of the log); effects is none
// (the default) or again. It returns the verb's run, which sets *answer to the replay's result,
// and the audit line's parameters; a malformed query is answered here (run nil).
func replayOp(w http.ResponseWriter, p Processors, q url.Values, path, slug string, answer *map[string]any) (run func(ctx context.Context) error, audit []any) {
	rp, ok := p.(ProcessorReplayer)
	if !ok {
		writeCoded(w, foldtype.CodeNoRoute, "this server's processors take no replay", 0)
		return nil, nil
	}
	req := foldtype.ReplayRequest{Effects: foldtype.ReplayEffects(q.Get("effects"))}
	if s := q.Get("from"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			writeCoded(w, foldtype.CodeBadRequest, "from must be an offset (0 for the start of the log)", 0)
			return nil, nil
		}
		req.From = n
	}
	req, err := foldtype.CheckReplay(req)
	if err != nil {
		writeCoded(w, foldtype.CodeBadRequest, "from must be an offset (0 for the start of the log) and effects none or again", 0)
		return nil, nil
	}
	return func(ctx context.Context) error {
		res, err := rp.Replay(ctx, path, slug, req)
		if err == nil {
			*answer = map[string]any{"from": res.From, "through": res.Through, "effects": res.Effects, "reduced": res.Reduced}
		}
		return err
	}, []any{"from", req.From, "effects", string(req.Effects)}
}
