package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
)

// The processor the console shows: a shopping cart per stream.

type itemAdded struct {
	SKU        string `json:"sku" jsonschema:"minLength=1"`
	Qty        int    `json:"qty" jsonschema:"minimum=1"`
	PriceCents int    `json:"priceCents" jsonschema:"minimum=0"`
}

type cart struct {
	Items      map[string]int `json:"items"`
	Count      int            `json:"count"`
	TotalCents int            `json:"totalCents"`
}

var cartContract = foldstream.MustDefineContract(foldstream.ContractConfig[cart]{
	Slug:        "cart",
	Version:     "1",
	Description: "what is in a cart",
	Consumes:    []string{"item.added"},
	Events:      []foldstream.EventDefinition{foldstream.DefineEvent[itemAdded]("item.added", "an item was put in the cart")},
	Initial:     func() (cart, error) { return cart{Items: map[string]int{}}, nil },
})

type cartProcessor struct{ foldstream.Base[cart] }

func (cartProcessor) Reduce(a foldstream.ReduceArgs[cart]) (cart, bool, error) {
	it := a.Payload.(itemAdded)
	next := cart{Items: make(map[string]int, len(a.State.Items)+1), Count: a.State.Count + it.Qty, TotalCents: a.State.TotalCents + it.Qty*it.PriceCents}
	for k, v := range a.State.Items {
		next.Items[k] = v
	}
	next.Items[it.SKU] += it.Qty
	return next, true, nil
}

// poisonCured, when set, makes the poison harmless: the fault fixed before a redrive.
var poisonCured atomic.Bool

// ProcessEvent panics on an item whose SKU is "poison" (unless poisonCured): the
// failing-processor tests' fault.
func (cartProcessor) ProcessEvent(a *foldstream.ProcessEventArgs[cart]) error {
	if it, ok := a.Payload.(itemAdded); ok && it.SKU == "poison" && !poisonCured.Load() {
		panic("poisoned item")
	}
	return nil
}

// setup runs a store, a host with the cart processor on carts, and the HTTP server on loopback.
func setup(t *testing.T, carts ...string) (base string) {
	return setupWith(t, server.Config{}, carts...)
}

// setupWith is setup with cfg for the server (Processors and LongPollTimeout filled in).
func setupWith(t *testing.T, cfg server.Config, carts ...string) (base string) {
	t.Helper()
	base, _ = setupHost(t, cfg, carts...)
	return base
}

// setupHost is setupWith that also returns the host, for a test that registers more on it.
func setupHost(t *testing.T, cfg server.Config, carts ...string) (base string, h *host.Host) {
	t.Helper()
	ctx := context.Background()
	st, err := storeopen.Open(context.Background(), filepath.Join(t.TempDir(), "e2e.db"), storeopen.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	h, err = host.New(st, host.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Shutdown(sctx)
	})
	for _, p := range carts {
		if _, err := host.Register(ctx, h, p, cartProcessor{foldstream.NewBase(cartContract)}); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Processors = h
	cfg.LongPollTimeout = 2 * time.Second
	srv, err := server.New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv}
	hs.RegisterOnShutdown(func() { _ = srv.Shutdown(context.Background()) })
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	})
	return "http://" + ln.Addr().String(), h
}

// writeToken, when set, is sent with post and create (the tokens test sets it).
var writeToken string

// post appends body to the stream at path over HTTP and returns the position of the tail after it.
func post(t *testing.T, base, path, contentType, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/stream"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	if writeToken != "" {
		req.Header.Set("Authorization", "Bearer "+writeToken)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		t.Fatalf("POST %s: status %d", path, res.StatusCode)
	}
	return position(t, res.Header.Get("Stream-Next-Offset"))
}

// position returns the position of a protocol offset ("0000000000000000_0000000000000005" is 5).
func position(t *testing.T, offset string) int {
	t.Helper()
	_, pos, _ := strings.Cut(offset, "_")
	n, err := strconv.ParseInt(pos, 10, 64)
	if err != nil {
		t.Fatalf("offset %q: %v", offset, err)
	}
	return int(n)
}

func create(t *testing.T, base, path, contentType string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, base+"/v1/stream"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	if writeToken != "" {
		req.Header.Set("Authorization", "Bearer "+writeToken)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("PUT %s: status %d", path, res.StatusCode)
	}
}

func addItem(t *testing.T, base, path, sku string, qty, price int) int {
	t.Helper()
	return post(t, base, path, "application/json",
		fmt.Sprintf(`{"type":"item.added","payload":{"sku":%q,"qty":%d,"priceCents":%d}}`, sku, qty, price))
}

// browser starts headless Chromium and returns a tab's context. It fails — never skips — when
// Chromium is missing: .ci/run installs it, and a skipped browser test would pass unnoticed.
// Every JavaScript exception or console error in the page fails the test.
func browser(t *testing.T, width, height int) context.Context {
	t.Helper()
	bin := os.Getenv("CHROMIUM")
	if bin == "" {
		bin = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(bin); err != nil {
		t.Fatalf("chromium not found at %s (apt-get install chromium, or set CHROMIUM): %v", bin, err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("force-color-profile", "srgb"),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	messages := chromedp.Console(ctx)        // subscribed now: nothing the page logs is missed
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	var mu sync.Mutex
	var pageErrors []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			// Exceptions and the page's own console.error fail the test; the browser's log
			// (a network error, say) is only reported.
			if m.IsException() || (m.Type == chromedp.ConsoleError && m.Source == "") {
				mu.Lock()
				pageErrors = append(pageErrors, m.String())
				mu.Unlock()
			} else if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning {
				t.Logf("browser: %s", m)
			}
		}
	}()
	t.Cleanup(func() {
		cancelTab()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, e := range pageErrors {
			t.Errorf("page error: %s", e)
		}
	})
	return ctx
}

// waitFor polls the JavaScript expression cond in the page until it is true, for at most 20 s.
func waitFor(t *testing.T, ctx context.Context, what, cond string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(wctx, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(0))); err != nil {
		html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("main").outerHTML`))
		// The dialog and the note live outside main: what a confirmation said, or why none opened.
		outside, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`["confirm", "note"].map((id) => { const e = document.getElementById(id); return id + ": " + (e ? (e.open === false ? "(closed) " : "") + (e.hidden ? "(hidden) " : "") + e.textContent : "(none)") }).join("\n")`))
		t.Fatalf("waiting for %s (%s): %v\npage main:\n%s\n%s", what, cond, err, html, outside)
	}
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector(`+strconv.Quote(sel)+`)?.textContent ?? ""`))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// screenshot saves the page as PNG under FOLDSTREAM_SCREENSHOT_DIR (default: a foldstream-e2e
// folder in the system's temporary directory, kept after the test) and returns the file.
func screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	dir := os.Getenv("FOLDSTREAM_SCREENSHOT_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "foldstream-e2e")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", file)
	return file
}

// TestConsoleFollowsStreamsAndLiveState opens the console in Chromium, sees a stream appear in the
// list after an append, opens it, and sees the cart processor's live state and revision change
// after another append, and the new message arrive.
func TestConsoleFollowsStreamsAndLiveState(t *testing.T) {
	base := setup(t, "/carts/alice", "/carts/bob")
	ctx := browser(t, 1280, 860)

	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	// Registering a processor wakes its stream: the carts are listed before any append.
	waitFor(t, ctx, "the carts", `document.querySelectorAll("tbody tr").length === 2`)

	create(t, base, "/orders", "application/json")
	post(t, base, "/orders", "application/json", `[{"type":"order.placed","payload":{"cart":"/carts/bob","totalCents":250}},{"type":"order.paid","payload":{"cart":"/carts/bob"}}]`)
	waitFor(t, ctx, "the new stream in the list", `!!document.querySelector('tr[data-path="/orders"]')`)
	if got := text(t, ctx, `tr[data-path="/orders"] td.tail`); got != "2" {
		t.Errorf("tail cell %q, want offset 2", got)
	}
	// More streams for a list worth looking at; the tail of one that grows follows live.
	addItem(t, base, "/carts/alice", "espresso", 2, 320)
	addItem(t, base, "/carts/bob", "croissant", 1, 250)
	create(t, base, "/audit/2026-11-30", "text/plain")
	post(t, base, "/audit/2026-11-30", "text/plain", "alice opened the shop\n")
	waitFor(t, ctx, "four streams", `document.querySelectorAll("tbody tr").length === 4`)
	n := addItem(t, base, "/carts/alice", "croissant", 1, 250)
	aliceTail := `Number(document.querySelector('tr[data-path="/carts/alice"] td.tail').textContent.replace(/\D/g, ""))`
	waitFor(t, ctx, "alice's tail to follow", fmt.Sprintf(`%s >= %d`, aliceTail, n))
	screenshot(t, ctx, "console-streams.png")

	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`tr[data-path="/carts/alice"] a`))); err != nil {
		t.Fatal(err)
	}
	state := `(document.querySelector('article[data-slug="cart"] pre.state')?.textContent ?? "")`
	waitFor(t, ctx, "the cart's live state", state+`.includes('"croissant": 1')`)
	rev1 := text(t, ctx, `article[data-slug="cart"] .rev`)
	if rev1 == "" {
		t.Fatal("no live-state revision shown")
	}
	// Two items after the platform's created and woken events.
	waitFor(t, ctx, "the messages", `document.querySelectorAll("ol.messages li").length === 4`)

	n = addItem(t, base, "/carts/alice", "cake", 3, 410)
	waitFor(t, ctx, "the state after the append", state+`.includes('"cake": 3') && `+state+`.includes('"count": 6')`)
	if rev2 := text(t, ctx, `article[data-slug="cart"] .rev`); rev2 == rev1 {
		t.Errorf("live-state revision still %s after a change (was %s)", rev2, rev1)
	}
	waitFor(t, ctx, "the checkpoint offset", fmt.Sprintf(`Number(document.querySelector('article[data-slug="cart"] .off').textContent) >= %d`, n))
	waitFor(t, ctx, "the new message", `document.querySelectorAll("ol.messages li").length === 5 && document.querySelector("ol.messages li").textContent.includes("cake")`)
	screenshot(t, ctx, "console-stream.png")

	// Phone width: one column, nothing wider than the window.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "no horizontal scrolling at 390 px", `document.documentElement.scrollWidth <= window.innerWidth`)
	screenshot(t, ctx, "console-phone.png")
}

// TestConsoleWithoutHost is the console of `foldstream serve`: streams and messages, and a note
// instead of processors.
func TestConsoleWithoutHost(t *testing.T) {
	ctx0 := context.Background()
	st, err := storeopen.Open(context.Background(), filepath.Join(t.TempDir(), "e2e.db"), storeopen.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	srv, err := server.New(st, server.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv}
	hs.RegisterOnShutdown(func() { _ = srv.Shutdown(context.Background()) })
	go func() { _ = hs.Serve(ln) }()
	defer hs.Shutdown(ctx0)
	base := "http://" + ln.Addr().String()

	ctx := browser(t, 1024, 700)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the empty list", `document.querySelector(".empty:not([hidden])")?.textContent.includes("No streams yet")`)
	create(t, base, "/greetings", "text/plain")
	post(t, base, "/greetings", "text/plain", "hello")
	waitFor(t, ctx, "the new stream", `!!document.querySelector('tr[data-path="/greetings"]')`)
	// A paused stream is marked in the list, its reason on hover (docs/server.md#paused-streams).
	create(t, base, "/orders", "application/json")
	post(t, base, "/orders", "application/json", `{"type":"events.iterate.com/stream/paused","payload":{"reason":"stock count"}}`)
	waitFor(t, ctx, "the paused mark", `document.querySelector('tr[data-path="/orders"] .chip.paused')?.title === "stream paused: stock count"`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`tr[data-path="/greetings"] a`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the no-host note", `document.querySelector(".procs")?.textContent.includes("no processor host")`)
	waitFor(t, ctx, "the text message", `document.querySelector("ol.messages li")?.textContent.includes("hello")`)
	post(t, base, "/greetings", "text/plain", ", world")
	waitFor(t, ctx, "the appended text", `document.querySelectorAll("ol.messages li").length === 2 && document.querySelector("ol.messages li").textContent.includes(", world")`)
}

// TestConsoleWithReadOnlyToken: on a server that wants bearer tokens the console says so, and a
// read-only token entered in its Token field is enough for the list, the messages and the
// processors' live state.
func TestConsoleWithReadOnlyToken(t *testing.T) {
	const reader, writer = "reader-token-0123456789abcdef", "writer-token-0123456789abcdef"
	bt, err := server.ParseBearerTokens("viewer read " + reader + "\napp read-write " + writer)
	if err != nil {
		t.Fatal(err)
	}
	base := setupWith(t, server.Config{Authorize: bt.Authorize}, "/carts/alice")
	writeToken = writer
	t.Cleanup(func() { writeToken = "" })
	addItem(t, base, "/carts/alice", "espresso", 1, 320)

	ctx := browser(t, 1024, 700)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the token request", `!document.getElementById("banner").hidden && document.getElementById("banner").textContent.includes("needs an access token") && !document.getElementById("token-panel").hidden`)
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#token-input"), reader),
		chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)),
	); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the list with the token", `!!document.querySelector('tr[data-path="/carts/alice"]') && document.getElementById("banner").hidden`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`tr[data-path="/carts/alice"] a`))); err != nil {
		t.Fatal(err)
	}
	state := `(document.querySelector('article[data-slug="cart"] pre.state')?.textContent ?? "")`
	waitFor(t, ctx, "the live state with the token", state+`.includes('"espresso": 1')`)
	addItem(t, base, "/carts/alice", "espresso", 2, 320)
	waitFor(t, ctx, "the live state after an append", state+`.includes('"espresso": 3')`)
	waitFor(t, ctx, "the messages with the token", `document.querySelectorAll("ol.messages li").length === 4`)
	stored, err := chromedp.Run(ctx, chromedp.Evaluate[string](`sessionStorage.getItem("foldstream.console.token") + "|" + localStorage.length`))
	if err != nil {
		t.Fatal(err)
	}
	if stored != reader+"|0" {
		t.Errorf("token storage %q: want the token in sessionStorage only", stored)
	}
}

// TestDocsLiveStatePage runs the example page of docs/console.md, served beside the server, and
// sees it follow the cart's live state.
func TestDocsLiveStatePage(t *testing.T) {
	doc, err := os.ReadFile("../docs/console.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```html\n")
	page, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/console.md has no html example")
	}
	base := setupWith(t, server.Config{}, "/carts/alice")
	addItem(t, base, "/carts/alice", "espresso", 1, 320)
	// The page is served from the server's origin, as the docs say.
	mux := http.NewServeMux()
	mux.HandleFunc("/example.html", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, page)
	})
	target, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/", httputil.NewSingleHostReverseProxy(target))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: mux}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })

	ctx := browser(t, 800, 600)
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+ln.Addr().String()+"/example.html")); err != nil {
		t.Fatal(err)
	}
	state := `(document.getElementById("state")?.textContent ?? "")`
	waitFor(t, ctx, "the example's seed", state+`.includes('"espresso": 1')`)
	rev1 := text(t, ctx, "#rev")
	addItem(t, base, "/carts/alice", "cake", 2, 410)
	waitFor(t, ctx, "the example's state after an append", state+`.includes('"cake": 2')`)
	if rev2 := text(t, ctx, "#rev"); rev2 == rev1 {
		t.Errorf("the example's revision stayed %s", rev2)
	}
}

// TestConsoleShowsAFailingProcessor: a processor whose ProcessEvent panics is shown failing — the
// code, the failing offset, the attempts and the next retry — in its card and in its state box.
func TestConsoleShowsAFailingProcessor(t *testing.T) {
	base := setup(t, "/carts/eve")
	ctx := browser(t, 1280, 860)
	bad := addItem(t, base, "/carts/eve", "poison", 1, 100)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the cart", `!!document.querySelector('tr[data-path="/carts/eve"] a')`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`tr[data-path="/carts/eve"] a`))); err != nil {
		t.Fatal(err)
	}
	reason := `(document.querySelector('article[data-slug="cart"] .parked')?.textContent ?? "")`
	waitFor(t, ctx, "the failure in the card", fmt.Sprintf(`%s.includes("failing at offset %d") && %s.includes("PROCESS_EVENT_FAILED") && %s.includes("next retry")`, reason, bad, reason, reason))
	state := `(document.querySelector('article[data-slug="cart"] pre.state')?.textContent ?? "")`
	waitFor(t, ctx, "the reason in the state box", state+`.includes("poisoned item")`)
	screenshot(t, ctx, "console-failing.png")
}
