package foldtype

// ReplayEffects says whether a replay runs ProcessEvent again for the events a processor has
// already processed (docs/operations.md#replay).
type ReplayEffects string

// The two choices of a replay.
const (
	// ReplayEffectsNone (the default) reduces the events already processed without running
	// their ProcessEvent: no effect runs twice and nothing is emitted again.
	ReplayEffectsNone ReplayEffects = "none"
	// ReplayEffectsAgain runs ProcessEvent again, with its effects and emits, for every event
	// from the replay's offset on.
	ReplayEffectsAgain ReplayEffects = "again"
)

// ReplayRequest is an operator's replay of one processor (docs/operations.md#replay).
type ReplayRequest struct {
	// From is the first offset replayed; 0 or 1 is the start of the log.
	From int64
	// Effects is ReplayEffectsNone (also when empty) or ReplayEffectsAgain.
	Effects ReplayEffects
}

// ReplayResult says what a replay did.
type ReplayResult struct {
	// From is the first offset replayed (1 for the start of the log).
	From int64 `json:"from"`
	// Through is the offset the processor had processed through when the replay began: the
	// events from From through Through are the ones replayed; later ones run as new work.
	Through int64 `json:"through"`
	// Effects is the choice the replay ran with.
	Effects ReplayEffects `json:"effects"`
	// Reduced is how many events the replay folded without ProcessEvent when it rebuilt the
	// state (with effects none, every consumed event through Through; with effects again, those
	// before From).
	Reduced int `json:"reduced"`
}

// CheckReplay returns r with its defaults (From 0 is 1, Effects "" is none), or BAD_REQUEST when
// From is below 0 or Effects is neither none nor again.
func CheckReplay(r ReplayRequest) (ReplayRequest, error) {
	if r.From < 0 {
		return r, NewError(CodeBadRequest, map[string]any{"from": r.From}, "replay: from must be 0 (the start) or an offset")
	}
	switch r.Effects {
	case "":
		r.Effects = ReplayEffectsNone
	case ReplayEffectsNone, ReplayEffectsAgain:
	default:
		return r, NewError(CodeBadRequest, map[string]any{"effects": string(r.Effects)}, "replay: effects must be none or again")
	}
	r.From = max(r.From, 1)
	return r, nil
}
