package powercut

import (
	"os"
	"path/filepath"
	"testing"
)

// MountForTest mounts a power-cut file system in a fresh temporary directory of t and unmounts it
// when t ends. When FUSE cannot be used here (no /dev/fuse, no permission to mount) the test is
// skipped, except under CI (CI set), where it fails saying why: a power-loss test that CI skips
// proves nothing.
func MountForTest(t testing.TB, opts Options) *FS {
	t.Helper()
	base := t.TempDir()
	mnt, backing := filepath.Join(base, "mnt"), filepath.Join(base, "backing")
	for _, d := range []string{mnt, backing} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pfs, err := Mount(mnt, backing, opts)
	if err != nil {
		msg := "FUSE is not usable on this machine (needs /dev/fuse, fusermount3 from Debian's fuse3 or root): " + err.Error()
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		if err := pfs.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return pfs
}
