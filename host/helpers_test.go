package host_test

import (
	"io"
	"log/slog"

	"github.com/foldstream/foldstream/testsupport"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// testT is the fake clock's start (testsupport.T).
var testT = testsupport.T
