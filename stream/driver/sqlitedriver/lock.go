package sqlitedriver

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/foldstream/foldstream"
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
// refusal can name it. It is left on disk after Close: removing it could let two openers lock two
// different files of the same name.

// lockSuffix names the sidecar lock file beside the database.
const lockSuffix = "-lock"

// lockStore takes the exclusive lock for the database at path, or returns a STORE_LOCKED error
// naming the file and, when known, the holder's pid.
func lockStore(path string) (*os.File, error) {
	name := lockFileName(path)
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
	// Record who holds it; a failure here only makes a later refusal less precise.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// unlockStore releases the lock before it returns: it unlocks explicitly, then closes the
// descriptor. Closing alone would leave the lock held while a forked child still shares the
// descriptor, so a reopen right after Close could be refused as "already open in this process".
func unlockStore(f *os.File) error {
	if f == nil {
		return nil
	}
	return errors.Join(unlockFile(f), f.Close())
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

func storeLockedError(path string, pid int) *foldstream.Error {
	data := map[string]any{"path": path}
	switch {
	case pid == os.Getpid():
		data["pid"] = pid
		return foldstream.NewError(foldstream.CodeStoreLocked, data,
			"stream store %s is already open in this process (pid %d); close it first, or share the open store", path, pid)
	case pid > 0:
		data["pid"] = pid
		return foldstream.NewError(foldstream.CodeStoreLocked, data,
			"stream store %s is in use by another process (pid %d); stop it first, or open a different file", path, pid)
	default:
		return foldstream.NewError(foldstream.CodeStoreLocked, data,
			"stream store %s is in use by another process; stop it first, or open a different file", path)
	}
}
