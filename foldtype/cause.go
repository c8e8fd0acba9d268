package foldtype

// CodeLoopLimit: an emit would have extended its cause chain past the loop limit.
const CodeLoopLimit Code = "LOOP_LIMIT"

// ErrLoopLimit matches the LOOP_LIMIT error of an emit past the loop limit.
var ErrLoopLimit = &Error{Code: CodeLoopLimit}

// LoopLimitType is the fact the engine records, once per chain, when an emit reached the loop
// limit: payload {"chain": <chain>, "limit": <limit>}, idempotency key
// "processor:loop-limit:<chain>" (ProcessorKeyPrefix: no HTTP writer can take it).
const LoopLimitType = "events.iterate.com/itx/loop-limit-reached"

// StampOrigin returns inputs with source.origin set to path on every input whose source has no
// origin; inputs without a source keep none. Streams call it before storing (the store and
// testsupport.MemoryStream do).
func StampOrigin(path string, inputs []EventInput) []EventInput {
	var out []EventInput
	for i, in := range inputs {
		if in.Source == nil || in.Source.Origin != "" {
			continue
		}
		if out == nil {
			out = append([]EventInput(nil), inputs...)
		}
		src := *in.Source
		src.Origin = path
		out[i].Source = &src
	}
	if out == nil {
		return inputs
	}
	return out
}
