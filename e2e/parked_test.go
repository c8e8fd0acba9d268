package e2e_test

import (
	"strconv"
	"strings"
	"testing"
)

// The parked events (docs/console.md#operator-actions): a failing processor's Skip parks the event
// it fails on; its Details list the parked events, each redriven or discarded after a
// confirmation.

// parkedOffsets is the condition that the open details list exactly the parked events at offsets
// (in order, comma-separated), or say there are none.
func parkedOffsets(offsets string) string {
	if offsets == "" {
		return `document.querySelector(".parked-events")?.textContent === "No parked events."`
	}
	return `[...document.querySelectorAll(".parked-list tbody tr")].map((tr) => tr.dataset.offset).join() === ` + strconv.Quote(offsets)
}

// TestConsoleSkipsParksRedrivesAndDiscardsEvents: a cart failing on a poisoned item is skipped
// after a confirmation (Cancel sends nothing) and goes on with the events after it, the poison
// parked with the skip's reason; two more poisons are skipped the same way and one of them is
// discarded. Redriven before the fault is fixed the first fails again: the server's
// PROCESSOR_FAILING problem is shown and it stays parked, one attempt more. With the fault fixed
// it is redriven and leaves the list, and Redrive all takes the last. The audit lists every verb.
func TestConsoleSkipsParksRedrivesAndDiscardsEvents(t *testing.T) {
	t.Cleanup(func() { poisonCured.Store(false) })
	var logs logBuffer
	base, ctx := opsSetup(t, &logs, opsToken, "/carts/eve")
	eve := procRow("/carts/eve")
	row := func(off int) string { return `.parked-list tr[data-offset="` + strconv.Itoa(off) + `"]` }
	poisons := make([]int, 3)
	poisons[0] = addItem(t, base, "/carts/eve", "poison", 1, 100)
	addItem(t, base, "/carts/eve", "cake", 1, 410)
	waitFor(t, ctx, "eve failing with a Skip button", stateIs("/carts/eve", "failing")+` && !!document.querySelector(`+js(eve+` button[data-verb="skip"]`)+`)`)
	click(t, ctx, eve+" button.details-btn")
	waitFor(t, ctx, "no parked events yet", parkedOffsets(""))

	openVerb(t, ctx, "/carts/eve", "skip")
	cancelDialog(t, ctx)
	openVerb(t, ctx, "/carts/eve", "skip")
	confirm(t, ctx, "poison pill")
	noted(t, ctx, "Skipped the event at offset "+strconv.Itoa(poisons[0])+" of cart on /carts/eve: it is parked.")
	waitFor(t, ctx, "eve running past the poison, which is parked", stateIs("/carts/eve", "running")+" && "+parkedOffsets(strconv.Itoa(poisons[0])))
	if got := text(t, ctx, row(poisons[0])); !strings.Contains(got, "PROCESS_EVENT_FAILED") || !strings.Contains(got, "poison pill") || !strings.Contains(got, "operator") {
		t.Errorf("the parked poison reads %q: want its code, who skipped it and why", got)
	}
	screenshot(t, ctx, "console-parked.png")

	for i := 1; i < len(poisons); i++ {
		poisons[i] = addItem(t, base, "/carts/eve", "poison", 2, 100)
		waitFor(t, ctx, "eve failing on another poison", stateIs("/carts/eve", "failing"))
		openVerb(t, ctx, "/carts/eve", "skip")
		confirm(t, ctx, "again")
		noted(t, ctx, "Skipped the event at offset "+strconv.Itoa(poisons[i]))
	}
	all := []string{strconv.Itoa(poisons[0]), strconv.Itoa(poisons[1]), strconv.Itoa(poisons[2])}
	waitFor(t, ctx, "three poisons parked", parkedOffsets(strings.Join(all, ",")))

	click(t, ctx, row(poisons[1])+" button.discard")
	waitFor(t, ctx, "the discard's confirmation", `document.getElementById("confirm").open && document.getElementById("confirm-title").textContent.includes("Discard the event at offset `+all[1]+`")`)
	confirm(t, ctx, "a duplicate")
	noted(t, ctx, "Discarded the event at offset "+all[1])
	waitFor(t, ctx, "the second poison discarded", parkedOffsets(all[0]+","+all[2]))

	// Redriven before the fault is fixed, it fails again: the problem is shown and the event
	// stays parked, one attempt more.
	attempts := `document.querySelector(` + js(row(poisons[0])+" td:nth-child(4)") + `)?.textContent`
	before, err := strconv.Atoi(text(t, ctx, row(poisons[0])+" td:nth-child(4)"))
	if err != nil {
		t.Fatalf("attempts of the parked poison: %v", err)
	}
	click(t, ctx, row(poisons[0])+" button.redrive")
	confirm(t, ctx, "")
	refusedWith(t, ctx, "Processor failing", "PROCESSOR_FAILING")
	cancelDialog(t, ctx)
	waitFor(t, ctx, "one attempt more", attempts+` === "`+strconv.Itoa(before+1)+`"`)

	poisonCured.Store(true)
	click(t, ctx, row(poisons[0])+" button.redrive")
	waitFor(t, ctx, "the redrive's confirmation", `document.getElementById("confirm").open && document.getElementById("confirm-title").textContent.includes("Redrive the event at offset `+all[0]+`")`)
	confirm(t, ctx, "fault fixed")
	noted(t, ctx, "Redrove the event at offset "+all[0]+" of cart on /carts/eve")
	waitFor(t, ctx, "the redriven poison gone from the list", parkedOffsets(all[2]))

	click(t, ctx, "button.redrive-all")
	waitFor(t, ctx, "the redrive-all confirmation", `document.getElementById("confirm").open && document.getElementById("confirm-title").textContent.includes("every parked event")`)
	confirm(t, ctx, "all fixed")
	noted(t, ctx, "Redrove the event at offset "+all[2]+" of cart on /carts/eve")
	waitFor(t, ctx, "no parked events", parkedOffsets(""))

	audit := `[...document.querySelectorAll(".audit-list tbody tr")].map((tr) => tr.dataset.op + ":" + tr.querySelector(".outcome").textContent).join()`
	waitFor(t, ctx, "the audit of the verbs", audit+` === "redrive:done,redrive:done,redrive:refused: PROCESSOR_FAILING,discard:done,skip:done,skip:done,skip:done"`)
}
