package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/host"

	"github.com/foldstream/foldstream/server"
)

// The operator's verbs on the processors page (docs/console.md#processors): each behind a
// confirmation, each answered with a note or the problem the server answered.

const (
	readerToken = "reader-token-0123456789abcdef"
	opsToken    = "ops-token-0123456789abcdef"
	writerToken = "writer-token-0123456789abcdef"
)

// opsSetup runs setup with bearer tokens (viewer: read, operator: ops, app: read-write, which
// post and create use) and the server's log in logs, and opens the processors page in a browser
// with token tok.
func opsSetup(t *testing.T, logs *logBuffer, tok string, carts ...string) (base string, ctx context.Context) {
	t.Helper()
	bt, err := server.ParseBearerTokens("viewer read " + readerToken + "\noperator ops " + opsToken + "\napp read-write " + writerToken)
	if err != nil {
		t.Fatal(err)
	}
	base = setupWith(t, server.Config{Authorize: bt.Authorize, Logger: slog.New(slog.NewTextHandler(logs, nil))}, carts...)
	writeToken = writerToken
	t.Cleanup(func() { writeToken = "" })
	ctx = browser(t, 1280, 900)
	openWithToken(t, ctx, base+"/#/processors", tok)
	return base, ctx
}

// openWithToken opens url with the console's token set to tok.
func openWithToken(t *testing.T, ctx context.Context, url, tok string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	setToken(t, ctx, tok)
}

// setToken sets the console's token and reloads the page.
func setToken(t *testing.T, ctx context.Context, tok string) {
	t.Helper()
	if err := chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`sessionStorage.setItem("foldstream.console.token", `+strconv.Quote(tok)+`)`),
		chromedp.Reload(),
	); err != nil {
		t.Fatal(err)
	}
}

func click(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	// Found and clicked in one turn of the page's event loop: the page redraws its rows when the
	// listing refreshes, and a node looked up first and clicked in a second call can be gone by
	// then ("Could not find node with given id"), which a person's click never meets.
	waitFor(t, ctx, "a click on "+sel, `(() => { const e = document.querySelector(`+js(sel)+`);
		if (!e || e.offsetParent === null) return false; e.click(); return true })()`)
}

// procRow is the selector of the processors page's row of the cart processor on stream.
func procRow(stream string) string {
	return fmt.Sprintf(`table.processors tr[data-stream=%q][data-slug="cart"]`, stream)
}

// js quotes a selector for document.querySelector.
func js(sel string) string { return strconv.Quote(sel) }

// stateIs is the condition that stream's cart row shows state.
func stateIs(stream, state string) string {
	return fmt.Sprintf(`document.querySelector(%s)?.textContent === %q`, js(procRow(stream)+" .pstate"), state)
}

// openVerb clicks stream's cart row's button of verb and waits for its confirmation.
func openVerb(t *testing.T, ctx context.Context, stream, verb string) {
	t.Helper()
	click(t, ctx, procRow(stream)+fmt.Sprintf(` button[data-verb=%q]`, verb))
	waitFor(t, ctx, "the confirmation of "+verb, `document.getElementById("confirm").open`)
}

// confirm gives the open confirmation reason and presses its button.
func confirm(t *testing.T, ctx context.Context, reason string) {
	t.Helper()
	if reason != "" {
		if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#confirm-reason"), reason)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "the confirmation's button enabled", `!document.getElementById("confirm-ok").disabled`)
	click(t, ctx, "#confirm-ok")
}

// noted waits for the dialog to close and the note to say want.
func noted(t *testing.T, ctx context.Context, want string) {
	t.Helper()
	waitFor(t, ctx, "the note "+strconv.Quote(want), `!document.getElementById("confirm").open && !document.getElementById("note").hidden && document.getElementById("note").textContent.includes(`+strconv.Quote(want)+`)`)
}

// refusedWith waits for the open confirmation to show the problem whose title and code are given.
func refusedWith(t *testing.T, ctx context.Context, title, code string) string {
	t.Helper()
	waitFor(t, ctx, "the problem "+code, fmt.Sprintf(`document.getElementById("confirm").open && document.querySelector("#confirm-error .p-title")?.textContent === %q && document.querySelector("#confirm-error .p-code")?.textContent === %q`, title, code))
	return text(t, ctx, "#confirm-error")
}

func cancelDialog(t *testing.T, ctx context.Context) {
	t.Helper()
	click(t, ctx, "#confirm-cancel")
	waitFor(t, ctx, "the confirmation closed", `!document.getElementById("confirm").open`)
}

// TestConsolePausesResumesAndReplaysAfterConfirmation: with an ops token, Pause (with a reason)
// pauses a running cart and its row says paused and why; Resume runs it again; Replay takes an
// offset and effects (none by default) and says what it did; a replay from past what the cart
// processed is refused and the confirmation shows the server's problem (title, code, detail).
// The processor's audit, under Details, lists the verbs with their reasons and outcomes.
func TestConsolePausesResumesAndReplaysAfterConfirmation(t *testing.T) {
	var logs logBuffer
	base, ctx := opsSetup(t, &logs, opsToken, "/carts/alice", "/carts/bob")
	addItem(t, base, "/carts/alice", "espresso", 1, 320)
	alice := "/carts/alice"
	waitFor(t, ctx, "alice running with Pause and Replay", stateIs(alice, "running")+` && !!document.querySelector(`+js(procRow(alice)+` button[data-verb="pause"]`)+`) && !document.querySelector(`+js(procRow(alice)+` button[data-verb="resume"]`)+`)`)

	// Cancel sends nothing.
	openVerb(t, ctx, alice, "pause")
	cancelDialog(t, ctx)
	if n := logs.count(`msg="audit: processor pause"`); n != 0 {
		t.Fatalf("%d pauses after Cancel, want none", n)
	}

	openVerb(t, ctx, alice, "pause")
	screenshot(t, ctx, "console-pause-confirm.png")
	confirm(t, ctx, "stock count")
	noted(t, ctx, "Paused cart on /carts/alice.")
	waitFor(t, ctx, "alice paused, with the reason, and a Resume button", stateIs(alice, "paused")+` && document.querySelector(`+js(procRow(alice)+" .problem")+`)?.textContent.includes("stock count") && !!document.querySelector(`+js(procRow(alice)+` button[data-verb="resume"]`)+`)`)
	if got := text(t, ctx, procRow("/carts/bob")+" .pstate"); got != "running" {
		t.Errorf("bob is %q after alice's pause, want running", got)
	}

	openVerb(t, ctx, alice, "resume")
	confirm(t, ctx, "counted")
	noted(t, ctx, "Resumed cart on /carts/alice")
	waitFor(t, ctx, "alice running again", stateIs(alice, "running"))

	// Replay: from 0, effects none by default.
	openVerb(t, ctx, alice, "replay")
	if got := text(t, ctx, "#confirm-effects option:checked"); !strings.HasPrefix(got, "none") {
		t.Errorf("replay's effects default %q, want none", got)
	}
	screenshot(t, ctx, "console-replay-confirm.png")
	confirm(t, ctx, "reducer fixed")
	noted(t, ctx, "Replayed cart on /carts/alice from 1 through") // from 0 is the start of the log, offset 1
	if got := text(t, ctx, "#note"); !strings.Contains(got, "effects none") || !strings.Contains(got, "1 event folded") {
		t.Errorf("replay note %q, want effects none and the one item folded", got)
	}

	// A replay from past what it processed: the server's 409, shown in the dialog.
	openVerb(t, ctx, alice, "replay")
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.ID("confirm-from"), "999"),
		chromedp.SetValue(chromedp.ID("confirm-effects"), "again"),
	); err != nil {
		t.Fatal(err)
	}
	confirm(t, ctx, "")
	if got := refusedWith(t, ctx, "Conflict", "CONFLICT"); !strings.Contains(got, "999") {
		t.Errorf("the refusal %q does not give the server's detail", got)
	}
	cancelDialog(t, ctx)

	// effects=again from the item's offset runs it again.
	openVerb(t, ctx, alice, "replay")
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.ID("confirm-from"), "3"),
		chromedp.SetValue(chromedp.ID("confirm-effects"), "again"),
	); err != nil {
		t.Fatal(err)
	}
	confirm(t, ctx, "mailer lost a day")
	noted(t, ctx, "Replayed cart on /carts/alice from 3 through")
	if got := text(t, ctx, "#note"); !strings.Contains(got, "effects again") {
		t.Errorf("replay note %q, want effects again", got)
	}
	if logs.count(`msg="audit: processor replay"`) != 3 || logs.count(`effects=again`) != 2 {
		t.Errorf("want three replay audit lines, two with effects again:\n%s", logs.b.String())
	}

	// The audit under Details: newest first, with reasons and outcomes.
	click(t, ctx, procRow(alice)+" button.details-btn")
	audit := `[...document.querySelectorAll(".audit-list tbody tr")]`
	waitFor(t, ctx, "the audit", audit+`.map((tr) => tr.dataset.op).join() === "replay,replay,replay,resume,pause"`)
	rows := audit + `.map((tr) => tr.querySelector(".reason").textContent + "|" + tr.querySelector(".outcome").textContent)`
	got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](rows))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"mailer lost a day|done", "|refused: CONFLICT", "reducer fixed|done", "counted|done", "stock count|done"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("audit %q, want %q", got, want)
	}
	waitFor(t, ctx, "the parked events' note", `document.querySelector(".parked-events")?.textContent.length > 0`)
	screenshot(t, ctx, "console-audit.png")
}

// TestConsoleBulkPauseShowsTheDryRunCountFirst: the bulk form's confirmation first shows how many
// streams the verb would change (the dry run), and only its button runs it: Cancel after the count
// changes nothing; a confirmation cancelled and opened again at once still shows its count; Pause
// them pauses the rest; a bulk resume counts and resumes them all.
func TestConsoleBulkPauseShowsTheDryRunCountFirst(t *testing.T) {
	var logs logBuffer
	base, ctx := opsSetup(t, &logs, opsToken, "/carts/alice", "/carts/bob", "/carts/eve", "/shops/one")
	_ = base
	for _, c := range []string{"/carts/alice", "/carts/bob", "/carts/eve"} {
		waitFor(t, ctx, c+" running", stateIs(c, "running"))
	}
	// One cart paused already: the bulk pause would change the other two.
	openVerb(t, ctx, "/carts/bob", "pause")
	confirm(t, ctx, "first")
	waitFor(t, ctx, "bob paused", stateIs("/carts/bob", "paused"))

	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("bulk-slug"), "cart"),
		chromedp.SendKeys(chromedp.ID("bulk-pattern"), "/carts/*"),
	); err != nil {
		t.Fatal(err)
	}
	click(t, ctx, "button.bulk-pause")
	waitFor(t, ctx, "the dry run's count", `document.getElementById("confirm").open && document.getElementById("confirm-text").textContent.includes("would pause on 2 streams of the 3 streams /carts/* matches") && !document.getElementById("confirm-ok").disabled`)
	screenshot(t, ctx, "console-bulk-confirm.png")
	cancelDialog(t, ctx)
	if n := logs.count(`outcome="dry run: 2 of 3 would change"`); n != 1 {
		t.Errorf("%d dry-run audit lines, want 1:\n%s", n, logs.b.String())
	}
	if n := logs.count(`outcome="done: `); n != 0 {
		t.Fatalf("a bulk verb ran after Cancel:\n%s", logs.b.String())
	}
	for _, c := range []string{"/carts/alice", "/carts/eve"} {
		if got := text(t, ctx, procRow(c)+" .pstate"); got != "running" {
			t.Errorf("%s is %q after a cancelled bulk pause, want running", c, got)
		}
	}

	click(t, ctx, "button.bulk-pause")
	waitFor(t, ctx, "the dry run's count again", `document.getElementById("confirm-text").textContent.includes("would pause on 2 streams")`)
	// Cancelled and opened again at once, as a quick hand does: the closed dialog's close event,
	// which comes after the new one opened, must not stop the new one's count from showing.
	waitFor(t, ctx, "Cancel and Pause… in one go", `(() => { document.getElementById("confirm-cancel").click();
		document.querySelector("button.bulk-pause").click(); return true })()`)
	waitFor(t, ctx, "the count of the dry run opened at once", `document.getElementById("confirm").open && document.getElementById("confirm-text").textContent.includes("would pause on 2 streams") && !document.getElementById("confirm-ok").disabled`)
	confirm(t, ctx, "bad deploy")
	noted(t, ctx, "Paused cart on 2 of 3 streams matching /carts/*.")
	for _, c := range []string{"/carts/alice", "/carts/bob", "/carts/eve"} {
		waitFor(t, ctx, c+" paused", stateIs(c, "paused"))
	}
	if got := text(t, ctx, procRow("/shops/one")+" .pstate"); got != "running" {
		t.Errorf("/shops/one is %q, want running: the pattern does not match it", got)
	}

	click(t, ctx, "button.bulk-resume")
	waitFor(t, ctx, "the resume's dry run", `document.getElementById("confirm-text").textContent.includes("would resume on 3 streams of the 3 streams /carts/* matches")`)
	confirm(t, ctx, "")
	noted(t, ctx, "Resumed cart on 3 of 3 streams matching /carts/*.")
	for _, c := range []string{"/carts/alice", "/carts/bob", "/carts/eve"} {
		waitFor(t, ctx, c+" running again", stateIs(c, "running"))
	}
}

// TestConsoleRefusedActionsShowTheirProblem: with a read-only token every verb is refused and the
// confirmation shows the server's problem (title, code, detail) and that an ops token is needed;
// nothing runs. The bulk form's dry run is refused the same way, before anything can be confirmed,
// and the details show the audit's refusal in place.
func TestConsoleRefusedActionsShowTheirProblem(t *testing.T) {
	var logs logBuffer
	base, ctx := opsSetup(t, &logs, readerToken, "/carts/alice", "/carts/eve")
	addItem(t, base, "/carts/eve", "poison", 1, 100)
	waitFor(t, ctx, "alice running, eve failing", stateIs("/carts/alice", "running")+" && "+stateIs("/carts/eve", "failing"))
	for _, c := range []struct{ stream, verb string }{{"/carts/alice", "pause"}, {"/carts/alice", "replay"}, {"/carts/eve", "retry"}, {"/carts/eve", "pause"}} {
		openVerb(t, ctx, c.stream, c.verb)
		confirm(t, ctx, "not allowed")
		got := refusedWith(t, ctx, "Forbidden", "FORBIDDEN")
		if !strings.Contains(got, "ops scope") {
			t.Errorf("%s of %s refused with %q: want it to say a token of the ops scope is needed", c.verb, c.stream, got)
		}
		if c.stream == "/carts/eve" && c.verb == "retry" {
			screenshot(t, ctx, "console-refused.png")
		}
		cancelDialog(t, ctx)
	}
	if n := logs.count(`msg="audit: processor`); n != 0 {
		t.Errorf("%d verbs audited with a read-only token, want none:\n%s", n, logs.b.String())
	}
	if got := text(t, ctx, procRow("/carts/alice")+" .pstate"); got != "running" {
		t.Errorf("alice is %q after a refused pause, want running", got)
	}

	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("bulk-slug"), "cart"),
		chromedp.SendKeys(chromedp.ID("bulk-pattern"), "/carts/*"),
	); err != nil {
		t.Fatal(err)
	}
	click(t, ctx, "button.bulk-pause")
	refusedWith(t, ctx, "Forbidden", "FORBIDDEN")
	if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("confirm-ok").disabled`)); err != nil || !ok {
		t.Errorf("the bulk confirmation can be confirmed after its dry run was refused (disabled %v, %v)", ok, err)
	}
	cancelDialog(t, ctx)

	click(t, ctx, procRow("/carts/alice")+" button.details-btn")
	waitFor(t, ctx, "the audit's refusal", `document.querySelector(".audit .p-code")?.textContent === "FORBIDDEN"`)
}

// TestConsoleProcessorsPageShowsLagInSeconds: the lag of a failing cart is shown in durable
// events and in seconds (how long its oldest unprocessed event has waited), which grows while it
// fails; a cart with nothing to do shows 0 and 0s. At phone width the page does not scroll
// sideways.
func TestConsoleProcessorsPageShowsLagInSeconds(t *testing.T) {
	base := setup(t, "/carts/alice", "/carts/eve")
	addItem(t, base, "/carts/alice", "espresso", 1, 320)
	addItem(t, base, "/carts/eve", "poison", 1, 100)
	addItem(t, base, "/carts/eve", "cake", 1, 410)
	ctx := browser(t, 1280, 860)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/#/processors")); err != nil {
		t.Fatal(err)
	}
	eve, alice := procRow("/carts/eve"), procRow("/carts/alice")
	waitFor(t, ctx, "eve failing, 2 events behind", stateIs("/carts/eve", "failing")+` && document.querySelector(`+js(eve+" td.lag")+`).textContent === "2"`)
	// The page refreshes every two seconds: eve's oldest unprocessed event has waited a second or
	// more by a later refresh.
	waitFor(t, ctx, "eve's lag in seconds to grow", `/^([1-9][0-9]*s|[0-9]+m [0-9]+s)$/.test(document.querySelector(`+js(eve+" td.lag-seconds")+`).textContent)`)
	if got := text(t, ctx, alice+" td.lag") + " " + text(t, ctx, alice+" td.lag-seconds"); got != "0 0s" {
		t.Errorf("alice's lag %q, want 0 0s", got)
	}
	if title, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector(`+js(eve+" td.lag-seconds")+`).title`)); err != nil || !strings.Contains(title, "committed at 20") {
		t.Errorf("eve's lag title %q (%v): want the commit time of its oldest unprocessed event", title, err)
	}

	// Phone width: the page does not scroll sideways, with a processor's details open too.
	click(t, ctx, eve+" button.details-btn")
	waitFor(t, ctx, "eve's details", `!!document.querySelector(".audit")?.textContent`)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "no horizontal scrolling at 390 px", `document.documentElement.scrollWidth <= window.innerWidth`)
	screenshot(t, ctx, "console-processors-phone.png")
}

// TestConsoleRebuildsTheNextVersionFromARowAndInBulk: a row offers Rebuild only once the program
// registered a next version; its confirmation starts the rebuild and the row then shows the
// processor at the next version. The bulk rebuild's confirmation first counts the streams not
// switched yet, then rebuilds them.
func TestConsoleRebuildsTheNextVersionFromARowAndInBulk(t *testing.T) {
	var logs logBuffer
	bt, err := server.ParseBearerTokens("operator ops " + opsToken)
	if err != nil {
		t.Fatal(err)
	}
	carts := []string{"/carts/alice", "/carts/bob"}
	base, h := setupHost(t, server.Config{Authorize: bt.Authorize, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, carts...)
	ctx := browser(t, 1280, 900)
	openWithToken(t, ctx, base+"/#/processors", opsToken)
	for _, c := range carts {
		waitFor(t, ctx, c+" running", stateIs(c, "running"))
	}
	rebuildButton := func(c string) string {
		return fmt.Sprintf(`document.querySelector(%s)`, js(procRow(c)+` button[data-verb="rebuild"]`))
	}
	if offered, err := chromedp.Run(ctx, chromedp.Evaluate[bool](rebuildButton("/carts/alice")+` !== null`)); err != nil || offered {
		t.Fatalf("a row offers Rebuild with no next version registered (%v)", err)
	}
	next := foldstream.MustDefineContract(foldstream.ContractConfig[cart]{
		Slug: "cart", Version: "2", Description: "what is in a cart", Consumes: []string{"item.added"},
		Events:  []foldstream.EventDefinition{foldstream.DefineEvent[itemAdded]("item.added", "an item was put in the cart")},
		Initial: func() (cart, error) { return cart{Items: map[string]int{}}, nil },
	})
	for _, c := range carts {
		if err := host.RegisterNextVersion(context.Background(), h, c, cartProcessor{foldstream.NewBase(next)}); err != nil {
			t.Fatal(err)
		}
	}
	slugIs := func(c, want string) string {
		return fmt.Sprintf(`document.querySelector(%s)?.textContent === %q`, js(procRow(c)+" .slug"), want)
	}
	waitFor(t, ctx, "alice's Rebuild button", rebuildButton("/carts/alice")+` !== null`)
	openVerb(t, ctx, "/carts/alice", "rebuild")
	waitFor(t, ctx, "the rebuild's confirmation names v2", `document.getElementById("confirm-title").textContent === "Rebuild cart v2?"`)
	confirm(t, ctx, "new totals")
	waitFor(t, ctx, "alice at v2", slugIs("/carts/alice", "cart v2"))
	waitFor(t, ctx, "alice's Rebuild button gone", rebuildButton("/carts/alice")+` === null`)

	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("bulk-slug"), "cart"),
		chromedp.SendKeys(chromedp.ID("bulk-pattern"), "/carts/*"),
	); err != nil {
		t.Fatal(err)
	}
	click(t, ctx, "button.bulk-rebuild")
	waitFor(t, ctx, "the bulk rebuild's dry run", `document.getElementById("confirm").open && document.getElementById("confirm-text").textContent.includes("would rebuild its next version on 1 stream of the 2 streams /carts/* matches") && !document.getElementById("confirm-ok").disabled`)
	confirm(t, ctx, "")
	noted(t, ctx, "Rebuild started of cart on 1 of 2 streams matching /carts/*.")
	waitFor(t, ctx, "bob at v2", slugIs("/carts/bob", "cart v2"))
	if n := logs.count(`outcome="dry run: 1 of 2 would change"`); n != 1 {
		t.Errorf("%d dry-run audit lines, want 1:\n%s", n, logs.b.String())
	}
}
