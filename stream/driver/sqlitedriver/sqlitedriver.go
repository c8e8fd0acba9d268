// Package sqlitedriver is the stream store's embedded default driver: one SQLite file
// (modernc.org/sqlite, pure Go, WAL) written by one process.
//
// Open it with [Open] and hand it to stream.OpenDriver, or let storeopen.Open choose it for a
// file path. A program that imports only this driver does not link the PostgreSQL client.
//
// # Durability
//
// By default the file uses journal_mode=WAL and synchronous=FULL: an acknowledged write survives a
// process crash and a power loss. [Config.Synchronous] may relax this to NORMAL (survives a crash
// of the process, may lose the last transactions on power loss); it is never the default.
//
// # One process per file
//
// The driver holds an exclusive lock on the file from Open until Close (the sidecar file
// "<path>-lock", see lock.go): a second Open of the same file, from another process or this one,
// fails with STORE_LOCKED, naming the file and, when known, the holder's pid. That lock is what
// makes the driver exclusive ([driver.Driver.Exclusive]). A file or directory the process cannot
// write fails Open with STORE_READ_ONLY; a full disk fails a write with INSUFFICIENT_STORAGE
// ([Driver.ClassifyError]).
//
// Layout (schema version 2, see migrate.go): a stream's log is the records table, one row per
// appended record (or per slice of a large one), keyed by a global rowid so appends fill the
// table's rightmost leaf and a record's body never sits in an index; the narrow index
// records_by_end (stream_id, end_pos) finds a stream's records and its tail. Idempotency keys
// live in record_keys, producer state in producers, processor claims in claims, checkpoints in
// reduce_checkpoints. Leases are kept in memory (leases.go); the leases table of the schema is
// unused.
package sqlitedriver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
	_ "modernc.org/sqlite" // the pure-Go SQLite driver
)

// Synchronous values accepted by Config.Synchronous.
const (
	// SyncFull makes every commit durable against power loss (the default).
	SyncFull = "FULL"
	// SyncNormal keeps commits durable against a process crash only; in WAL mode the last
	// transactions may be lost on power loss. Faster; never the default.
	SyncNormal = "NORMAL"
)

// Config configures a Driver.
type Config struct {
	// Path is the database file; ":memory:" opens a private in-memory database (tests).
	Path string
	// Synchronous is SQLite's synchronous setting, SyncFull or SyncNormal (case does not
	// matter). Defaults to SyncFull.
	Synchronous string
	// ReadConns is the number of read connections. Defaults to 4; negative is refused.
	ReadConns int
}

// Driver is the SQLite driver. Create it with Open.
type Driver struct {
	cfg Config
	wdb *sql.DB // the single writer connection
	rdb *sql.DB // read-only connections

	// savepoints counts savepoints opened; tests use it to prove a write ran no SQL.
	savepoints atomic.Int64

	writerMu sync.Mutex
	writers  []*writer // handed out by Writer; Close closes their connections

	leases        leaseTable // in memory: see leases.go
	leaseWatchers driver.LeaseWatchers
	lock          *os.File // the exclusive lock on the database file, held until Close (lock.go)

	reads readStmts // the read connections' prepared statements
}

var (
	_ driver.Driver              = (*Driver)(nil)
	_ driver.ErrorClassifier     = (*Driver)(nil)
	_ driver.Locator             = (*Driver)(nil)
	_ driver.LeaseWatcher        = (*Driver)(nil)
	_ driver.WriteTx             = (*writeTx)(nil)
	_ driver.HidingTx            = (*writeTx)(nil)
	_ driver.FreshStreamInserter = (*writeTx)(nil)
	_ driver.Reader              = (*readTx)(nil)
)

var memCounter atomic.Int64

// Open opens the database at cfg.Path (creating the file when missing), holding the file's
// exclusive lock until Close, and proves that it takes writes. The store calls Migrate before use.
//
// A second Open of a file that is open fails with STORE_LOCKED; a file or directory this process
// cannot write fails with STORE_READ_ONLY; a Synchronous value other than FULL or NORMAL, or a
// negative ReadConns, fails with INVALID_CONFIG.
func Open(ctx context.Context, cfg Config) (_ *Driver, err error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	path := cfg.Path
	// The exclusive lock comes first, so a second opener never touches the database (lock.go).
	var lock *os.File
	defer func() {
		if err != nil {
			unlockStore(lock) //nolint:errcheck // Open failed; report that error
			err = openFailure(path, err)
		}
	}()
	if path != ":memory:" {
		if lock, err = lockStore(path); err != nil {
			return nil, err
		}
		// Prove the store can write, so a read-only file or directory is refused here and not
		// by every write later; ProbeWritable checks the database itself.
		if err := probeDirWritable(path); err != nil {
			return nil, err
		}
	}
	d, err := openDB(cfg)
	if err != nil {
		return nil, fmt.Errorf("open stream store %s: %w", path, err)
	}
	if err := d.ProbeWritable(ctx); err != nil {
		d.Close()
		return nil, fmt.Errorf("open stream store %s: prove the database takes writes: %w", path, err)
	}
	d.lock = lock
	return d, nil
}

// check validates cfg and fills in its defaults.
func (cfg *Config) check() error {
	if cfg.Path == "" {
		return foldtype.NewError(foldtype.CodeInvalidConfig, nil, "open stream store: no database file given; name a file, or \":memory:\" for a private in-memory store")
	}
	if cfg.Synchronous == "" {
		cfg.Synchronous = SyncFull
	}
	cfg.Synchronous = strings.ToUpper(cfg.Synchronous)
	if cfg.Synchronous != SyncFull && cfg.Synchronous != SyncNormal {
		return foldtype.NewError(foldtype.CodeInvalidConfig, map[string]any{"synchronous": cfg.Synchronous},
			"open stream store: unknown synchronous mode %q (use FULL or NORMAL)", cfg.Synchronous)
	}
	if cfg.ReadConns < 0 {
		return foldtype.NewError(foldtype.CodeInvalidConfig, map[string]any{"readConns": cfg.ReadConns},
			"open stream store: ReadConns is %d; give a positive number of read connections, or 0 for the default", cfg.ReadConns)
	}
	if cfg.ReadConns == 0 {
		cfg.ReadConns = 4
	}
	return nil
}

// openDB opens the writer's and the readers' database handles.
func openDB(cfg Config) (*Driver, error) {
	var wdsn, rdsn string
	if cfg.Path == ":memory:" {
		// memdb lets several connections share one in-memory database.
		name := fmt.Sprintf("/foldstream-mem-%d", memCounter.Add(1))
		base := "file:" + name + "?vfs=memdb&_pragma=busy_timeout(10000)&_pragma=foreign_keys(on)"
		wdsn, rdsn = base, base
	} else {
		u := "file:" + (&url.URL{Path: cfg.Path}).EscapedPath()
		common := "_pragma=busy_timeout(10000)&_pragma=foreign_keys(on)"
		wdsn = u + "?" + common + "&_pragma=journal_mode(WAL)&_pragma=synchronous(" + cfg.Synchronous + ")"
		// Read connections map up to 1 GiB of the file: a catch-up read then copies pages from the
		// page cache instead of a pread per 4 KiB page (-20 % CPU per message served). Only reads
		// use the mapping; every write goes through the writer's pwrite and fsync as before.
		rdsn = u + "?" + common + "&_pragma=query_only(1)&_pragma=mmap_size(1073741824)"
	}
	wdb, err := sql.Open("sqlite", wdsn)
	if err != nil {
		return nil, err
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	if err := wdb.Ping(); err != nil {
		wdb.Close()
		return nil, err
	}
	rdb, err := sql.Open("sqlite", rdsn)
	if err != nil {
		wdb.Close()
		return nil, err
	}
	rdb.SetMaxOpenConns(cfg.ReadConns)
	rdb.SetMaxIdleConns(cfg.ReadConns)
	return &Driver{cfg: cfg, wdb: wdb, rdb: rdb}, nil
}

// ProbeWritable proves that the database takes writes: SQLite opens a file it may not write
// read-only without a word, and every later write would fail. The probe takes the write lock and
// creates a table, then rolls back, leaving nothing behind.
func (d *Driver) ProbeWritable(ctx context.Context) error {
	conn, err := d.wdb.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, "CREATE TABLE foldstream_write_probe(x)")
	if _, rbErr := conn.ExecContext(ctx, "ROLLBACK"); err == nil {
		err = rbErr
	}
	return err
}

// Location returns the database file's path (see [driver.Locator]).
func (d *Driver) Location() string { return d.cfg.Path }

// Exclusive reports true: one process writes a SQLite file.
func (d *Driver) Exclusive() bool { return true }

// Close closes the writers' connections and the database handles, then releases the file's lock.
// A connection taken out of database/sql (the writer's) is not closed by sql.DB.Close, and an open
// one keeps the database files open after the store is closed.
func (d *Driver) Close() error {
	d.writerMu.Lock()
	var errs []error
	for _, w := range d.writers {
		for _, st := range w.stmts.stmts {
			errs = append(errs, st.Close())
		}
		errs = append(errs, w.conn.Close())
	}
	d.writers = nil
	errs = append(errs, d.reads.close())
	lock := d.lock
	d.lock = nil
	d.writerMu.Unlock()
	errs = append(errs, d.rdb.Close(), d.wdb.Close())
	d.reads.preparing.Wait() // the pool is closed: a preparation waiting for a connection ends
	return errors.Join(append(errs, unlockStore(lock))...)
}

// Listen returns at once: no other process writes the file.
func (d *Driver) Listen(ctx context.Context, fn func(driver.Notification)) (func(), error) {
	return func() {}, nil
}

// Read runs fn in a read-only transaction.
func (d *Driver) Read(ctx context.Context, fn func(driver.Reader) error) error {
	tx, err := d.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only; nothing to keep
	return fn(&readTx{q: readQuerier{tx: tx, stmts: &d.reads, db: d.rdb}})
}

// Writer returns the write connection.
func (d *Driver) Writer(ctx context.Context) (driver.Writer, error) {
	conn, err := d.wdb.Conn(ctx)
	if err != nil {
		return nil, err
	}
	w := &writer{d: d, conn: conn, stmts: &stmtCache{conn: conn, stmts: make(map[string]*sql.Stmt)}}
	// A record written over several transactions whose writer stopped (a crash) before it became
	// visible is dropped before anything else is written.
	if err := w.dropAllHidden(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	d.writerMu.Lock()
	d.writers = append(d.writers, w)
	d.writerMu.Unlock()
	return w, nil
}

// querier is what the read transaction and the writer's statement cache offer.
type querier interface {
	exec(ctx context.Context, query string, args ...any) (sql.Result, error)
	query(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	queryRow(ctx context.Context, query string, args ...any) *sql.Row
}

// readStmts keeps the read connections' prepared statements. A read transaction is short (an
// engine's open reads a stream row and a checkpoint, each its own transaction), so parsing its
// SQL anew each time was most of its cost: a statement is prepared once on the read pool and
// database/sql reuses it on each connection it was prepared on (Tx.StmtContext prepares it on a
// transaction's connection the first time, on that connection).
//
// A statement not prepared yet is prepared in the background while the query that asked for it
// runs unprepared: preparing on the pool needs a free connection, and a transaction holding one
// while it waits for another would deadlock once every connection is in such a transaction.
type readStmts struct {
	mu      sync.RWMutex
	stmts   map[string]*sql.Stmt
	pending map[string]bool
	closed  bool
	// preparing counts the background preparations; Close waits for them once the pool is
	// closed, so none holds a connection (an open file) after Close returns.
	preparing sync.WaitGroup
}

// get returns the pool's prepared statement for query, or nil when there is none yet (it is then
// being prepared) or it cannot be cached (the cache is full or closed, or preparing failed): the
// caller then runs the query directly.
func (c *readStmts) get(db *sql.DB, query string) *sql.Stmt {
	c.mu.RLock()
	st := c.stmts[query]
	c.mu.RUnlock()
	if st != nil {
		return st
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.stmts[query]; st != nil {
		return st
	}
	if c.closed || c.pending[query] || len(c.stmts)+len(c.pending) >= maxCachedStmts {
		return nil
	}
	if c.pending == nil {
		c.pending = make(map[string]bool)
	}
	c.pending[query] = true
	c.preparing.Add(1)
	go c.prepare(db, query)
	return nil
}

// prepare prepares query on the pool and caches it. It waits for a free connection; closing the
// pool ends the wait.
func (c *readStmts) prepare(db *sql.DB, query string) {
	defer c.preparing.Done()
	st, err := db.PrepareContext(context.Background(), query)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, query)
	if err != nil {
		return
	}
	if c.closed {
		st.Close()
		return
	}
	if c.stmts == nil {
		c.stmts = make(map[string]*sql.Stmt)
	}
	c.stmts[query] = st
}

// close closes every cached statement; none is cached after it.
func (c *readStmts) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var errs []error
	for _, st := range c.stmts {
		errs = append(errs, st.Close())
	}
	c.stmts = nil
	return errors.Join(errs...)
}

// readQuerier runs a read transaction's queries through the read pool's prepared statements.
type readQuerier struct {
	tx    *sql.Tx
	stmts *readStmts
	db    *sql.DB
}

func (q readQuerier) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return q.tx.ExecContext(ctx, query, args...) // a read transaction writes nothing
}

func (q readQuerier) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := q.stmts.get(q.db, query); st != nil {
		return q.tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return q.tx.QueryContext(ctx, query, args...)
}

func (q readQuerier) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	if st := q.stmts.get(q.db, query); st != nil {
		return q.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return q.tx.QueryRowContext(ctx, query, args...)
}

// stmtCache keeps the writer connection's prepared statements: SQLite's parser is a large share of
// a small write's cost, and the writer runs the same few statements over and over.
type stmtCache struct {
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
}

const maxCachedStmts = 512

func (c *stmtCache) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := c.get(query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return c.conn.ExecContext(ctx, query, args...)
}

func (c *stmtCache) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := c.get(query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return c.conn.QueryContext(ctx, query, args...)
}

func (c *stmtCache) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	if st := c.get(query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return c.conn.QueryRowContext(ctx, query, args...)
}

// get returns the prepared statement for query, or nil when it cannot be cached (the cache is
// full, or preparing failed: the caller then runs the query directly and sees the error).
func (c *stmtCache) get(query string) *sql.Stmt {
	if st, ok := c.stmts[query]; ok {
		return st
	}
	if len(c.stmts) >= maxCachedStmts {
		return nil
	}
	st, err := c.conn.PrepareContext(context.Background(), query)
	if err != nil {
		return nil
	}
	c.stmts[query] = st
	return st
}

type writer struct {
	d     *Driver
	conn  *sql.Conn
	stmts *stmtCache
}

func (w *writer) Begin(ctx context.Context) (driver.WriteTx, error) {
	if _, err := w.stmts.exec(ctx, "BEGIN IMMEDIATE"); err != nil {
		return nil, classify(fmt.Errorf("begin: %w", err))
	}
	return &writeTx{readTx: readTx{q: w.stmts}, w: w}, nil
}

// dropAllHidden removes every record still hidden by a visibility mark, in its own transaction.
func (w *writer) dropAllHidden(ctx context.Context) error {
	var n int
	if err := w.conn.QueryRowContext(ctx, `SELECT count(*) FROM streams WHERE hidden_from IS NOT NULL`).Scan(&n); err != nil || n == 0 {
		return err
	}
	tx, err := w.Begin(ctx)
	if err != nil {
		return err
	}
	if err := dropHidden(ctx, w.stmts, ""); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}

type writeTx struct {
	readTx
	w *writer
}

func (t *writeTx) Savepoint(ctx context.Context) error {
	t.w.d.savepoints.Add(1)
	_, err := t.w.stmts.exec(ctx, "SAVEPOINT w")
	return classify(err)
}

func (t *writeTx) RollbackToSavepoint(ctx context.Context) error {
	_, err := t.w.stmts.exec(ctx, "ROLLBACK TO w")
	return classify(err)
}

func (t *writeTx) ReleaseSavepoint(ctx context.Context) error {
	_, err := t.w.stmts.exec(ctx, "RELEASE w")
	return classify(err)
}

func (t *writeTx) Commit(ctx context.Context) error {
	_, err := t.w.stmts.exec(ctx, "COMMIT")
	return classify(err)
}

func (t *writeTx) Rollback(ctx context.Context) error {
	_, err := t.w.conn.ExecContext(ctx, "ROLLBACK")
	return err
}

// Exec runs a raw statement in the transaction (tests and tools; the store never does).
func (t *writeTx) Exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.w.stmts.exec(ctx, query, args...)
}

// QueryRow runs a raw one-row query in the transaction (tests and tools; the store never does).
func (t *writeTx) QueryRow(ctx context.Context, query string, args ...any) *sql.Row {
	return t.w.stmts.queryRow(ctx, query, args...)
}

func (t *writeTx) LockStream(ctx context.Context, id int64) error { return nil }

func (t *writeTx) Notify(ctx context.Context, n driver.Notification) error { return nil }

// classify maps SQLite's disk-full answer to the catalogue's code, so callers see a coded error.
func classify(err error) error { return err }
