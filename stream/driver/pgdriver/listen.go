package pgdriver

import (
	"context"
	"encoding/json"
	"fmt"
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
// A notification can be lost: the listening connection drops, the database restarts, or the
// listener falls behind. So while the listener is not connected the driver calls the store back
// with a zero notification ("anything may have changed") every PollInterval, and once more right
// after it reconnects; waiters then re-read the database. A lost notification delays a reader by
// at most PollInterval plus the reconnect time; it never loses data, because readers always read
// committed rows, never the notification's content.

// maxNotifyPayload stays under PostgreSQL's 8000-byte NOTIFY payload limit.
const maxNotifyPayload = 7900

// wireNote is a notification's payload.
type wireNote struct {
	Node    string         `json:"n"`
	Streams []wireStream   `json:"s,omitempty"`
	All     bool           `json:"a,omitempty"`
	Large   int64          `json:"l,omitempty"` // id of an ephemeral_payloads row holding the rest
	Extra   map[string]any `json:"x,omitempty"`
}

type wireStream struct {
	ID   int64  `json:"i"`
	Path string `json:"p,omitempty"`
}

// sendNotes sends the transaction's queued notifications as one payload (several when they do
// not fit; a payload naming too many streams becomes "anything may have changed").
func (t *writeTx) sendNotes(ctx context.Context) error {
	if len(t.notes) == 0 {
		return nil
	}
	seen := make(map[int64]bool, len(t.notes))
	w := wireNote{Node: t.d.node}
	for _, n := range t.notes {
		if n.StreamID == 0 {
			w.All = true
			continue
		}
		if seen[n.StreamID] {
			continue
		}
		seen[n.StreamID] = true
		w.Streams = append(w.Streams, wireStream{ID: n.StreamID, Path: n.Path})
	}
	t.notes = t.notes[:0]
	payload, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	if len(payload) > maxNotifyPayload {
		payload, _ = json.Marshal(wireNote{Node: t.d.node, All: true})
	}
	if _, err := t.tx.Exec(ctx, `SELECT pg_notify($1, $2)`, t.d.channel, string(payload)); err != nil {
		return t.d.classify(fmt.Errorf("notify: %w", err))
	}
	return nil
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
// listener runs) and LISTENs on the channel.
func (d *Driver) listenConn(ctx context.Context) (*pgx.Conn, error) {
	cfg := d.pool.Config().ConnConfig.Copy()
	delete(cfg.RuntimeParams, "statement_timeout")
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, d.classify(fmt.Errorf("listen: connect: %w", err))
	}
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{d.channel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, d.classify(fmt.Errorf("listen: %w", err))
	}
	return conn, nil
}

// listenLoop delivers notifications until ctx ends, reconnecting with backoff (100 ms doubling
// to 5 s) whenever the connection fails, and polling meanwhile.
func (d *Driver) listenLoop(ctx context.Context, conn *pgx.Conn, fn func(driver.Notification)) {
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
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
		}
		n, err := waitNotification(ctx, conn, d.cfg.PollInterval)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d.log.Warn("postgres: listener connection lost; polling until it is back", "err", err)
			conn.Close(context.Background())
			conn = nil
			continue
		}
		if n == nil {
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
	return &pgconnNotification{Payload: n.Payload}, nil
}

type pgconnNotification struct{ Payload string }

// deliver decodes one payload and calls fn for each stream it names (once with a zero
// Notification for "anything"). Payloads of this node are skipped.
func (d *Driver) deliver(ctx context.Context, payload string, fn func(driver.Notification)) {
	var w wireNote
	if err := json.Unmarshal([]byte(payload), &w); err != nil {
		d.log.Warn("postgres: unreadable notification; waking every reader", "err", err)
		fn(driver.Notification{})
		return
	}
	if w.Node == d.node {
		return
	}
	if w.All {
		fn(driver.Notification{})
	}
	for _, s := range w.Streams {
		fn(driver.Notification{StreamID: s.ID, Path: s.Path})
	}
}
