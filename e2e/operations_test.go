package e2e_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/foldstream/foldstream/server"
)

// logBuffer collects a server's log lines, safe for the server's goroutines and the test.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), sub)
}

// TestConsoleHidesPlatformRecordsUntilAsked: a cart's messages begin with the platform's birth and
// wake records (events.iterate.com/itx/created and itx/woken); the console hides them by default,
// saying how many it hides, and its one toggle shows them and hides them again.
func TestConsoleHidesPlatformRecordsUntilAsked(t *testing.T) {
	base := setup(t, "/carts/alice")
	addItem(t, base, "/carts/alice", "espresso", 2, 320)
	addItem(t, base, "/carts/alice", "croissant", 1, 250)
	ctx := browser(t, 1280, 860)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/#/stream/carts/alice")); err != nil {
		t.Fatal(err)
	}
	visible := `[...document.querySelectorAll("ol.messages li")].filter((li) => li.offsetParent !== null)`
	waitFor(t, ctx, "the four messages, two of them the platform's", `document.querySelectorAll("ol.messages li").length === 4 && document.querySelectorAll("ol.messages li.platform").length === 2`)
	waitFor(t, ctx, "only the user's two events shown", visible+`.length === 2 && `+visible+`.every((li) => li.textContent.includes("item.added"))`)
	if got := text(t, ctx, ".platform-count"); !strings.Contains(got, "2 platform records hidden") {
		t.Errorf("hidden count %q, want it to say 2 platform records hidden", got)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#show-platform"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "all four shown", visible+`.length === 4 && `+visible+`.some((li) => li.textContent.includes("events.iterate.com/itx/created")) && `+visible+`.some((li) => li.textContent.includes("events.iterate.com/itx/woken"))`)
	screenshot(t, ctx, "console-platform-records.png")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#show-platform"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the platform's hidden again", visible+`.length === 2`)
	// A new user event arrives and shows while the platform's stay hidden.
	addItem(t, base, "/carts/alice", "cake", 1, 410)
	waitFor(t, ctx, "the new event", visible+`.length === 3 && `+visible+`[0].textContent.includes("cake")`)
}

// TestConsoleProcessorsPageFiltersByState: the processors page lists the processors of every
// stream with their state, offset and lag in durable events; its filters keep the failing one,
// the lagging one (the failing one, with events behind its poison) and the running ones.
func TestConsoleProcessorsPageFiltersByState(t *testing.T) {
	base := setup(t, "/carts/alice", "/carts/bob", "/carts/eve")
	addItem(t, base, "/carts/alice", "espresso", 1, 320)
	addItem(t, base, "/carts/eve", "poison", 1, 100)
	addItem(t, base, "/carts/eve", "cake", 1, 410)
	ctx := browser(t, 1280, 860)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the carts", `document.querySelectorAll("tbody tr").length === 3`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#nav-processors"))); err != nil {
		t.Fatal(err)
	}
	rows := `[...document.querySelectorAll("table.processors tbody tr")].map((tr) => tr.dataset.stream).join(",")`
	row := func(p string) string {
		return fmt.Sprintf(`document.querySelector('table.processors tr[data-stream=%q]')`, p)
	}
	waitFor(t, ctx, "every cart's processor, eve failing", rows+` === "/carts/alice,/carts/bob,/carts/eve" && `+row("/carts/eve")+`.querySelector(".pstate").textContent === "failing"`)
	if got := text(t, ctx, `table.processors tr[data-stream="/carts/eve"] td.lag`); got != "2" {
		t.Errorf("eve's lag %q, want 2 durable events (the poison and the cake)", got)
	}
	if got := text(t, ctx, `table.processors tr[data-stream="/carts/alice"] td.lag`); got != "0" {
		t.Errorf("alice's lag %q, want 0", got)
	}
	if got := text(t, ctx, `table.processors tr[data-stream="/carts/eve"] .problem`); !strings.Contains(got, "PROCESS_EVENT_FAILED") {
		t.Errorf("eve's problem %q, want the failure's code", got)
	}
	screenshot(t, ctx, "console-processors.png")
	for _, tc := range []struct{ filter, want string }{
		{"failing", "/carts/eve"},
		{"lagging", "/carts/eve"},
		{"running", "/carts/alice,/carts/bob"},
		{"paused", ""},
		{"", "/carts/alice,/carts/bob,/carts/eve"},
	} {
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`.filters button[data-state=%q]`, tc.filter)))); err != nil {
			t.Fatal(err)
		}
		cond := rows + ` === ` + fmt.Sprintf("%q", tc.want) + fmt.Sprintf(` && location.hash === %q`, map[bool]string{true: "#/processors", false: "#/processors?state=" + tc.filter}[tc.filter == ""])
		if tc.want == "" {
			cond += ` && !!document.querySelector(".empty:not([hidden])")`
		}
		waitFor(t, ctx, "the filter "+tc.filter, cond)
	}
	// The filter is in the address: a reload keeps it.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/#/processors?state=failing")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the failing filter after a reload", rows+` === "/carts/eve" && document.querySelector('.filters button.on').dataset.state === "failing"`)
}

// TestConsoleRetryAsksForConfirmationAndAnOpsToken: a failing processor's Retry button opens a
// confirmation; Cancel sends nothing; with a read-only token the confirmation says an ops token
// is needed and nothing runs; with an ops token Retry now runs the verb (the server's audit line
// says so, with the reason given). A running processor has no Retry button.
func TestConsoleRetryAsksForConfirmationAndAnOpsToken(t *testing.T) {
	const reader, opsToken, writer = "reader-token-0123456789abcdef", "ops-token-0123456789abcdef", "writer-token-0123456789abcdef"
	bt, err := server.ParseBearerTokens("viewer read " + reader + "\noperator ops " + opsToken + "\napp read-write " + writer)
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	base := setupWith(t, server.Config{Authorize: bt.Authorize, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, "/carts/alice", "/carts/eve")
	writeToken = writer
	t.Cleanup(func() { writeToken = "" })
	addItem(t, base, "/carts/alice", "espresso", 1, 320)
	addItem(t, base, "/carts/eve", "poison", 1, 100)

	ctx := browser(t, 1280, 860)
	useToken := func(tok string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`sessionStorage.setItem("foldstream.console.token", `+fmt.Sprintf("%q", tok)+`)`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/#/processors")); err != nil {
		t.Fatal(err)
	}
	useToken(reader)
	if err := chromedp.Do(ctx, chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	eve := `table.processors tr[data-stream="/carts/eve"]`
	waitFor(t, ctx, "eve failing with a Retry button, alice without", `document.querySelector('`+eve+` .pstate')?.textContent === "failing" && !!document.querySelector('`+eve+` button.retry') && !document.querySelector('table.processors tr[data-stream="/carts/alice"] button.retry')`)

	open := func() {
		t.Helper()
		click(t, ctx, eve+" button.retry") // the row is redrawn as the listing refreshes
		waitFor(t, ctx, "the confirmation", `document.getElementById("confirm").open && document.getElementById("confirm-title").textContent.includes("cart")`)
	}
	audit := `msg="audit: processor retry"`
	open()
	screenshot(t, ctx, "console-retry-confirm.png")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#confirm-cancel"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the confirmation closed", `!document.getElementById("confirm").open`)
	if n := logs.count(audit); n != 0 {
		t.Fatalf("%d retries after Cancel, want none", n)
	}

	// A read-only token: refused, and the dialog says why.
	open()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#confirm-ok"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the refusal", `document.getElementById("confirm").open && document.getElementById("confirm-error").textContent.includes("ops scope")`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#confirm-cancel"))); err != nil {
		t.Fatal(err)
	}
	if n := logs.count(audit); n != 0 {
		t.Fatalf("%d retries with a read-only token, want none", n)
	}

	useToken(opsToken)
	open()
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "downstream fixed"),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
	); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the retry done", `!document.getElementById("confirm").open && !document.getElementById("note").hidden && document.getElementById("note").textContent.includes("Retry asked of cart on /carts/eve")`)
	if n := logs.count(audit); n != 1 {
		t.Errorf("%d audit lines of a retry, want 1", n)
	}
	if logs.count(`actor=operator`) != 1 || logs.count(`reason="downstream fixed"`) != 1 || logs.count(`outcome=done`) != 1 {
		t.Errorf("the audit line does not name the operator, the reason and the outcome done:\n%s", logs.b.String())
	}
}
