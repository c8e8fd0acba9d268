package kernel

import (
	"errors"
	"syscall"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/driver"
)

// A full disk is refused per write with INSUFFICIENT_STORAGE and nothing acknowledged; the next
// write after space returns succeeds, as the writer rolls a failed group back whole. What a
// database reports in its own error values (SQLite's result codes) the driver classifies
// ([driver.ErrorClassifier]); an ENOSPC from the operating system is recognised here for every
// driver.

// classifyStorageErr gives a failed write its storage code (INSUFFICIENT_STORAGE,
// STORE_READ_ONLY), keeping the original as the cause. Other errors pass unchanged.
func (s *Store) classifyStorageErr(err error) error {
	if err == nil {
		return nil
	}
	var fe *foldtype.Error
	if errors.As(err, &fe) && (fe.Code == foldtype.CodeInsufficientStorage || fe.Code == foldtype.CodeStoreReadOnly) {
		return err
	}
	if c := s.caps.ErrorClassifier; c != nil {
		if got := c.ClassifyError(err); got != err {
			return got
		}
	}
	if errors.Is(err, syscall.ENOSPC) {
		return driver.InsufficientStorageError(err)
	}
	return err
}
