package host_test

import (
	"io"
	"log/slog"

	"github.com/foldstream/foldstream/testsupport"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// testT is the spec's test clock start (§14.2).
var testT = testsupport.T
