package server_test

import (
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/server"
)

// A *host.Host is the server's processor host: it offers every view the server looks for. The
// checks live in a test so that package server does not import package host.
var (
	_ server.Processors      = (*host.Host)(nil)
	_ server.ProcessorLister = (*host.Host)(nil)
	_ server.ProcessorPather = (*host.Host)(nil)
	_ server.ProcessorLagger = (*host.Host)(nil)
)
