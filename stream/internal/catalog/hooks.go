package catalog

import (
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// Hooks are what the event face does when the protocol face writes: the protocol face calls them
// through the catalogue and never names the event face, which registers them with [Catalog.Use]
// while the store opens. A hook left nil does nothing.
type Hooks struct {
	// CheckMessages is asked, outside the writer, about the JSON messages a protocol append
	// brings to the stream at path; an error refuses the append (the append-time schema check).
	CheckMessages func(path string, msgs []rawjson.Message) error
	// Created runs in the write that creates the stream at path.
	Created func(t *kernel.Tx, path string)
	// Ended runs in the write that ends an incarnation of stream id at path (a delete, an expiry
	// collected, an expired stream replaced); an error fails the write.
	Ended func(t *kernel.Tx, id int64, path string) error
	// Listening reports whether anyone in this process takes the events of the stream at path, so
	// a protocol append decodes its messages into events only then.
	Listening func(path string) bool
	// Publish hands the events a commit landed on the stream at path (offsets after < o <= through)
	// to its subscribers, in commit order, on the writer goroutine after the commit.
	Publish func(path string, events []foldtype.Event, after, through int64)
}

// Use registers the event face's hooks; it is called once, while the store opens.
func (c *Catalog) Use(h Hooks) { c.hooks = h }

// CheckMessages runs the registered check of a protocol append's messages.
func (c *Catalog) CheckMessages(path string, msgs []rawjson.Message) error {
	if c.hooks.CheckMessages == nil {
		return nil
	}
	return c.hooks.CheckMessages(path, msgs)
}

// Created runs the registered effect of creating the stream at path, in the creating write.
func (c *Catalog) Created(t *kernel.Tx, path string) {
	if c.hooks.Created != nil {
		c.hooks.Created(t, path)
	}
}

// Ended runs the registered effect of ending an incarnation of stream id at path, in the
// deleting write.
func (c *Catalog) Ended(t *kernel.Tx, id int64, path string) error {
	if c.hooks.Ended == nil {
		return nil
	}
	return c.hooks.Ended(t, id, path)
}

// Listening reports whether anyone in this process takes the events of the stream at path.
func (c *Catalog) Listening(path string) bool {
	return c.hooks.Listening != nil && c.hooks.Listening(path)
}

// Publish hands the events a commit landed on the stream at path to its subscribers.
func (c *Catalog) Publish(path string, events []foldtype.Event, after, through int64) {
	if c.hooks.Publish != nil {
		c.hooks.Publish(path, events, after, through)
	}
}
