package history

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Workload drives concurrent clients over HTTP against one or more servers of the same streams
// and records every operation in Rec. Each stream gets Writers plain appenders, Producers
// idempotent producers (each retrying a seq whose answer was lost until it learns the outcome)
// and Readers (catch-up reads from the start or from the offset last read, long-polls and SSE
// sessions).
type Workload struct {
	// Targets are the servers' stream prefixes (http://host:port/v1/stream); every request goes
	// to one chosen at random.
	Targets []string
	// Prefix names this run's streams (Prefix0, Prefix1, ...).
	Prefix string
	// Streams is how many streams; Writers, Producers and Readers how many clients of each.
	Streams, Writers, Producers, Readers int
	// NoLongPoll leaves long-polls out of the readers' mix, NoSSE SSE sessions.
	NoLongPoll, NoSSE bool
	// Timeout bounds one request (an append that runs out is Unknown). Defaults to 5 s.
	Timeout time.Duration
	Rec     *Recorder

	clients atomic.Int32
	// errs[i] counts requests to Targets[i] that got no answer (refused connections included)
	// or a 5xx.
	errs []atomic.Int64
}

// StreamNames returns the workload's stream names.
func (w *Workload) StreamNames() []string {
	out := make([]string, w.Streams)
	for i := range out {
		out[i] = w.Prefix + strconv.Itoa(i)
	}
	return out
}

// Errors returns how many requests to Targets[i] got no answer or a 5xx so far.
func (w *Workload) Errors(i int) int64 { return w.errs[i].Load() }

// TotalErrors returns how many requests got no answer or a 5xx so far.
func (w *Workload) TotalErrors() int64 {
	var n int64
	for i := range w.errs {
		n += w.errs[i].Load()
	}
	return n
}

func (w *Workload) init() {
	if w.errs == nil {
		w.errs = make([]atomic.Int64, len(w.Targets))
	}
	if w.Timeout == 0 {
		w.Timeout = 5 * time.Second
	}
	if w.Rec == nil {
		w.Rec = NewRecorder()
	}
}

// Create creates the streams (JSON), retrying until each exists or ctx ends.
func (w *Workload) Create(ctx context.Context) error {
	w.init()
	hc := &http.Client{Timeout: w.Timeout}
	for _, name := range w.StreamNames() {
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodPut, w.Targets[0]+"/"+name, nil)
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			res, err := hc.Do(req)
			if err == nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode == http.StatusCreated || res.StatusCode == http.StatusOK {
					break
				}
				err = fmt.Errorf("create %s: %s", name, res.Status)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("create %s: %w (last: %v)", name, ctx.Err(), err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// Run runs the clients until ctx ends and waits for them.
func (w *Workload) Run(ctx context.Context) {
	w.init()
	var wg sync.WaitGroup
	for _, name := range w.StreamNames() {
		for range w.Writers {
			c := w.newClient(name)
			wg.Go(func() { c.write(ctx) })
		}
		for range w.Producers {
			c := w.newClient(name)
			wg.Go(func() { c.produce(ctx) })
		}
		for range w.Readers {
			c := w.newClient(name)
			wg.Go(func() { c.read(ctx) })
		}
	}
	wg.Wait()
}

// FinalReads reads every stream from the start, once each, retrying until answered or ctx ends:
// a read after the load ends pins down which of the appends with lost answers took effect.
func (w *Workload) FinalReads(ctx context.Context) error {
	w.init()
	for _, name := range w.StreamNames() {
		c := w.newClient(name)
		for {
			if out := c.readOnce(ctx, "-1", ""); out.Outcome == OK {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("final read of %s: %w", name, ctx.Err())
			}
			pause(ctx, 3)
		}
	}
	return nil
}

type client struct {
	w      *Workload
	id     int
	stream string
	hc     *http.Client
	rnd    *rand.Rand
}

func (w *Workload) newClient(stream string) *client {
	id := int(w.clients.Add(1)) - 1
	tr := http.DefaultTransport.(*http.Transport).Clone()
	return &client{w: w, id: id, stream: stream, hc: &http.Client{Timeout: w.Timeout, Transport: tr},
		rnd: rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))}
}

// pause waits after a failed request, longer after each failure in a row (20 ms doubling to
// 640 ms), so clients neither spin while a server is down nor pile up appends with lost answers.
func pause(ctx context.Context, fails int) {
	select {
	case <-ctx.Done():
	case <-time.After(20 * time.Millisecond << min(fails, 5)):
	}
}

func (c *client) write(ctx context.Context) {
	fails := 0
	for n := 0; ctx.Err() == nil; n++ {
		in := Input{Stream: c.stream, Kind: Append, Msg: fmt.Sprintf("w%d-%d", c.id, n)}
		if out := c.append(ctx, in); out.Outcome != OK {
			pause(ctx, fails)
			fails++
		} else {
			fails = 0
		}
	}
}

func (c *client) produce(ctx context.Context) {
	id := fmt.Sprintf("p%d", c.id)
	fails := 0
	for seq := int64(0); ctx.Err() == nil; {
		in := Input{Stream: c.stream, Kind: Append, Msg: fmt.Sprintf("%s-%d", id, seq), Producer: id, Seq: seq}
		switch out := c.append(ctx, in); out.Outcome {
		case OK, Duplicate:
			seq++
			fails = 0
		case Unknown, Failed, NotSent:
			pause(ctx, fails) // retry the same seq: the server decides whether it already has it
			fails++
		default:
			return // fenced or a gap: the checker judges it; this producer cannot go on
		}
	}
}

func (c *client) read(ctx context.Context) {
	from, fails := "-1", 0
	for ctx.Err() == nil {
		start, live := from, ""
		switch r := c.rnd.IntN(4); {
		case r == 0:
			start = "-1"
		case r == 1 && from != "-1" && !c.w.NoLongPoll:
			live = "long-poll"
		case r == 2 && from != "-1" && !c.w.NoSSE:
			if next, ok := c.sseSession(ctx, from); ok {
				from, fails = next, 0
			} else {
				pause(ctx, fails)
				fails++
			}
			continue
		}
		out := c.readOnce(ctx, start, live)
		if out.Outcome != OK {
			pause(ctx, fails)
			fails++
			continue
		}
		from, fails = out.Offset, 0
	}
}

// target picks a server for one request.
func (c *client) target() (int, string) {
	i := c.rnd.IntN(len(c.w.Targets))
	return i, c.w.Targets[i] + "/" + c.stream
}

// append posts in and records it.
func (c *client) append(ctx context.Context, in Input) Output {
	ti, url := c.target()
	in.Via = ti
	body, _ := json.Marshal(in.Msg)
	call := c.w.Rec.Begin(c.id, in)
	out := func() Output {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
		if err != nil {
			return Output{Outcome: Failed}
		}
		req.Header.Set("Content-Type", "application/json")
		if in.Producer != "" {
			req.Header.Set("Producer-Id", in.Producer)
			req.Header.Set("Producer-Epoch", strconv.FormatInt(in.Epoch, 10))
			req.Header.Set("Producer-Seq", strconv.FormatInt(in.Seq, 10))
		}
		res, err := c.hc.Do(req)
		if err != nil {
			c.w.errs[ti].Add(1)
			return Output{Outcome: transportOutcome(err)}
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		next := res.Header.Get("Stream-Next-Offset")
		switch {
		case res.StatusCode == http.StatusOK && in.Producer != "",
			res.StatusCode == http.StatusNoContent && in.Producer == "":
			return Output{Outcome: OK, Offset: next}
		case res.StatusCode == http.StatusNoContent:
			return Output{Outcome: Duplicate}
		case res.StatusCode == http.StatusForbidden && in.Producer != "":
			return Output{Outcome: Fenced}
		case res.StatusCode == http.StatusConflict && res.Header.Get("Producer-Expected-Seq") != "":
			exp, _ := strconv.ParseInt(res.Header.Get("Producer-Expected-Seq"), 10, 64)
			return Output{Outcome: Gap, ExpectedSeq: exp}
		case res.StatusCode >= 500:
			c.w.errs[ti].Add(1)
			return Output{Outcome: Unknown}
		default:
			return Output{Outcome: Failed}
		}
	}()
	call.End(out)
	return out
}

// readOnce reads from offset (live "" for catch-up, "long-poll") and records it.
func (c *client) readOnce(ctx context.Context, from, live string) Output {
	ti, url := c.target()
	in := Input{Stream: c.stream, Kind: Read, From: from, Live: live, Via: ti}
	call := c.w.Rec.Begin(c.id, in)
	out := func() Output {
		q := "?offset=" + from
		if live != "" {
			q += "&live=" + live
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+q, nil)
		if err != nil {
			return Output{Outcome: Failed}
		}
		res, err := c.hc.Do(req)
		if err != nil {
			return Output{Outcome: Unknown}
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			return Output{Outcome: Unknown}
		}
		next := res.Header.Get("Stream-Next-Offset")
		utd := res.Header.Get("Stream-Up-To-Date") == "true"
		switch res.StatusCode {
		case http.StatusOK:
			msgs := []string{}
			if err := json.Unmarshal(b, &msgs); err != nil {
				// Not a JSON array of our messages: record what came so the checker rejects it.
				msgs = []string{"<undecodable: " + string(b) + ">"}
			}
			return Output{Outcome: OK, Offset: next, UpToDate: utd, Msgs: msgs}
		case http.StatusNoContent: // long-poll ran out: nothing after from
			return Output{Outcome: OK, Offset: next, UpToDate: true, Msgs: []string{}}
		default:
			return Output{Outcome: Unknown}
		}
	}()
	if out.Outcome == Unknown {
		c.w.errs[ti].Add(1)
	}
	call.End(out)
	return out
}

// transportOutcome classifies a request that got no HTTP answer: a connection that was refused
// carried nothing (NotSent); any other error may have come after the server took the request.
func transportOutcome(err error) Outcome {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return NotSent
	}
	return Unknown
}

// sseSession follows the stream from offset over SSE for a random 0.5–2.5 s and returns the
// offset it reached (ok false when the session did not start). Each control event closes one
// read: from the offset the session had reached, the messages of the data events since the
// previous control event, the control's streamNextOffset and its upToDate. Its interval runs
// from the request to the moment the client read the control event: the server may have sent it
// any time after the request, and a client that reads a backlog of buffered events cannot tell
// when (the previous event's arrival is no bound: a busy client reads both late, and a stale
// "up to date" claim would be pinned after appends that came later). A read the session's end
// cuts short is not recorded.
func (c *client) sseSession(ctx context.Context, from string) (string, bool) {
	ti, url := c.target()
	sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond+time.Duration(c.rnd.IntN(2000))*time.Millisecond)
	defer cancel()
	in := Input{Stream: c.stream, Kind: Read, From: from, Live: "sse", Via: ti}
	call := c.w.Rec.Begin(c.id, in)
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, url+"?offset="+from+"&live=sse", nil)
	if err != nil {
		return from, false
	}
	hc := &http.Client{Transport: c.hc.Transport} // no overall timeout: the context ends the session
	res, err := hc.Do(req)
	if err != nil {
		if ctx.Err() == nil && sctx.Err() == nil {
			c.w.errs[ti].Add(1)
		}
		return from, false
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		io.Copy(io.Discard, res.Body)
		if res.StatusCode >= 500 {
			c.w.errs[ti].Add(1)
		}
		return from, false
	}
	msgs := []string{}
	event, data := "", []string{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		case line == "":
			body := strings.Join(data, "\n")
			switch event {
			case "data":
				var got []string
				if err := json.Unmarshal([]byte(body), &got); err != nil {
					got = []string{"<undecodable: " + body + ">"}
				}
				msgs = append(msgs, got...)
			case "control":
				var ctl struct {
					Next     string `json:"streamNextOffset"`
					UpToDate bool   `json:"upToDate"`
				}
				if err := json.Unmarshal([]byte(body), &ctl); err != nil || ctl.Next == "" {
					// Not a control event of the protocol: record it so the checker rejects it.
					ctl.Next = "<undecodable control: " + body + ">"
				}
				call.End(Output{Outcome: OK, Offset: ctl.Next, UpToDate: ctl.UpToDate, Msgs: msgs})
				from, msgs = ctl.Next, []string{}
				in.From = from
				at := call.at
				call = c.w.Rec.Begin(c.id, in)
				call.at = at // the session's request (see above)
			}
			event, data = "", data[:0]
		}
	}
	return from, true
}
