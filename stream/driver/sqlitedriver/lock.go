package sqlitedriver

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/foldstream/foldstream/foldtype"
)

// The store holds an exclusive lock on its database for its whole life, so a second opener — in
// another process or in this one — is refused at Open instead of corrupting what the first has
// cached (stream tails, producer state). Two stores on one file would each believe they own the
// tails: JSON appends then fail on duplicate offsets, and byte appends acknowledge records that
// overlap the other's.
//
// The lock is an flock(2) on a sidecar file "<db>-lock", never on the database file itself:
// SQLite's own locks on the database are POSIX record locks, which the kernel drops for the whole
// process when any descriptor of that file is closed, so opening and closing the database file
// for a lock of our own (for example to refuse a second opener) would silently drop the first
// store's SQLite locks. flock locks belong to one open file description, so a second open of the
// sidecar conflicts even inside the same process. The sidecar holds the pid of the holder so the
// refusal can name it.
//
// Close removes the sidecar, while still holding its lock, so a cleanly stopped store leaves no
// file behind. An opener that opened the old file just before the removal then locks a file that
// no longer has a name; it notices (the name is gone or is another file) and opens the name again,
// so two openers can never hold locks on two different files of the same name.

// lockSuffix names the sidecar lock file beside the database.
const lockSuffix = "-lock"

// lockStore takes the exclusive lock for the database at path, or returns a STORE_LOCKED error
// naming the file and, when known, the holder's pid.
func lockStore(path string) (*os.File, error) {
	name := lockFileName(path)
	for attempt := 1; ; attempt++ {
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if isPermissionErr(err) {
			return nil, readOnlyError(path, err)
		}
		if err != nil {
			return nil, fmt.Errorf("open stream store %s: lock file: %w", path, err)
		}
		held, err := tryLockFile(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("open stream store %s: lock %s: %w", path, name, err)
		}
		if held {
			pid := readLockPid(f)
			f.Close()
			return nil, storeLockedError(path, pid)
		}
		if !namedBy(f, name) {
			// The previous holder closed and removed the file after we opened it: our lock is
			// on a file nobody else will open. Take the name again.
			_ = errors.Join(unlockFile(f), f.Close())
			if attempt < 100 {
				continue
			}
			return nil, fmt.Errorf("open stream store %s: lock file %s keeps being replaced", path, name)
		}
		// Record who holds it; a failure here only makes a later refusal less precise.
		if err := f.Truncate(0); err == nil {
			_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		return f, nil
	}
}

// namedBy reports whether name still refers to the open file f.
func namedBy(f *os.File, name string) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	ni, err := os.Stat(name)
	return err == nil && os.SameFile(fi, ni)
}

// unlockStore removes the lock file and releases the lock before it returns: it removes the
// file while the lock is still held (no opener can hold it meanwhile), unlocks explicitly, then
// closes the descriptor. Closing alone would leave the lock held while a forked child still
// shares the descriptor, so a reopen right after Close could be refused as "already open in this
// process".
func unlockStore(f *os.File) error {
	if f == nil {
		return nil
	}
	var rm error
	if namedBy(f, f.Name()) {
		if err := os.Remove(f.Name()); err != nil && !errors.Is(err, os.ErrNotExist) {
			rm = fmt.Errorf("remove lock file: %w", err)
		}
	}
	return errors.Join(rm, unlockFile(f), f.Close())
}

// lockFileName returns the sidecar's name. A database reached through a symlink is locked beside
// its target, so two names of one file share one lock.
func lockFileName(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	return path + lockSuffix
}

func readLockPid(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

func storeLockedError(path string, pid int) *foldtype.Error {
	data := map[string]any{"path": path}
	switch {
	case pid == os.Getpid():
		data["pid"] = pid
		return foldtype.NewError(foldtype.CodeStoreLocked, data,
			"stream store %s is already open in this process (pid %d); close it first, or share the open store", path, pid)
	case pid > 0:
		data["pid"] = pid
		return foldtype.NewError(foldtype.CodeStoreLocked, data,
			"stream store %s is in use by another process (pid %d); stop it first, or open a different file", path, pid)
	default:
		return foldtype.NewError(foldtype.CodeStoreLocked, data,
			"stream store %s is in use by another process; stop it first, or open a different file", path)
	}
}
