// Package powercut is a FUSE file system for tests that can cut the power.
//
// It mounts one flat directory whose files are passed through to files in a backing directory,
// and it remembers, beside what programs see, what a disk with a volatile write cache would still
// hold after losing power:
//
//   - a file's bytes and size become durable when the file is fsynced (fsync or fdatasync); bytes
//     written since its last fsync are in the volatile cache;
//   - a directory entry — a file created, removed or renamed — becomes durable only when the
//     directory itself is fsynced, which makes the directory's whole entry set durable at once.
//     This is the conservative reading of POSIX: a file fsynced whose name was never made durable
//     is gone after the cut, and a file removed without a directory fsync comes back with the
//     bytes it last had durable;
//   - the power cut ([FS.Cut]) writes what survives into a fresh directory: every durable entry
//     with its file's durable bytes, and, when asked, a random subset of the 4 KiB pages written
//     since that file's last fsync (a cache that wrote some pages back before the power went, in
//     any order). From the cut on, every operation on the mount fails with EIO, as the program
//     using the files would find if it outlived its disk.
//
// The file system does not implement locks: the kernel keeps POSIX and flock locks locally for
// the mount, which is right for a single process. Shared memory maps work (SQLite's -shm file).
//
// A mount can also lie about fsync ([Options.LieAboutFsync]): fsync answers success and makes
// nothing durable. That is the positive control of a power-loss test: a store on such a disk
// loses acknowledged writes at the cut, and the test's checker must see it.
package powercut

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// PageSize is the unit in which unsynced writes survive a cut in [KeepSyncedAndSomeUnsynced]
// mode: SQLite's default page size and a common disk sector size.
const PageSize = 4096

// Mode says what survives a power cut.
type Mode int

const (
	// KeepSynced keeps exactly what was fsynced and drops everything written since.
	KeepSynced Mode = iota
	// KeepSyncedAndSomeUnsynced keeps what was fsynced plus, for every file, each page written
	// since its last fsync with probability one half, and a shrink since then with
	// probability one half.
	KeepSyncedAndSomeUnsynced
)

// String names the mode, for logs.
func (m Mode) String() string {
	switch m {
	case KeepSynced:
		return "keep-synced"
	case KeepSyncedAndSomeUnsynced:
		return "keep-synced-and-some-unsynced"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Options configures a mount.
type Options struct {
	// Initial, when set, is a directory whose regular files the mount starts with, all of
	// them durable (the survivors of an earlier cut).
	Initial string
	// LieAboutFsync makes fsync of files and directories answer success without making
	// anything durable: the positive control.
	LieAboutFsync bool
}

// Stats counts what the mount saw.
type Stats struct {
	Writes, FileSyncs, DirSyncs, Creates, Unlinks, Renames, Truncates int64
	// Synced counts, by file name at the time, the fsyncs of each file.
	Synced map[string]int64
}

// FS is a mounted power-cut file system. Create it with [Mount].
type FS struct {
	dir     string // the mount point
	backing string
	lie     bool
	server  *fuse.Server
	root    *dirNode
	nextIno atomic.Uint64

	// mu orders every operation (read lock) against the cut (write lock): an fsync either
	// completed before the cut, and what it made durable survives, or it fails with EIO.
	mu  sync.RWMutex
	cut bool

	statsMu sync.Mutex
	stats   Stats
}

// Mount mounts a power-cut file system at mountpoint (an empty directory), passing file contents
// through to files in backing (an empty directory, not under the mount point). Unmount it with
// [FS.Unmount]. It fails when FUSE cannot be used here (no /dev/fuse, no permission).
func Mount(mountpoint, backing string, opts Options) (*FS, error) {
	pfs := &FS{dir: mountpoint, backing: backing, lie: opts.LieAboutFsync, stats: Stats{Synced: map[string]int64{}}}
	pfs.root = &dirNode{pfs: pfs, durable: map[string]*fileNode{}}
	var initial []*fileNode
	var initialNames []string
	if opts.Initial != "" {
		entries, err := os.ReadDir(opts.Initial)
		if err != nil {
			return nil, fmt.Errorf("powercut: read initial directory: %w", err)
		}
		for _, e := range entries {
			if !e.Type().IsRegular() {
				continue
			}
			data, err := os.ReadFile(filepath.Join(opts.Initial, e.Name()))
			if err != nil {
				return nil, fmt.Errorf("powercut: read initial file: %w", err)
			}
			f, err := pfs.newFile(data)
			if err != nil {
				return nil, err
			}
			initial = append(initial, f)
			initialNames = append(initialNames, e.Name())
		}
	}
	one := time.Second
	server, err := fs.Mount(mountpoint, pfs.root, &fs.Options{
		// DirectMount mounts with mount(2) when allowed (as root), without starting fusermount3.
		MountOptions: fuse.MountOptions{FsName: "powercut", Name: "powercut", DisableXAttrs: true, DirectMount: true},
		EntryTimeout: &one,
		AttrTimeout:  &one,
		OnAdd: func(ctx context.Context) {
			for i, f := range initial {
				ch := pfs.root.NewPersistentInode(ctx, f, fs.StableAttr{Mode: fuse.S_IFREG, Ino: f.ino})
				pfs.root.AddChild(initialNames[i], ch, true)
				pfs.root.durable[initialNames[i]] = f
			}
		},
	})
	if err != nil {
		for _, f := range initial {
			f.backing.Close()
		}
		return nil, fmt.Errorf("powercut: mount %s: %w", mountpoint, err)
	}
	pfs.server = server
	if err := server.WaitMount(); err != nil {
		pfs.Unmount()
		return nil, fmt.Errorf("powercut: mount %s: %w", mountpoint, err)
	}
	return pfs, nil
}

// Dir returns the mount point.
func (pfs *FS) Dir() string { return pfs.dir }

// Stats returns what the mount saw so far.
func (pfs *FS) Stats() Stats {
	pfs.statsMu.Lock()
	defer pfs.statsMu.Unlock()
	s := pfs.stats
	s.Synced = make(map[string]int64, len(pfs.stats.Synced))
	for k, v := range pfs.stats.Synced {
		s.Synced[k] = v
	}
	return s
}

func (pfs *FS) count(fn func(*Stats)) {
	pfs.statsMu.Lock()
	fn(&pfs.stats)
	pfs.statsMu.Unlock()
}

// CutReport says what a cut kept.
type CutReport struct {
	// Files maps each surviving file's name to its surviving size.
	Files map[string]int64
	// DroppedPages and KeptPages count the pages written since their file's last fsync that
	// the cut dropped and kept (kept only in KeepSyncedAndSomeUnsynced mode).
	DroppedPages, KeptPages int
	// LostEntries names files the program saw at the cut whose directory entry was not durable.
	LostEntries []string
}

// Cut cuts the power: from now on every operation on the mount fails with EIO, and what a disk
// would hold after the power loss is written to dst (an existing, empty directory). seed chooses the
// unsynced pages kept in KeepSyncedAndSomeUnsynced mode: the same seed over the same writes keeps
// the same pages.
func (pfs *FS) Cut(dst string, mode Mode, seed uint64) (CutReport, error) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	pfs.mu.Lock()
	defer pfs.mu.Unlock()
	if pfs.cut {
		return CutReport{}, errors.New("powercut: the power is already cut")
	}
	pfs.cut = true
	rep := CutReport{Files: map[string]int64{}}
	for name := range pfs.root.Children() {
		if _, ok := pfs.root.durable[name]; !ok {
			rep.LostEntries = append(rep.LostEntries, name)
		}
	}
	slices.Sort(rep.LostEntries)
	names := make([]string, 0, len(pfs.root.durable))
	for name := range pfs.root.durable {
		names = append(names, name)
	}
	slices.Sort(names) // a fixed order, so a seed replays the same cut
	for _, name := range names {
		f := pfs.root.durable[name]
		data, kept, dropped, err := f.survivor(mode, rng)
		if err != nil {
			return rep, err
		}
		rep.KeptPages += kept
		rep.DroppedPages += dropped
		if err := os.WriteFile(filepath.Join(dst, name), data, 0o644); err != nil {
			return rep, fmt.Errorf("powercut: write survivor: %w", err)
		}
		rep.Files[name] = int64(len(data))
	}
	return rep, nil
}

// Unmount unmounts the file system (lazily when a file on it is still open) and closes its
// backing files.
func (pfs *FS) Unmount() error {
	var err error
	if pfs.server != nil {
		if err = pfs.server.Unmount(); err != nil {
			// A descriptor still open on the mount: detach it now; the kernel ends the
			// mount when the last one closes.
			out, lazyErr := exec.Command("fusermount3", "-u", "-z", pfs.dir).CombinedOutput()
			if lazyErr != nil {
				err = fmt.Errorf("powercut: unmount %s: %w; lazy unmount: %v: %s", pfs.dir, err, lazyErr, out)
			} else {
				err = nil
			}
		}
	}
	pfs.closeBacking()
	return err
}

func (pfs *FS) closeBacking() {
	pfs.root.filesMu.Lock()
	defer pfs.root.filesMu.Unlock()
	for _, f := range pfs.root.files {
		f.mu.Lock()
		f.backing.Close()
		f.mu.Unlock()
	}
	pfs.root.files = nil
}

// enter takes the operation lock and reports EIO once the power is cut; leave with pfs.mu.RUnlock.
func (pfs *FS) enter() syscall.Errno {
	pfs.mu.RLock()
	if pfs.cut {
		pfs.mu.RUnlock()
		return syscall.EIO
	}
	return 0
}

// newFile creates a file whose content is data, all of it durable.
func (pfs *FS) newFile(data []byte) (*fileNode, error) {
	ino := pfs.nextIno.Add(1) + 1 // 1 is the root
	b, err := os.OpenFile(filepath.Join(pfs.backing, fmt.Sprintf("ino-%d", ino)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("powercut: create backing file: %w", err)
	}
	if _, err := b.WriteAt(data, 0); err != nil {
		b.Close()
		return nil, fmt.Errorf("powercut: write backing file: %w", err)
	}
	f := &fileNode{pfs: pfs, ino: ino, backing: b, size: int64(len(data)), durable: slices.Clone(data), dirty: map[int64]bool{}}
	pfs.root.filesMu.Lock()
	pfs.root.files = append(pfs.root.files, f)
	pfs.root.filesMu.Unlock()
	return f, nil
}

// dirNode is the mount's only directory. Its current entries are the Inode's children; durable
// holds the entries as of its last fsync.
type dirNode struct {
	fs.Inode
	pfs *FS

	durable map[string]*fileNode // guarded by pfs.mu's write lock or syncMu
	syncMu  sync.Mutex

	filesMu sync.Mutex
	files   []*fileNode // every file ever created, to close their backing files
}

var (
	_ fs.NodeGetattrer = (*dirNode)(nil)
	_ fs.NodeCreater   = (*dirNode)(nil)
	_ fs.NodeUnlinker  = (*dirNode)(nil)
	_ fs.NodeRenamer   = (*dirNode)(nil)
	_ fs.NodeFsyncer   = (*dirNode)(nil)
	_ fs.NodeSetattrer = (*dirNode)(nil)
)

// Getattr answers the directory's attributes.
func (d *dirNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = fuse.S_IFDIR | 0o755
	out.Ino = 1
	out.Nlink = 2
	return 0
}

// Setattr accepts and ignores changes of the directory's mode and times.
func (d *dirNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return d.Getattr(ctx, fh, out)
}

// Create creates an empty file; its name is durable only after a directory fsync.
func (d *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if errno := d.pfs.enter(); errno != 0 {
		return nil, nil, 0, errno
	}
	defer d.pfs.mu.RUnlock()
	f, err := d.pfs.newFile(nil)
	if err != nil {
		return nil, nil, 0, syscall.EIO
	}
	d.pfs.count(func(s *Stats) { s.Creates++ })
	ch := d.NewPersistentInode(ctx, f, fs.StableAttr{Mode: fuse.S_IFREG, Ino: f.ino})
	f.attr(&out.Attr)
	return ch, nil, 0, 0
}

// Unlink removes a name; the removal is durable only after a directory fsync.
func (d *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	if errno := d.pfs.enter(); errno != 0 {
		return errno
	}
	defer d.pfs.mu.RUnlock()
	d.pfs.count(func(s *Stats) { s.Unlinks++ })
	return 0 // the bridge removes the child; its durable entry stays until a directory fsync
}

// Rename renames within the directory; the rename is durable only after a directory fsync.
func (d *dirNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if errno := d.pfs.enter(); errno != 0 {
		return errno
	}
	defer d.pfs.mu.RUnlock()
	if newParent != fs.InodeEmbedder(d) {
		return syscall.EXDEV
	}
	d.pfs.count(func(s *Stats) { s.Renames++ })
	return 0 // the bridge moves the child
}

// Fsync of the directory makes its current entry set durable.
func (d *dirNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	if errno := d.pfs.enter(); errno != 0 {
		return errno
	}
	defer d.pfs.mu.RUnlock()
	d.pfs.count(func(s *Stats) { s.DirSyncs++ })
	if d.pfs.lie {
		return 0
	}
	entries := map[string]*fileNode{}
	for name, ch := range d.Children() {
		if f, ok := ch.Operations().(*fileNode); ok {
			entries[name] = f
		}
	}
	d.syncMu.Lock()
	d.durable = entries
	d.syncMu.Unlock()
	return 0
}

// fileNode is a regular file: its content is the backing file; durable is what its last fsync
// made durable, dirty the pages written since.
type fileNode struct {
	fs.Inode
	pfs *FS
	ino uint64

	mu      sync.Mutex
	backing *os.File
	size    int64
	durable []byte
	dirty   map[int64]bool // page index → written since the last fsync
	shrunk  bool           // truncated below its durable size since the last fsync
	minSize int64          // the smallest size since the last fsync, when shrunk
}

var (
	_ fs.NodeOpener    = (*fileNode)(nil)
	_ fs.NodeReader    = (*fileNode)(nil)
	_ fs.NodeWriter    = (*fileNode)(nil)
	_ fs.NodeFsyncer   = (*fileNode)(nil)
	_ fs.NodeGetattrer = (*fileNode)(nil)
	_ fs.NodeSetattrer = (*fileNode)(nil)
	_ fs.NodeFlusher   = (*fileNode)(nil)
	_ fs.NodeAllocater = (*fileNode)(nil)
)

func (f *fileNode) attr(out *fuse.Attr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out.Mode = fuse.S_IFREG | 0o644
	out.Ino = f.ino
	out.Nlink = 1
	out.Size = uint64(f.size)
	out.Blocks = (uint64(f.size) + 511) / 512
	out.Blksize = PageSize
}

// Getattr answers the file's current attributes.
func (f *fileNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.attr(&out.Attr)
	return 0
}

// Open opens the file; the node serves reads and writes itself.
func (f *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, 0, 0
}

// Flush (a close) makes nothing durable.
func (f *fileNode) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno { return 0 }

// Read answers from the current content, also after the cut: the program that outlives its disk
// in a test must not take a SIGBUS on a page of a mapped file (SQLite maps its -shm file and the
// store's readers map the database); nothing it reads then can reach the survivors.
func (f *fileNode) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if off >= f.size {
		return fuse.ReadResultData(nil), 0
	}
	n := min(int64(len(dest)), f.size-off)
	got, err := f.backing.ReadAt(dest[:n], off)
	if err != nil && got < int(n) {
		clear(dest[got:n]) // a hole at the end of the backing file reads as zeros
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// Write writes through to the backing file and marks the pages written as unsynced.
func (f *fileNode) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := f.pfs.enter(); errno != 0 {
		return 0, errno
	}
	defer f.pfs.mu.RUnlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.backing.WriteAt(data, off); err != nil {
		return 0, syscall.EIO
	}
	end := off + int64(len(data))
	f.markDirty(off, end)
	f.size = max(f.size, end)
	f.pfs.count(func(s *Stats) { s.Writes++ })
	return uint32(len(data)), 0
}

// markDirty marks the pages holding [from, to) as written since the last fsync.
func (f *fileNode) markDirty(from, to int64) {
	for p := from / PageSize; p*PageSize < to; p++ {
		f.dirty[p] = true
	}
}

// Setattr truncates or extends the file (unsynced until its next fsync); other changes are ignored.
func (f *fileNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok {
		if errno := f.pfs.enter(); errno != 0 {
			return errno
		}
		errno := f.resize(int64(sz))
		f.pfs.mu.RUnlock()
		if errno != 0 {
			return errno
		}
		f.pfs.count(func(s *Stats) { s.Truncates++ })
	}
	f.attr(&out.Attr)
	return 0
}

func (f *fileNode) resize(sz int64) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.backing.Truncate(sz); err != nil {
		return syscall.EIO
	}
	switch {
	case sz < f.size:
		f.markDirty(sz, sz+1) // the page the file now ends in
		for p := range f.dirty {
			if p*PageSize >= sz && p != sz/PageSize {
				delete(f.dirty, p)
			}
		}
		if sz < int64(len(f.durable)) {
			if !f.shrunk || sz < f.minSize {
				f.minSize = sz
			}
			f.shrunk = true
		}
	case sz > f.size:
		f.markDirty(f.size, sz)
	}
	f.size = sz
	return 0
}

// Allocate extends the file as fallocate does (unsynced until its next fsync).
func (f *fileNode) Allocate(ctx context.Context, fh fs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	if mode&^uint32(0x01) != 0 { // only plain allocation and FALLOC_FL_KEEP_SIZE
		return syscall.EOPNOTSUPP
	}
	if mode&0x01 != 0 {
		return 0
	}
	if errno := f.pfs.enter(); errno != 0 {
		return errno
	}
	defer f.pfs.mu.RUnlock()
	f.mu.Lock()
	grow := int64(off+size) > f.size
	f.mu.Unlock()
	if grow {
		return f.resize(int64(off + size))
	}
	return 0
}

// Fsync makes the file's content and size durable.
func (f *fileNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	if errno := f.pfs.enter(); errno != 0 {
		return errno
	}
	defer f.pfs.mu.RUnlock()
	name := f.name()
	f.pfs.count(func(s *Stats) { s.FileSyncs++; s.Synced[name]++ })
	if f.pfs.lie {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	durable := f.durable
	if int64(len(durable)) > f.size {
		durable = durable[:f.size]
	} else if int64(len(durable)) < f.size {
		durable = append(durable, make([]byte, f.size-int64(len(durable)))...)
	}
	for p := range f.dirty {
		from := p * PageSize
		if from >= f.size {
			continue
		}
		to := min(from+PageSize, f.size)
		if n, err := f.backing.ReadAt(durable[from:to], from); err != nil && int64(n) < to-from {
			clear(durable[from+int64(n) : to])
		}
	}
	f.durable = durable
	clear(f.dirty)
	f.shrunk = false
	return 0
}

// name returns one current name of the file, for statistics.
func (f *fileNode) name() string {
	name, parent := f.Parent()
	if parent == nil {
		return "(unlinked)"
	}
	return name
}

// survivor returns what a cut leaves of the file.
func (f *fileNode) survivor(mode Mode, rng *rand.Rand) (data []byte, kept, dropped int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data = slices.Clone(f.durable)
	pages := make([]int64, 0, len(f.dirty))
	for p := range f.dirty {
		if p*PageSize < f.size {
			pages = append(pages, p)
		}
	}
	slices.Sort(pages)
	if mode != KeepSyncedAndSomeUnsynced {
		return data, 0, len(pages), nil
	}
	if f.shrunk && rng.IntN(2) == 0 {
		data = data[:min(int64(len(data)), f.minSize)]
	}
	for _, p := range pages {
		if rng.IntN(2) == 0 {
			dropped++
			continue
		}
		kept++
		from := p * PageSize
		to := min(from+PageSize, f.size)
		if int64(len(data)) < to {
			data = append(data, make([]byte, to-int64(len(data)))...)
		}
		if n, err := f.backing.ReadAt(data[from:to], from); err != nil && int64(n) < to-from {
			clear(data[from+int64(n) : to])
		}
	}
	return data, kept, dropped, nil
}
