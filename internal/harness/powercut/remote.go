package powercut

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// A program must not serve a FUSE mount it maps files of: a page fault on a mapped page of the
// mount (SQLite's -shm file, the store's mapped reads) waits in the kernel for the FUSE server,
// and the Go runtime cannot stop that thread for a garbage collection, while the collection has
// stopped the server's goroutines: the process hangs for good. A test whose code maps files of
// the mount therefore runs the file system in a child process: the test starts the test
// binary again as the server ([StartServer]), and the test's TestMain calls [ServeIfChild] first.

// serveEnv, set, makes ServeIfChild serve.
const serveEnv = "FOLDSTREAM_POWERCUT_SERVE"

type request struct {
	Op   string // "mount", "cut", "stats" or "unmount"
	Dst  string
	Mode Mode
	Seed uint64
	// Mount's arguments.
	Mountpoint, Backing string
	Options             Options
}

type response struct {
	Err    string
	Report CutReport
	Stats  Stats
}

// Server is a child process that serves power-cut file systems, one at a time. Start it with
// [StartServer].
type Server struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	in  io.WriteCloser
	out *json.Decoder
	end bool
}

// StartServer starts the current executable (a test binary whose TestMain calls [ServeIfChild])
// as the process that serves the mounts of [Server.Mount]. Close it when done.
func StartServer() (*Server, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-test.run=^$")
	// A binary built with -race sleeps a second at exit unless told not to.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), serveEnv+"=1", "GORACE="+gorace)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("powercut: start the file system's process: %w", err)
	}
	return &Server{cmd: cmd, in: in, out: json.NewDecoder(bufio.NewReader(outPipe))}, nil
}

func (srv *Server) call(req request) (response, error) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.end {
		return response{}, errors.New("powercut: the file system's process has ended")
	}
	if err := json.NewEncoder(srv.in).Encode(req); err != nil {
		return response{}, fmt.Errorf("powercut: %s: %w", req.Op, err)
	}
	var resp response
	if err := srv.out.Decode(&resp); err != nil {
		return response{}, fmt.Errorf("powercut: %s: no answer from the file system's process: %w", req.Op, err)
	}
	if resp.Err != "" {
		return resp, errors.New(resp.Err)
	}
	return resp, nil
}

// Close unmounts what is still mounted and ends the process.
func (srv *Server) Close() error {
	srv.mu.Lock()
	if srv.end {
		srv.mu.Unlock()
		return nil
	}
	srv.end = true
	srv.mu.Unlock()
	srv.in.Close() // the child unmounts and ends when its input ends
	return srv.cmd.Wait()
}

// Remote is a power-cut file system served by a [Server]. Create it with [Server.Mount].
type Remote struct {
	srv  *Server
	dir  string
	once sync.Once
}

// Mount mounts a power-cut file system at mountpoint, as [Mount] does, in the server's process;
// the server serves one mount at a time. It fails when FUSE is not usable here.
func (srv *Server) Mount(mountpoint, backing string, opts Options) (*Remote, error) {
	if _, err := srv.call(request{Op: "mount", Mountpoint: mountpoint, Backing: backing, Options: opts}); err != nil {
		return nil, err
	}
	return &Remote{srv: srv, dir: mountpoint}, nil
}

// Dir returns the mount point.
func (r *Remote) Dir() string { return r.dir }

// Cut cuts the power; see [FS.Cut].
func (r *Remote) Cut(dst string, mode Mode, seed uint64) (CutReport, error) {
	resp, err := r.srv.call(request{Op: "cut", Dst: dst, Mode: mode, Seed: seed})
	return resp.Report, err
}

// Stats returns what the mount saw so far; see [FS.Stats].
func (r *Remote) Stats() (Stats, error) {
	resp, err := r.srv.call(request{Op: "stats"})
	return resp.Stats, err
}

// Unmount unmounts the file system. It may be called more than once.
func (r *Remote) Unmount() error {
	var err error
	r.once.Do(func() { _, err = r.srv.call(request{Op: "unmount"}) })
	return err
}

// ServeIfChild serves power-cut file systems and exits when the process was started by
// [StartServer]; otherwise it returns at once. Call it first in TestMain.
func ServeIfChild() {
	if os.Getenv(serveEnv) == "" {
		return
	}
	os.Exit(serve(os.Stdin, os.Stdout))
}

func serve(in io.Reader, out io.Writer) int {
	enc := json.NewEncoder(out)
	dec := json.NewDecoder(bufio.NewReader(in))
	var pfs *FS
	unmount := func() error {
		if pfs == nil {
			return nil
		}
		err := pfs.Unmount()
		pfs = nil
		return err
	}
	defer unmount()
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			return 0 // the test ended (or died): the deferred unmount leaves no mount behind
		}
		var resp response
		var err error
		switch {
		case req.Op == "mount":
			if err = unmount(); err == nil {
				pfs, err = Mount(req.Mountpoint, req.Backing, req.Options)
			}
		case pfs == nil:
			err = errors.New("powercut: nothing is mounted")
		case req.Op == "cut":
			resp.Report, err = pfs.Cut(req.Dst, req.Mode, req.Seed)
		case req.Op == "stats":
			resp.Stats = pfs.Stats()
		case req.Op == "unmount":
			err = unmount()
		default:
			err = errors.New("powercut: unknown request " + req.Op)
		}
		if err != nil {
			resp.Err = err.Error()
		}
		if err := enc.Encode(resp); err != nil {
			return 1
		}
	}
}
