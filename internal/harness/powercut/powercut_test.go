package powercut_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/foldstream/foldstream/internal/harness/powercut"
)

func create(t *testing.T, path string, data []byte, sync bool) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

func cut(t *testing.T, pfs *powercut.FS, mode powercut.Mode, seed uint64) (string, powercut.CutReport) {
	t.Helper()
	dst := t.TempDir()
	rep, err := pfs.Cut(dst, mode, seed)
	if err != nil {
		t.Fatal(err)
	}
	return dst, rep
}

func read(t *testing.T, path string) ([]byte, bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return b, true
}

// TestACutKeepsFsyncedBytesAndDropsTheRest: bytes written after a file's last fsync, and a size
// grown since, are gone after the cut; the fsynced bytes are there.
func TestACutKeepsFsyncedBytesAndDropsTheRest(t *testing.T) {
	pfs := powercut.MountForTest(t, powercut.Options{})
	dir := pfs.Dir()
	f := create(t, filepath.Join(dir, "a"), bytes.Repeat([]byte("1"), 5000), true)
	syncDir(t, dir)
	if _, err := f.WriteAt(bytes.Repeat([]byte("2"), 100), 10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("tail"), 9000); err != nil {
		t.Fatal(err)
	}
	if got, _ := read(t, filepath.Join(dir, "a")); len(got) != 9004 || got[10] != '2' {
		t.Fatalf("before the cut the program sees its writes: %d bytes, byte 10 %q", len(got), got[10])
	}
	dst, rep := cut(t, pfs, powercut.KeepSynced, 1)
	got, ok := read(t, filepath.Join(dst, "a"))
	if !ok || !bytes.Equal(got, bytes.Repeat([]byte("1"), 5000)) {
		t.Fatalf("after the cut: %d bytes (exists %v), want the 5000 fsynced bytes", len(got), ok)
	}
	if rep.DroppedPages != 2 { // page 0 (offset 10) and page 2 (offset 9000)
		t.Fatalf("dropped pages: got %d, want 2", rep.DroppedPages)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a")); err != nil || len(b) != 9004 {
		t.Fatalf("a read after the cut: %d bytes, %v; want the program's last view", len(b), err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("a write after the cut succeeded; want EIO")
	}
	if err := f.Sync(); err == nil {
		t.Fatal("an fsync after the cut succeeded; want EIO")
	}
}

// TestADirectoryEntryIsDurableOnlyAfterTheDirectoryIsFsynced: a file created and fsynced whose
// directory was not fsynced is gone after the cut; a file removed without a directory fsync comes
// back with its durable bytes; a directory fsync makes the whole entry set durable.
func TestADirectoryEntryIsDurableOnlyAfterTheDirectoryIsFsynced(t *testing.T) {
	pfs := powercut.MountForTest(t, powercut.Options{})
	dir := pfs.Dir()
	create(t, filepath.Join(dir, "old"), []byte("old"), true)
	create(t, filepath.Join(dir, "kept"), []byte("kept"), true)
	syncDir(t, dir)
	if err := os.Remove(filepath.Join(dir, "old")); err != nil {
		t.Fatal(err)
	}
	create(t, filepath.Join(dir, "new"), []byte("new"), true)
	if err := os.Rename(filepath.Join(dir, "kept"), filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	dst, rep := cut(t, pfs, powercut.KeepSynced, 1)
	if got, ok := read(t, filepath.Join(dst, "old")); !ok || string(got) != "old" {
		t.Fatalf("removed without a directory fsync: got %q (exists %v), want it back", got, ok)
	}
	if _, ok := read(t, filepath.Join(dst, "new")); ok {
		t.Fatal("created and fsynced without a directory fsync: the file survived; want it gone")
	}
	if got, ok := read(t, filepath.Join(dst, "kept")); !ok || string(got) != "kept" {
		t.Fatalf("renamed without a directory fsync: got %q (exists %v) under the old name", got, ok)
	}
	if _, ok := read(t, filepath.Join(dst, "moved")); ok {
		t.Fatal("renamed without a directory fsync: the new name survived")
	}
	if !slices.Equal(rep.LostEntries, []string{"moved", "new"}) {
		t.Fatalf("lost entries: got %v, want [moved new]", rep.LostEntries)
	}

	pfs2 := powercut.MountForTest(t, powercut.Options{})
	create(t, filepath.Join(pfs2.Dir(), "new"), []byte("new"), true)
	syncDir(t, pfs2.Dir())
	dst2, _ := cut(t, pfs2, powercut.KeepSynced, 1)
	if got, ok := read(t, filepath.Join(dst2, "new")); !ok || string(got) != "new" {
		t.Fatalf("created, fsynced, directory fsynced: got %q (exists %v)", got, ok)
	}
}

// TestACutMayKeepSomeUnsyncedPages: in KeepSyncedAndSomeUnsynced mode every page of the survivor
// is either its fsynced content or its last written content, and over a few seeds both happen.
func TestACutMayKeepSomeUnsyncedPages(t *testing.T) {
	var kept, dropped int
	for seed := range uint64(8) {
		pfs := powercut.MountForTest(t, powercut.Options{})
		path := filepath.Join(pfs.Dir(), "f")
		f := create(t, path, bytes.Repeat([]byte("a"), 4*powercut.PageSize), true)
		syncDir(t, pfs.Dir())
		for p := range 4 {
			if _, err := f.WriteAt(bytes.Repeat([]byte("b"), 10), int64(p*powercut.PageSize)); err != nil {
				t.Fatal(err)
			}
		}
		dst, rep := cut(t, pfs, powercut.KeepSyncedAndSomeUnsynced, seed)
		kept += rep.KeptPages
		dropped += rep.DroppedPages
		got, _ := read(t, filepath.Join(dst, "f"))
		if len(got) != 4*powercut.PageSize {
			t.Fatalf("seed %d: size %d", seed, len(got))
		}
		for p := range 4 {
			page := got[p*powercut.PageSize : (p+1)*powercut.PageSize]
			old := bytes.Repeat([]byte("a"), powercut.PageSize)
			neu := append(bytes.Repeat([]byte("b"), 10), bytes.Repeat([]byte("a"), powercut.PageSize-10)...)
			if !bytes.Equal(page, old) && !bytes.Equal(page, neu) {
				t.Fatalf("seed %d page %d is neither the synced nor the written content", seed, p)
			}
		}
	}
	if kept == 0 || dropped == 0 {
		t.Fatalf("over 8 seeds: %d pages kept, %d dropped; want some of each", kept, dropped)
	}
}

// TestAMountThatLiesAboutFsyncKeepsNothingNew: the positive control's disk answers fsync with
// success and loses the bytes at the cut.
func TestAMountThatLiesAboutFsyncKeepsNothingNew(t *testing.T) {
	initial := t.TempDir()
	if err := os.WriteFile(filepath.Join(initial, "f"), []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}
	pfs := powercut.MountForTest(t, powercut.Options{Initial: initial, LieAboutFsync: true})
	f, err := os.OpenFile(filepath.Join(pfs.Dir(), "f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got, _ := read(t, filepath.Join(pfs.Dir(), "f")); string(got) != "before" {
		t.Fatalf("initial content: got %q", got)
	}
	if _, err := f.WriteAt([]byte("AFTER!"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	dst, _ := cut(t, pfs, powercut.KeepSynced, 1)
	if got, _ := read(t, filepath.Join(dst, "f")); string(got) != "before" {
		t.Fatalf("after the cut: got %q, want the initial %q", got, "before")
	}
}
