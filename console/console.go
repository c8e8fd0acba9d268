// Package console is foldstream's web console: plain HTML, CSS and JavaScript modules embedded in
// the binary (no build step, nothing fetched at run time). Package server serves it at "/" with
// its files under "/console/"; see docs/console.md.
//
// The console lists streams, follows a stream's messages over SSE (the platform's own records
// behind a toggle), follows each processor's live state with the module livestate.js, which is
// also meant for applications' own pages (served at /console/livestate.js), and lists the
// processors of every stream by state with their lag in events and in seconds. Its writes are the
// operator's verbs (pause, resume, retry, replay, skip, bulk pause and resume, redrive and discard
// of parked events), each after a confirmation, through the server's processor routes; its own
// files are only read (GET and HEAD).
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/foldstream/foldstream/internal/problem"
)

//go:embed static
var static embed.FS

// FilesPrefix is the URL path the console's files are served under.
const FilesPrefix = "/console/"

// Config tells the console where the server's routes are.
type Config struct {
	// StreamPrefix is where streams are served, e.g. "/v1/stream/".
	StreamPrefix string
	// ProcessorPrefix is where processors are served, e.g. "/v1/processor/"; empty when the
	// server has no processor host.
	ProcessorPrefix string
	// ListPath is the stream listing route, e.g. "/v1/streams".
	ListPath string
	// InfoPath is the stream information route, e.g. "/v1/streams/info".
	InfoPath string
	// ProcessorsPath is the processor listing route, e.g. "/v1/processors"; empty when the
	// server has no processor host.
	ProcessorsPath string
}

type file struct {
	body        []byte
	contentType string
	etag        string
}

// Handler serves the console: "/" is the page, FilesPrefix+name its files, and
// FilesPrefix+"config.json" the routes of cfg. It answers only GET and HEAD.
type Handler struct {
	files map[string]file
}

var _ http.Handler = (*Handler)(nil)

// New returns the console's handler for a server whose routes are cfg.
func New(cfg Config) *Handler {
	h := &Handler{files: make(map[string]file)}
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic("console: embedded files missing: " + err.Error()) // a build defect, not a user error
	}
	_ = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		h.add(p, b)
		return nil
	})
	conf, _ := json.Marshal(struct {
		StreamPrefix    string `json:"streamPrefix"`
		ProcessorPrefix string `json:"processorPrefix,omitempty"`
		ListPath        string `json:"listPath"`
		InfoPath        string `json:"infoPath"`
		ProcessorsPath  string `json:"processorsPath,omitempty"`
	}{cfg.StreamPrefix, cfg.ProcessorPrefix, cfg.ListPath, cfg.InfoPath, cfg.ProcessorsPath})
	h.add("config.json", conf)
	return h
}

func (h *Handler) add(name string, b []byte) {
	sum := sha256.Sum256(b)
	h.files[name] = file{body: b, contentType: contentType(name), etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".js", ".mjs":
		return "text/javascript; charset=utf-8"
	case ".json":
		return "application/json"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	default:
		return "application/octet-stream"
	}
}

// Serves reports whether urlPath is one of the console's paths ("/" or under FilesPrefix).
func Serves(urlPath string) bool {
	return urlPath == "/" || strings.HasPrefix(urlPath, FilesPrefix)
}

// ServeHTTP serves the page and its files. Files are revalidated on every load (ETag, no-cache),
// so an upgraded binary never serves a stale mix.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD, OPTIONS")
		problem.Write(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "the console is read-only: use GET", nil) // foldtype.CodeMethodNotAllowed
		return
	}
	name := "index.html"
	if r.URL.Path != "/" {
		name = strings.TrimPrefix(r.URL.Path, FilesPrefix)
	}
	f, ok := h.files[name]
	if !ok {
		problem.Write(w, http.StatusNotFound, "NO_ROUTE", "no such console file", nil) // foldtype.CodeNoRoute
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", f.contentType)
	hd.Set("Cache-Control", "no-cache")
	hd.Set("ETag", f.etag)
	if name == "index.html" {
		// The page holds the reader's token: nothing but its own files may run in it, and no
		// other site may frame it.
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; "+
			"img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
	}
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
}
