package foldtype

// Violation is one way an event of a refused batch breaks a payload schema
// (docs/store.md#refusing-invalid-events). An INVALID_EVENT error that a schema check raised
// lists them in its Data under DataViolations, and the server answers them in the problem body's
// violations member.
type Violation struct {
	// Index is the event's place in the batch as sent: the first message of a JSON array, or
	// the first EventInput of an Append, is 0.
	Index int `json:"index"`
	// Pointer is the JSON pointer (RFC 6901) of the value that breaks the schema, within the
	// event as sent: "/payload/by" for the member "by" of its payload, "/payload" for the
	// payload itself.
	Pointer string `json:"pointer"`
	// Message says what is wrong with the value, for a person.
	Message string `json:"message"`
}

// MaxViolations bounds the violations one refusal lists; DataViolationsTotal counts them all.
const MaxViolations = 100

// Keys of an error's Data that the server answers as problem members.
const (
	// DataViolations holds a []Violation of at most MaxViolations.
	DataViolations = "violations"
	// DataViolationsTotal holds the number of violations found (an int), also those cut from
	// the list.
	DataViolationsTotal = "violationsTotal"
	// DataLimit holds the limit a TOO_LARGE or EVENT_TOO_LARGE refusal went over (an int64).
	DataLimit = "limit"
	// DataLimitUnit names DataLimit's unit: "bytes" (the default) or "messages".
	DataLimitUnit = "limitUnit"
)
