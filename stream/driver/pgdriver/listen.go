package pgdriver

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/foldstream/foldstream/stream/driver"
	"github.com/jackc/pgx/v5"
)

// Notifications between nodes.
//
// A committing write transaction sends one pg_notify on the schema's channel, carrying the
// sender's node id and the streams it changed. PostgreSQL delivers it to every listening session
// when (and only if) the transaction commits. Each node listens on a dedicated connection; its own
// notifications are skipped (the store already woke its local waiters).
//
// A stream's entry carries, when the payload stays under NOTIFY's limit, the stream's row after
// the transaction and the records it appended, so the receiving store can hand them to its live
// readers without reading them back (docs/postgres.md#live-reads). A payload too large with them
// is sent without them, and the receivers read the database.
//
// A notification can be lost: the listening connection drops, the database restarts, or the
// listener falls behind. So while the listener is not connected the driver calls the store back
// with a zero notification ("anything may have changed") every PollInterval, and once more right
// after it reconnects; waiters then re-read the database. A lost notification delays a reader by
// at most PollInterval plus the reconnect time; it never loses data: the records a notification
// carries are committed (PostgreSQL delivers it only on commit), and a receiver uses them only
// when they continue exactly what it already knows of the stream.

// maxNotifyPayload stays under PostgreSQL's 8000-byte NOTIFY payload limit.
const maxNotifyPayload = 7900

// wireNote is a notification's payload.
type wireNote struct {
	Node    string       `json:"n"`
	Streams []wireStream `json:"s,omitempty"`
	All     bool         `json:"a,omitempty"`
	Large   int64        `json:"l,omitempty"` // id of an ephemeral_payloads row holding Streams
	// Released names leases the sender released (ReleaseLease), for the WatchLeases watchers.
	Released []string `json:"r,omitempty"`
	Holder   string   `json:"h,omitempty"`
}

type wireStream struct {
	ID   int64           `json:"i"`
	Path string          `json:"p,omitempty"`
	Eph  json.RawMessage `json:"e,omitempty"` // the stream's ephemeral events (a JSON value)
	// Row and Recs are the stream's row after the transaction and the records it appended
	// (driver.Notification's Stream and Records), when the payload has room for them.
	Row  *driver.Stream `json:"w,omitempty"`
	Recs []wireRecord   `json:"r,omitempty"`
	// noRows marks a stream whose records do not travel (not sent).
	noRows bool
}

// wireRecord is one record in a notification (byte fields travel as base64).
type wireRecord struct {
	RecordStart int64  `json:"rs"`
	Start       int64  `json:"s"`
	End         int64  `json:"e"`
	CreatedMs   int64  `json:"c"`
	Frames      []byte `json:"f,omitempty"`
	Body        []byte `json:"b,omitempty"`
}

// sendNotes sends the transaction's queued notifications as one payload. A payload over NOTIFY's
// limit (ephemeral events, or very many streams) is written to the unlogged ephemeral_payloads
// table in this transaction and the notification carries the row's id.
func (t *writeTx) sendNotes(ctx context.Context) error {
	if len(t.notes) == 0 {
		return nil
	}
	byID := make(map[int64]int, len(t.notes))
	w := wireNote{Node: t.d.node}
	for _, n := range t.notes {
		if n.StreamID == 0 {
			w.All = true
			continue
		}
		i, ok := byID[n.StreamID]
		if !ok {
			i = len(w.Streams)
			byID[n.StreamID] = i
			w.Streams = append(w.Streams, wireStream{ID: n.StreamID, Path: n.Path})
		}
		switch ws := &w.Streams[i]; {
		case ws.noRows:
		case n.Stream == nil || ws.Row != nil:
			// Unknown, or two notes of one stream: the receivers read.
			ws.Row, ws.Recs, ws.noRows = nil, nil, true
		default:
			ws.Row = n.Stream
			for _, r := range n.Records {
				ws.Recs = append(ws.Recs, wireRecord{RecordStart: r.RecordStart, Start: r.Start, End: r.End,
					CreatedMs: r.CreatedMs, Frames: r.Frames, Body: r.Body})
			}
		}
		if len(n.Ephemeral) > 0 {
			ws := &w.Streams[i]
			if ws.Eph == nil {
				ws.Eph = json.RawMessage(n.Ephemeral)
			} else {
				// Two batches of one stream in one transaction: join their JSON arrays.
				ws.Eph = joinArrays(ws.Eph, n.Ephemeral)
			}
		}
	}
	t.notes = t.notes[:0]
	payload, err := notePayload(&w)
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	if len(payload) > maxNotifyPayload {
		big, err := json.Marshal(w.Streams)
		if err != nil {
			return fmt.Errorf("notify: %w", err)
		}
		var id int64
		if err := t.tx.QueryRow(ctx, `INSERT INTO ephemeral_payloads(payload) VALUES ($1) RETURNING id`, big).Scan(&id); err != nil {
			return t.d.classify(fmt.Errorf("notify: store a large payload: %w", err))
		}
		payload, _ = json.Marshal(wireNote{Node: t.d.node, All: w.All, Large: id})
	}
	if _, err := t.tx.Exec(ctx, `SELECT pg_notify($1, $2)`, t.d.channel, string(payload)); err != nil {
		return t.d.classify(fmt.Errorf("notify: %w", err))
	}
	return nil
}

// notePayload marshals w, with its streams' rows and records when they fit under NOTIFY's limit
// and without them (receivers read instead) when they do not. When the rows and records cannot fit
// by their size alone (minRowsSize), w is marshaled once, without them: a group of plain appends
// to 16 streams carries about 14 kB of them, and marshaling that only to drop it was a twentieth
// of the node's CPU per append (docs/postgres.md#writes-round-trips).
func notePayload(w *wireNote) ([]byte, error) {
	if !w.hasRows() || w.minRowsSize() <= maxNotifyPayload {
		payload, err := json.Marshal(w)
		if err != nil || len(payload) <= maxNotifyPayload || !w.hasRows() {
			return payload, err
		}
	}
	// Over NOTIFY's limit with the records: send without them; receivers read instead.
	for i := range w.Streams {
		w.Streams[i].Row, w.Streams[i].Recs = nil, nil
	}
	return json.Marshal(w)
}

// minRowJSON is the length of the shortest JSON of a driver.Stream: every number 0, every string
// empty, every bool (Valid included) true.
var minRowJSON = func() int {
	b, err := json.Marshal(driver.Stream{Closed: true, TTLSeconds: sql.NullInt64{Valid: true},
		ExpiresAtMs: sql.NullInt64{Valid: true}, ClosedByProducer: sql.NullString{Valid: true},
		ClosedByEpoch: sql.NullInt64{Valid: true}, ClosedBySeq: sql.NullInt64{Valid: true},
		ForkedFrom: sql.NullInt64{Valid: true}, StreamSeq: sql.NullString{Valid: true}, Paused: sql.NullString{Valid: true}})
	if err != nil {
		panic(err)
	}
	return len(b)
}()

// minRowsSize is a lower bound of the length of w's JSON with its rows and records, less the sender
// and flags: each stream's id and path, the members that carry its row and records, each row as
// rowJSONLen, each record's members with its frames and body in base64. It is exact when every
// string of the rows is printable ASCII that JSON does not escape.
func (w *wireNote) minRowsSize() int {
	n := 0
	for _, s := range w.Streams {
		n += s.minBareSize()
		if s.Row != nil {
			n += len(`,"w":`) + rowJSONLen(s.Row)
		}
		if len(s.Recs) > 0 {
			n += len(`,"r":[]`) + len(s.Recs) - 1
		}
		for _, r := range s.Recs {
			n += len(`{"rs":,"s":,"e":,"c":}`) + intLen(r.RecordStart) + intLen(r.Start) + intLen(r.End) + intLen(r.CreatedMs)
			if len(r.Frames) > 0 {
				n += len(`,"f":""`) + base64.StdEncoding.EncodedLen(len(r.Frames))
			}
			if len(r.Body) > 0 {
				n += len(`,"b":""`) + base64.StdEncoding.EncodedLen(len(r.Body))
			}
		}
	}
	return n
}

// minBareSize is a lower bound of the bytes s takes in a notification's JSON without its row and
// records (and its ephemerals, which compacting may shorten): its id, its path, a separating comma.
func (s *wireStream) minBareSize() int {
	n := len(`,{"i":}`) + intLen(s.ID)
	if s.Path != "" {
		n += len(`,"p":""`) + len(s.Path)
	}
	return n
}

// rowJSONLen is a lower bound of the length of row's JSON: minRowJSON plus each number's digits
// past the first, each false past true, and each string's bytes (escaping only lengthens them).
func rowJSONLen(r *driver.Stream) int {
	n := minRowJSON + len(r.Path) + len(r.ContentType)
	for _, v := range [...]int64{r.ID, int64(r.State), r.CreatedMs, r.LastAccessMs, r.ForkOffset, r.ForkSubOffset,
		r.BaseTail, r.Tail, r.Incarnation, r.Highest} {
		n += intLen(v) - 1
	}
	for _, v := range [...]sql.NullInt64{r.TTLSeconds, r.ExpiresAtMs, r.ClosedByEpoch, r.ClosedBySeq, r.ForkedFrom} {
		n += intLen(v.Int64) - 1 + boolLen(v.Valid) - 4
	}
	for _, v := range [...]sql.NullString{r.ClosedByProducer, r.StreamSeq, r.Paused} {
		n += len(v.String) + boolLen(v.Valid) - 4
	}
	return n + boolLen(r.Closed) - 4
}

// intLen is the length of v in decimal.
func intLen(v int64) int {
	n := 1
	if v < 0 {
		n++
		if v == math.MinInt64 {
			return 20
		}
		v = -v
	}
	for ; v >= 10; v /= 10 {
		n++
	}
	return n
}

func boolLen(v bool) int {
	if v {
		return 4
	}
	return 5
}

func (w *wireNote) hasRows() bool {
	for _, s := range w.Streams {
		if s.Row != nil {
			return true
		}
	}
	return false
}

// joinArrays joins two JSON arrays ("[a]" + "[b]" = "[a,b]"); a value that is not an array is
// kept as one element.
func joinArrays(a, b []byte) json.RawMessage {
	var xs, ys []json.RawMessage
	if json.Unmarshal(a, &xs) != nil {
		xs = []json.RawMessage{a}
	}
	if json.Unmarshal(b, &ys) != nil {
		ys = []json.RawMessage{b}
	}
	out, _ := json.Marshal(append(xs, ys...))
	return out
}

// Listen starts the listener: fn is called for every notification of another node, and with a
// zero Notification while (and right after) notifications may have been missed. It returns once
// the first LISTEN is in place, or fails when the database cannot be reached.
func (d *Driver) Listen(ctx context.Context, fn func(driver.Notification)) (func(), error) {
	conn, err := d.listenConn(ctx)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.listenLoop(lctx, conn, fn)
	}()
	stop := func() {
		cancel()
		<-done
	}
	go func() {
		select {
		case <-ctx.Done():
			stop()
		case <-lctx.Done():
		}
	}()
	return stop, nil
}

// listenConn opens a dedicated connection (not from the pool: it is held for as long as the
// listener runs), named "foldstream listener <node>" in pg_stat_activity, and LISTENs on the
// schema's channel and on this process's barrier channel (barrier.go).
func (d *Driver) listenConn(ctx context.Context) (*pgx.Conn, error) {
	cfg := d.pool.Config().ConnConfig.Copy()
	delete(cfg.RuntimeParams, "statement_timeout")
	delete(cfg.RuntimeParams, "idle_in_transaction_session_timeout")
	cfg.RuntimeParams["application_name"] = ListenerName(d.node)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, d.classify(fmt.Errorf("listen: connect: %w", err))
	}
	// The schema's channel last: pg_stat_activity then shows the listener's query as its LISTEN.
	for _, ch := range []string{d.barrierChannel(), d.channel} {
		if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{ch}.Sanitize()); err != nil {
			conn.Close(context.Background())
			return nil, d.classify(fmt.Errorf("listen: %w", err))
		}
	}
	return conn, nil
}

// ListenerName is the application_name of the listener connection of the driver whose Node is
// node, as pg_stat_activity shows it.
func ListenerName(node string) string { return "foldstream listener " + node }

// listenLoop delivers notifications until ctx ends, reconnecting with backoff (100 ms doubling
// to 5 s) whenever the connection fails, and polling meanwhile.
func (d *Driver) listenLoop(ctx context.Context, conn *pgx.Conn, fn func(driver.Notification)) {
	defer func() {
		d.setListening(false)
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	d.setListening(true)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		if conn == nil {
			// Not listening: poll until the connection is back.
			fn(driver.Notification{})
			c, err := d.listenConn(ctx)
			if err != nil {
				wait := min(backoff, d.cfg.PollInterval)
				backoff = min(backoff*2, 5*time.Second)
				d.log.Debug("postgres: listener reconnect failed", "err", err, "retry_in", wait)
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
				continue
			}
			conn = c
			backoff = 100 * time.Millisecond
			d.log.Info("postgres: listener reconnected")
			fn(driver.Notification{}) // whatever committed while we were away
			d.setListening(true)
		}
		n, err := waitNotification(ctx, conn, d.cfg.PollInterval)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d.log.Warn("postgres: listener connection lost; polling until it is back", "err", err)
			d.setListening(false)
			conn.Close(context.Background())
			conn = nil
			continue
		}
		if n == nil {
			continue
		}
		if n.Channel != d.channel {
			d.heardMarker(n.Payload)
			continue
		}
		d.deliver(ctx, n.Payload, fn)
	}
}

// waitNotification waits up to idle for one notification; (nil, nil) when none came. Waking up
// every idle also pings the connection, so a silently dead one is noticed.
func waitNotification(ctx context.Context, conn *pgx.Conn, idle time.Duration) (*pgconnNotification, error) {
	wctx, cancel := context.WithTimeout(ctx, 10*idle)
	defer cancel()
	n, err := conn.WaitForNotification(wctx)
	if err != nil {
		if ctx.Err() == nil && wctx.Err() != nil {
			// Idle: check the connection is alive before waiting again.
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
			defer pcancel()
			if perr := conn.Ping(pctx); perr != nil {
				return nil, perr
			}
			return nil, nil
		}
		return nil, err
	}
	return &pgconnNotification{Channel: n.Channel, Payload: n.Payload}, nil
}

type pgconnNotification struct{ Channel, Payload string }

// deliver decodes one payload and calls fn for each stream it names (once with a zero
// Notification for "anything"). Payloads of this node are skipped; a large payload is read from
// ephemeral_payloads (when it is gone — past its retention — its streams are still woken, only
// their ephemerals are lost, as ephemerals may be).
func (d *Driver) deliver(ctx context.Context, payload string, fn func(driver.Notification)) {
	if ownNote(payload, d.node) {
		return // this process's own commit: nothing to decode (every commit hears itself)
	}
	var w wireNote
	if err := json.Unmarshal([]byte(payload), &w); err != nil {
		d.log.Warn("postgres: unreadable notification; waking every reader", "err", err)
		fn(driver.Notification{})
		return
	}
	if w.Node == d.node {
		return
	}
	for _, key := range w.Released {
		d.leaseWatchers.Released(key, w.Holder)
	}
	if w.Large != 0 {
		var big []byte
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := d.pool.QueryRow(rctx, `SELECT payload FROM ephemeral_payloads WHERE id = $1`, w.Large).Scan(&big)
		cancel()
		if err == nil {
			err = json.Unmarshal(big, &w.Streams)
		}
		if err != nil {
			d.log.Warn("postgres: large notification payload unreadable; waking every reader", "id", w.Large, "err", err)
			w.All = true
		}
	}
	if w.All {
		fn(driver.Notification{})
	}
	for _, s := range w.Streams {
		n := driver.Notification{StreamID: s.ID, Path: s.Path, Ephemeral: s.Eph}
		if s.Row != nil && s.Row.ID == s.ID {
			n.Stream = s.Row
			n.Records = make([]driver.Record, len(s.Recs))
			for i, r := range s.Recs {
				n.Records[i] = driver.Record{StreamID: s.ID, RecordStart: r.RecordStart, Start: r.Start, End: r.End,
					CreatedMs: r.CreatedMs, Frames: r.Frames, Body: r.Body}
			}
		}
		fn(n)
	}
}

// ownNote reports whether payload is a notification of node's own, from its first member (the
// sender's id, which json.Marshal writes first, as wireNote declares it), without decoding it.
func ownNote(payload, node string) bool {
	const open = `{"n":"`
	rest, ok := strings.CutPrefix(payload, open)
	if !ok {
		return false
	}
	rest, ok = strings.CutPrefix(rest, node)
	return ok && (strings.HasPrefix(rest, `",`) || rest == `"}`)
}
