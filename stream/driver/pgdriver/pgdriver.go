// Package pgdriver is the stream store's PostgreSQL driver (github.com/jackc/pgx/v5): any number of
// foldstream processes (nodes) share one database.
//
// What it adds to the single-process contract of package driver (see docs/postgres.md):
//
//   - Writers of one stream are serialised across nodes by a transaction-scoped advisory lock on
//     the stream's id (LockStream), taken before the store re-reads the stream's tail; writers of
//     different streams run in parallel. Offsets stay gapless and ordered; offset preconditions,
//     idempotency keys and producer state (epoch, seq) are checked and written in the same
//     transaction as the data.
//   - Commits are announced with NOTIFY on a channel named after the schema; every node LISTENs on
//     a dedicated connection. When that connection drops, the driver reconnects with backoff and,
//     until it is back, tells the store every poll interval that anything may have changed, so a
//     lost notification delays a reader, never loses data.
//   - Ephemeral events travel with the notification; payloads too large for NOTIFY's 8000-byte
//     limit go through an unlogged table read by id and deleted after a short retention.
//   - Leases (Acquire, Renew, Release) name which node runs a processor; checkpoint writes are
//     fenced by the lease's generation inside their transaction.
//   - Schema migrations run under a session advisory lock, so nodes starting together never race.
//
// Connection failures surface as *foldtype.Error with code UNAVAILABLE; the pool reconnects by
// itself when the database comes back.
package pgdriver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of Config.
const (
	// DefaultMaxConns is the pool size: the writer, the listener's reconnects, and concurrent
	// reads.
	DefaultMaxConns = 16
	// DefaultStatementTimeout bounds every statement, so a stuck database fails requests instead
	// of holding them.
	DefaultStatementTimeout = 30 * time.Second
	// DefaultPollInterval is how often readers are woken while the listening connection is down.
	DefaultPollInterval = 500 * time.Millisecond
	// DefaultEphemeralRetention is how long large ephemeral payloads stay readable by other nodes.
	DefaultEphemeralRetention = time.Minute
	// DefaultIdleInTransactionTimeout is how long the database lets a transaction sit idle
	// before it ends the session: a node paused or cut off mid-transaction would otherwise hold
	// its streams' locks, and every other node's writes to them, indefinitely.
	DefaultIdleInTransactionTimeout = 5 * time.Second
	// ReserveBlock is how far ahead of the offsets handed out a stream's logged reserve moves
	// when they reach it (docs/postgres.md#ephemeral-events): one WAL flush per this many
	// ephemeral offsets, and at most this many offsets skipped after a database crash.
	ReserveBlock = 1024
	// DefaultConnectTimeout bounds one connection attempt.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultWriteTimeout bounds every wait of a transaction on the database: taking a
	// connection, each round trip and the COMMIT (docs/postgres.md#bounded-waits).
	DefaultWriteTimeout = 10 * time.Second
)

// WriteTimeoutParam is the URL query parameter that sets Config.WriteTimeout
// (write_timeout=5s); the driver takes it out of the URL before connecting.
const WriteTimeoutParam = "write_timeout"

// Config configures a Driver. Only URL is required.
type Config struct {
	// URL is the database, as postgres://user@host:port/db?sslmode=disable. Runtime parameters
	// in the query (search_path=...) apply to every connection, so a schema can host one store.
	URL string
	// MaxConns is the pool size. Defaults to DefaultMaxConns; pool_max_conns in URL also works.
	MaxConns int32
	// StatementTimeout bounds each statement (server side). Defaults to DefaultStatementTimeout;
	// negative disables it.
	StatementTimeout time.Duration
	// IdleInTransactionTimeout ends the session of a transaction idle this long (server side),
	// releasing its locks. Defaults to DefaultIdleInTransactionTimeout; negative disables it.
	IdleInTransactionTimeout time.Duration
	// ConnectTimeout bounds one connection attempt. Defaults to DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// WriteTimeout bounds every wait of a transaction on the database, client side: taking a
	// connection, each round trip of a write (its COMMIT included) and each round trip of a read
	// until its first answer. A connection that misses it is closed; a COMMIT that misses it
	// fails with COMMIT_OUTCOME_UNKNOWN, anything else with UNAVAILABLE. It is also the
	// connections' TCP_USER_TIMEOUT, and keepalives probe idle connections well within it, so a
	// long result on a dead network fails too. Defaults to DefaultWriteTimeout; the URL
	// parameter write_timeout (a Go duration) sets it when this is zero; negative disables it.
	WriteTimeout time.Duration
	// PollInterval is how often waiters are woken while notifications are not flowing. Defaults
	// to DefaultPollInterval.
	PollInterval time.Duration
	// EphemeralRetention is how long large ephemeral payloads are kept for other nodes. Defaults
	// to DefaultEphemeralRetention.
	EphemeralRetention time.Duration
	// Logger receives the driver's logs. Defaults to slog.Default().
	Logger *slog.Logger
}

// Driver is the PostgreSQL driver. Create it with Open; it is safe for concurrent use.
type Driver struct {
	cfg        Config
	pool       *pgxpool.Pool
	log        *slog.Logger
	schema     string       // current_schema() of the pool's connections
	channel    string       // NOTIFY channel of this schema
	node       string       // this process's id; its own notifications are ignored
	reads      atomic.Int64 // Read calls (testhooks.PGReads)
	lockCls    int32        // advisory-lock class of per-stream locks
	subLockCls int32        // advisory-lock class of per-subscription locks
	pathCls    int32        // advisory-lock class of per-path locks (stream creation)

	// leaseWatchers hear of released leases (WatchLeases).
	leaseWatchers driver.LeaseWatchers

	// barrier is the state of the listen barrier (barrier.go).
	barrier barriers

	// writeRoundTrips counts the round trips of the store's write transactions.
	writeRoundTrips atomic.Int64

	closeOnce sync.Once
	stop      chan struct{}
	bg        sync.WaitGroup
}

var (
	_ driver.Driver             = (*Driver)(nil)
	_ driver.WriteTx            = (*writeTx)(nil)
	_ driver.StreamPrefetcher   = (*writeTx)(nil)
	_ driver.StreamExpecter     = (*writeTx)(nil)
	_ driver.LockKeeper         = (*writeTx)(nil)
	_ driver.Reader             = (*readTx)(nil)
	_ driver.SizedRecordsReader = (*readTx)(nil)
	_ driver.LeaseWatcher       = (*Driver)(nil)
	_ driver.CommitProber       = (*Driver)(nil)
	_ driver.LeaseBatchReleaser = (*Driver)(nil)
)

// IsURL reports whether s names a PostgreSQL database (postgres:// or postgresql://).
func IsURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// Open connects to the database. It does not create the schema: the store calls Migrate.
func Open(ctx context.Context, cfg Config) (*Driver, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StatementTimeout == 0 {
		cfg.StatementTimeout = DefaultStatementTimeout
	}
	if cfg.IdleInTransactionTimeout == 0 {
		cfg.IdleInTransactionTimeout = DefaultIdleInTransactionTimeout
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.EphemeralRetention <= 0 {
		cfg.EphemeralRetention = DefaultEphemeralRetention
	}
	rawURL, wt, err := takeWriteTimeout(cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = wt
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	pc, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse the database URL: %w", err)
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	} else if !strings.Contains(cfg.URL, "pool_max_conns") {
		pc.MaxConns = DefaultMaxConns
	}
	pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	pc.ConnConfig.DialFunc = dialer(cfg.WriteTimeout).DialContext
	if cfg.StatementTimeout > 0 {
		pc.ConnConfig.RuntimeParams["statement_timeout"] = fmt.Sprint(cfg.StatementTimeout.Milliseconds())
	}
	if cfg.IdleInTransactionTimeout > 0 {
		pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = fmt.Sprint(cfg.IdleInTransactionTimeout.Milliseconds())
	}
	pc.ConnConfig.RuntimeParams["application_name"] = "foldstream"
	pc.HealthCheckPeriod = 5 * time.Second
	// Large rows are read in bulk, not woken per segment (bulkread.go).
	pc.ConnConfig.AfterNetConnect = func(_ context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) {
		return wrapBulkReads(conn), nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	d := &Driver{cfg: cfg, pool: pool, log: cfg.Logger, node: newNodeID(), stop: make(chan struct{})}
	if err := pool.QueryRow(ctx, `SELECT coalesce(current_schema(), '')`).Scan(&d.schema); err != nil {
		pool.Close()
		return nil, d.classify(fmt.Errorf("postgres: connect: %w", err))
	}
	if d.schema == "" {
		// The URL's search_path names a schema that does not exist yet: create it (every node
		// given the same URL may, at once).
		sp := strings.TrimSpace(pc.ConnConfig.RuntimeParams["search_path"])
		if sp == "" || strings.ContainsAny(sp, ", ") {
			pool.Close()
			return nil, fmt.Errorf("postgres: no schema to use: the search_path names no existing schema")
		}
		name := searchPathSchema(sp)
		for attempt := 0; attempt < 2; attempt++ {
			if _, err = pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{name}.Sanitize()); err == nil {
				break
			}
		}
		if err != nil {
			pool.Close()
			return nil, d.classify(fmt.Errorf("postgres: create schema %s: %w", sp, err))
		}
		if err := pool.QueryRow(ctx, `SELECT coalesce(current_schema(), '')`).Scan(&d.schema); err != nil {
			pool.Close()
			return nil, d.classify(fmt.Errorf("postgres: connect: %w", err))
		}
		if d.schema == "" {
			pool.Close()
			return nil, fmt.Errorf("postgres: no schema to use: schema %q was created, but the URL's search_path %q does not name it", name, sp)
		}
	}
	d.channel = "foldstream_" + d.schema
	if len(d.channel) > 63 {
		d.channel = fmt.Sprintf("foldstream_%08x", uint32(lockKey(d.schema, "channel")))
	}
	d.lockCls = lockKey(d.schema, "stream")
	d.subLockCls = lockKey(d.schema, "subscription")
	d.pathCls = lockKey(d.schema, "path")
	d.bg.Add(1)
	go d.sweepEphemerals()
	return d, nil
}

// takeWriteTimeout returns rawURL without its write_timeout parameter (PostgreSQL would refuse
// it as an unknown setting) and the duration that parameter gives (0 when none).
func takeWriteTimeout(rawURL string) (string, time.Duration, error) {
	base, query, ok := strings.Cut(rawURL, "?")
	if !ok {
		return rawURL, 0, nil
	}
	var kept []string
	var d time.Duration
	for _, kv := range strings.Split(query, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if k != WriteTimeoutParam {
			kept = append(kept, kv)
			continue
		}
		v, _ = url.QueryUnescape(v)
		parsed, err := time.ParseDuration(v)
		if err != nil || parsed <= 0 {
			return "", 0, foldtype.NewError(foldtype.CodeInvalidConfig, map[string]any{"write_timeout": v},
				"postgres: %s=%q is not a positive duration; write it as 10s or 500ms", WriteTimeoutParam, v)
		}
		d = parsed
	}
	if len(kept) == 0 {
		return base, d, nil
	}
	return base + "?" + strings.Join(kept, "&"), d, nil
}

// dialer is the connections' dialer: TCP keepalives probe an idle connection after a second and
// give it up after about writeTimeout of silence, and TCP_USER_TIMEOUT (Linux) drops a connection
// whose sent data stays unacknowledged for writeTimeout, so a read streaming a long result over a
// network that went dark fails instead of waiting for ever (no deadline cuts the result itself).
func dialer(writeTimeout time.Duration) *net.Dialer {
	d := &net.Dialer{KeepAlive: 5 * time.Minute}
	if writeTimeout > 0 {
		interval := max(writeTimeout/5, 100*time.Millisecond)
		d.KeepAliveConfig = net.KeepAliveConfig{Enable: true, Idle: time.Second, Interval: interval, Count: 4}
		d.Control = userTimeout(writeTimeout)
	}
	return d
}

func newNodeID() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// Node returns this process's node id (the holder name its leases carry).
func (d *Driver) Node() string { return d.node }

// Schema returns the schema the driver's tables live in.
func (d *Driver) Schema() string { return d.schema }

// Pool returns the driver's connection pool (tests and tools).
func (d *Driver) Pool() *pgxpool.Pool { return d.pool }

// Exclusive reports false: other processes write the same database, so the store locks and
// re-reads each stream inside every write.
func (d *Driver) Exclusive() bool { return false }

// Close stops the driver's background work and closes the pool.
func (d *Driver) Close() error {
	d.closeOnce.Do(func() {
		close(d.stop)
		d.bg.Wait()
		d.pool.Close()
	})
	return nil
}

// Read runs fn in a read-only REPEATABLE READ transaction: one snapshot of committed data.
// BEGIN goes to the server together with fn's first statement, so a read costs one round trip
// per statement plus the closing ROLLBACK.
func (d *Driver) Read(ctx context.Context, fn func(driver.Reader) error) error {
	d.reads.Add(1)
	p, err := d.beginPipelineMode(ctx, readBegin)
	if err != nil {
		return d.classify(fmt.Errorf("begin read: %w", err))
	}
	defer p.rollback(context.Background()) //nolint:errcheck // read-only; nothing to keep
	return fn(&readTx{d: d, tx: p})
}

// Writer returns the store writer's handle. Each write transaction takes a pooled connection, so
// a connection the database dropped is replaced by the next Begin.
func (d *Driver) Writer(ctx context.Context) (driver.Writer, error) {
	return &writer{d: d}, nil
}

// classify turns connection-level failures into UNAVAILABLE errors (503 with Retry-After at the
// server): the database is down, restarting or unreachable. Other errors pass unchanged.
func (d *Driver) classify(err error) error {
	if err == nil {
		return err
	}
	collided := isCollision(err)
	if !collided && !isUnavailable(err) {
		return err
	}
	var fe *foldtype.Error
	if errors.As(err, &fe) {
		return err
	}
	if collided {
		return &foldtype.Error{Code: foldtype.CodeUnavailable, Retryable: true, Data: map[string]any{"reason": driver.ReasonCollision},
			Message: "the write collided with another node's concurrent write and was refused; retry it: " + err.Error(), Err: err}
	}
	return &foldtype.Error{Code: foldtype.CodeUnavailable, Retryable: true,
		Message: "the database is unavailable; retry later: " + err.Error(), Err: err}
}

// isCollision reports a write that PostgreSQL refused because of a concurrent transaction, which
// a retry can fix: a deadlock between nodes' groups (which the lock discipline leaves to the
// deadlock detector when a function already relies on a lock), a serialization failure, or two
// records at one offset of a stream (the records primary key; the stream lock makes this
// impossible, but should it happen, the caller gets a retryable error rather than an internal one).
func isCollision(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "40P01", "40001": // deadlock_detected, serialization_failure
		return true
	case "23505": // unique_violation
		return pgErr.ConstraintName == "records_pkey"
	}
	return false
}

// isUnavailable reports a failure to reach or keep the database (as opposed to a refused
// statement).
func isUnavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"): // connection exception
			return true
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03": // admin shutdown, crash shutdown, cannot connect now
			return true
		case pgErr.Code == "57014": // query_canceled (statement timeout)
			return true
		case pgErr.Code == "53300": // too many connections
			return true
		}
		return false
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "unexpected EOF") ||
		strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe") ||
		strings.Contains(msg, "closed pool")
}

// Redacted returns url with its password hidden, for logs.
func Redacted(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "postgres://…"
	}
	return u.Redacted()
}

// searchPathSchema is the schema a search_path of one element names, as PostgreSQL reads it: a
// quoted name as written (a doubled quote inside stands for one), an unquoted one folded to lower
// case. CREATE SCHEMA must use that name, or the schema it creates is not the one the search_path
// finds (search_path=MyApp names schema myapp).
func searchPathSchema(sp string) string {
	if len(sp) >= 2 && sp[0] == '"' && sp[len(sp)-1] == '"' {
		return strings.ReplaceAll(sp[1:len(sp)-1], `""`, `"`)
	}
	b := []byte(sp)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}
