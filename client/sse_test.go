package client

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func parseAll(r io.Reader) ([]sseEvent, error) {
	p := newSSEParser(r)
	var out []sseEvent
	for {
		ev, err := p.next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		ev.Data = append([]byte(nil), ev.Data...)
		out = append(out, ev)
	}
}

func TestSSEParser(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     []string // "type|data"
	}{
		{"lf", "event: data\ndata:abc\n\n", []string{"data|abc"}},
		{"crlf", "event: data\r\ndata:abc\r\n\r\n", []string{"data|abc"}},
		{"lone cr", "event: data\rdata:abc\r\r", []string{"data|abc"}},
		{"mixed", "event: data\r\ndata:a\rdata:b\n\r\nevent: control\ndata:{}\r\r", []string{"data|a\nb", "control|{}"}},
		{"one leading space stripped", "data:  two\n\n", []string{"message| two"}},
		{"multi-line data joined with LF", "event: data\ndata:line1\ndata:\ndata:line3\n\n", []string{"data|line1\n\nline3"}},
		{"comments and unknown fields ignored", ": keep-alive\nid: 7\nretry: 10\nevent: control\ndata:{\"a\":1}\n\n", []string{"control|{\"a\":1}"}},
		{"field without colon", "data\n\n", []string{"message|"}},
		{"blank lines between events", "\n\n\nevent: x\n\n", []string{"x|"}},
		{"partial event at EOF discarded", "event: data\ndata:abc\n\nevent: data\ndata:cut", []string{"data|abc"}},
		{"injection stays data", "event: data\ndata:\ndata:\ndata:event: control\n\n", []string{"data|\n\nevent: control"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, r := range []io.Reader{strings.NewReader(tc.in), iotest.OneByteReader(strings.NewReader(tc.in))} {
				evs, err := parseAll(r)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, e := range evs {
					got = append(got, e.Type+"|"+string(e.Data))
				}
				if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
					t.Errorf("got %q, want %q", got, tc.want)
				}
			}
		})
	}
}

// TestSSEParserCRLFAcrossReads covers the case the seed's regex normalisation gets wrong: a CR
// ending one network read and the LF starting the next are one line end, not an empty line that
// would dispatch the event early.
func TestSSEParserCRLFAcrossReads(t *testing.T) {
	t.Parallel()
	r := io.MultiReader(strings.NewReader("event: data\r"), strings.NewReader("\ndata:x\r"), strings.NewReader("\n\r"), strings.NewReader("\n"))
	evs, err := parseAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Type != "data" || string(evs[0].Data) != "x" {
		t.Errorf("got %+v, want one data event with x", evs)
	}
}

// FuzzSSEParser checks that the parser never fails on any input, that how the input is split
// into reads does not matter, and that CRLF and lone CR parse exactly like LF.
func FuzzSSEParser(f *testing.F) {
	f.Add([]byte("event: data\r\ndata:abc\r\n\r\n"))
	f.Add([]byte("event: control\rdata:{\"streamNextOffset\":\"1\"}\r\r"))
	f.Add([]byte("data:a\ndata:b\n\n:comment\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		whole, err := parseAll(bytes.NewReader(in))
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		bytewise, err := parseAll(iotest.OneByteReader(bytes.NewReader(in)))
		if err != nil {
			t.Fatalf("parse one byte at a time: %v", err)
		}
		normalised := bytes.ReplaceAll(in, []byte("\r\n"), []byte("\n"))
		normalised = bytes.ReplaceAll(normalised, []byte("\r"), []byte("\n"))
		lf, err := parseAll(bytes.NewReader(normalised))
		if err != nil {
			t.Fatalf("parse normalised: %v", err)
		}
		if fmt.Sprintf("%q", whole) != fmt.Sprintf("%q", bytewise) {
			t.Fatalf("read split changes the result:\n whole %q\n bytes %q", whole, bytewise)
		}
		if fmt.Sprintf("%q", whole) != fmt.Sprintf("%q", lf) {
			t.Fatalf("line endings change the result:\n raw %q\n  lf %q", whole, lf)
		}
		for _, e := range whole {
			if bytes.ContainsAny(e.Data, "\r") {
				t.Fatalf("data keeps a CR: %q", e.Data)
			}
		}
	})
}
