package sqlitedriver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// Storage failures the caller can act on: a database that cannot be written (refused at Open, not
// discovered by the first write) and a full disk (refused per write with nothing acknowledged; the
// next write after space returns succeeds, as the store's writer rolls a failed group back whole).

// SQLite's primary result codes the driver classifies (https://sqlite.org/rescode.html).
const (
	sqliteReadOnly = 8
	sqliteFull     = 13
)

// sqliteCodes returns the primary SQLite result codes found anywhere in err's tree.
func sqliteCodes(err error) []int {
	var out []int
	var walk func(error)
	walk = func(e error) {
		for e != nil {
			if c, ok := e.(interface{ Code() int }); ok {
				if _, isOurs := e.(*foldtype.Error); !isOurs {
					out = append(out, c.Code()&0xff)
				}
			}
			if m, ok := e.(interface{ Unwrap() []error }); ok {
				for _, inner := range m.Unwrap() {
					walk(inner)
				}
				return
			}
			e = errors.Unwrap(e)
		}
	}
	walk(err)
	return out
}

// ClassifyError turns SQLite's full-disk answer into INSUFFICIENT_STORAGE and its read-only answer
// into STORE_READ_ONLY, keeping the original as the cause (see [driver.ErrorClassifier]). Other
// errors pass unchanged.
func (d *Driver) ClassifyError(err error) error { return classifyStorageErr(err) }

func classifyStorageErr(err error) error {
	if err == nil {
		return nil
	}
	var fe *foldtype.Error
	if errors.As(err, &fe) && (fe.Code == foldtype.CodeInsufficientStorage || fe.Code == foldtype.CodeStoreReadOnly) {
		return err
	}
	for _, c := range sqliteCodes(err) {
		switch c {
		case sqliteFull:
			return driver.InsufficientStorageError(err)
		case sqliteReadOnly:
			return &foldtype.Error{Code: foldtype.CodeStoreReadOnly, Message: "stream store: the database cannot be written", Err: err}
		}
	}
	if errors.Is(err, syscall.ENOSPC) {
		return driver.InsufficientStorageError(err)
	}
	return err
}

// readOnlyError is Open's refusal of a database it cannot write.
func readOnlyError(path string, cause error) *foldtype.Error {
	return &foldtype.Error{Code: foldtype.CodeStoreReadOnly, Data: map[string]any{"path": path}, Err: cause,
		Message: fmt.Sprintf("stream store %s cannot be written (%v); check the permissions of the file and its directory", path, cause)}
}

// isPermissionErr reports whether a file-system error means "not writable here".
func isPermissionErr(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)
}

// openFailure gives a failed Open its code: STORE_READ_ONLY or INSUFFICIENT_STORAGE when the
// database cannot be written, the error unchanged otherwise.
func openFailure(path string, err error) error {
	c := classifyStorageErr(err)
	if foldtype.CodeOf(c) == foldtype.CodeStoreReadOnly && !errors.Is(err, foldtype.ErrStoreReadOnly) {
		return readOnlyError(path, err)
	}
	return c
}

// probeDirWritable proves that files can be created beside the database: SQLite creates its
// write-ahead log and shared-memory files there, and without them opens nothing it can write.
func probeDirWritable(path string) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".foldstream-probe-*")
	if err != nil {
		if isPermissionErr(err) {
			return readOnlyError(path, err)
		}
		return fmt.Errorf("open stream store %s: %w", path, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}
