package foldtype

// CodePermanentFailure: a processor's background work died with its host MaxDeaths times on the
// same code; the host does not revive it again until it receives an event.
const CodePermanentFailure Code = "PERMANENT_FAILURE"

// ErrPermanentFailure matches the PERMANENT_FAILURE error of [Engine.Revive].
var ErrPermanentFailure = &Error{Code: CodePermanentFailure}
