package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
	"sync/atomic"

	"modernc.org/sqlite"
)

// driverName is the driver the store opens: modernc's SQLite, with each
// connection keeping its prepared statements by SQL text. Every call
// through database/sql would otherwise compile its statement again: with
// no-op tasks, SQLite's parser was a third of the controller's CPU (1,000
// tasks on one local node: 1.3 s of 4.1 s, issue 35).
const driverName = "sqlite-stmtcache"

// maxCachedStmts bounds a connection's statements: texts built from
// varying parts (a list of placeholders) past it are compiled each time.
const maxCachedStmts = 512

// stmtsCompiled counts the statements the connections kept, and stmtsRun
// the statements they ran, for tests.
var stmtsCompiled, stmtsRun atomic.Int64

func init() { sql.Register(driverName, cachingDriver{}) }

// cachingDriver opens modernc connections wrapped in cachingConn.
type cachingDriver struct{}

func (cachingDriver) Open(name string) (driver.Conn, error) {
	c, err := (&sqlite.Driver{}).Open(name)
	if err != nil {
		return nil, err
	}
	inner, ok := c.(sqliteConn)
	if !ok {
		c.Close()
		return nil, errors.New("the sqlite driver's connection lacks the context methods")
	}
	return &cachingConn{sqliteConn: inner, stmts: map[string]*cachedStmt{}}, nil
}

// sqliteConn is what database/sql uses of a modernc connection.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// cachingConn runs each statement through a prepared statement kept for
// its text. database/sql uses a connection from one goroutine at a time;
// mu guards stmts all the same, since rows close from the caller's.
type cachingConn struct {
	sqliteConn
	mu    sync.Mutex // guards stmts and each cachedStmt's busy
	stmts map[string]*cachedStmt
}

// cachedStmt is one prepared statement; busy while a call or its rows
// use it (a second use meanwhile compiles its own).
type cachedStmt struct {
	stmt interface {
		driver.Stmt
		driver.StmtExecContext
		driver.StmtQueryContext
	}
	busy bool
}

// take returns query's statement, marked busy, or nil when it is in use,
// cannot be kept, or does not compile (the uncached call then reports
// why).
func (c *cachingConn) take(ctx context.Context, query string) *cachedStmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cs := c.stmts[query]; cs != nil {
		if cs.busy {
			return nil
		}
		cs.busy = true
		return cs
	}
	if len(c.stmts) >= maxCachedStmts {
		return nil
	}
	ds, err := c.sqliteConn.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	st, ok := ds.(interface {
		driver.Stmt
		driver.StmtExecContext
		driver.StmtQueryContext
	})
	if !ok {
		ds.Close()
		return nil
	}
	cs := &cachedStmt{stmt: st, busy: true}
	c.stmts[query] = cs
	stmtsCompiled.Add(1)
	return cs
}

func (c *cachingConn) put(cs *cachedStmt) {
	c.mu.Lock()
	cs.busy = false
	c.mu.Unlock()
}

func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	stmtsRun.Add(1)
	cs := c.take(ctx, query)
	if cs == nil {
		return c.sqliteConn.ExecContext(ctx, query, args)
	}
	defer c.put(cs)
	return cs.stmt.ExecContext(ctx, args)
}

func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	stmtsRun.Add(1)
	cs := c.take(ctx, query)
	if cs == nil {
		return c.sqliteConn.QueryContext(ctx, query, args)
	}
	rows, err := cs.stmt.QueryContext(ctx, args)
	if err != nil {
		c.put(cs)
		return nil, err
	}
	return &cachedRows{Rows: rows, release: func() { c.put(cs) }}, nil
}

// Close closes the kept statements, then the connection.
func (c *cachingConn) Close() error {
	c.mu.Lock()
	for q, cs := range c.stmts {
		cs.stmt.Close()
		delete(c.stmts, q)
	}
	c.mu.Unlock()
	return c.sqliteConn.Close()
}

// cachedRows frees its statement for the next call once closed.
type cachedRows struct {
	driver.Rows
	once    sync.Once
	release func()
}

func (r *cachedRows) Close() error {
	err := r.Rows.Close()
	r.once.Do(r.release)
	return err
}
