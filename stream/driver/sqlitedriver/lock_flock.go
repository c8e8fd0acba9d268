//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlitedriver

import (
	"errors"
	"os"
	"syscall"
)

// tryLockFile takes an exclusive flock on f without waiting. It reports held=true when another
// open file description (another process, or another Open in this one) holds it.
func tryLockFile(f *os.File) (held bool, err error) {
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}

// unlockFile releases the flock on f's open file description. Closing f alone is not enough: a
// child process forked meanwhile (exec.Command anywhere in the program) shares that description
// until it execs, and the lock would live on with it after Close returned.
func unlockFile(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
