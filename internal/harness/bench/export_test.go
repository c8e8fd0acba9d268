package bench

import "context"

// ParseStatCPU exposes parseStatCPU to the external tests.
var ParseStatCPU = parseStatCPU

// ParseStatusRSS exposes parseStatusRSS to the external tests.
var ParseStatusRSS = parseStatusRSS

// CreateMany exposes createMany to the external tests.
var CreateMany = createMany

// RawPut sends one PUT of an empty body over a fresh hand-driven connection to base and returns
// the answer's status and the kept start of its body.
func RawPut(base, path, contentType string) (int, string, error) {
	rc, err := rawConnTo(base)
	if err != nil {
		return 0, "", err
	}
	defer rc.Close()
	return rc.put(context.Background(), path, contentType)
}

// RawConn is a hand-driven connection for the external tests.
type RawConn struct{ rc *rawConn }

// NewRawConn prepares a hand-driven connection to base.
func NewRawConn(base string) (*RawConn, error) {
	rc, err := rawConnTo(base)
	return &RawConn{rc}, err
}

// Put sends PUT path with an empty body on the connection.
func (c *RawConn) Put(ctx context.Context, path, contentType string) (int, string, error) {
	return c.rc.put(ctx, path, contentType)
}

// Close closes the connection.
func (c *RawConn) Close() { c.rc.Close() }

// PGCPUKey exposes pgCPUKey to the external tests.
const PGCPUKey = pgCPUKey

// ParseStatCPUWithChildren and ParseStatPPID expose the stat parsers of postgresCPU.
var (
	ParseStatCPUWithChildren = parseStatCPUWithChildren
	ParseStatPPID            = parseStatPPID
)
