package powercut

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
)

// A program must not serve a FUSE mount it maps files of: a page fault on a mapped page of the
// mount (SQLite's -shm file, the store's mapped reads) waits in the kernel for the FUSE server,
// and the Go runtime cannot stop that thread for a garbage collection, while the collection has
// stopped the server's goroutines: the process hangs for good. A test whose code maps files of
// the mount therefore runs the file system in a child process: [StartRemote] starts the test
// binary again as the server, and the test's TestMain calls [ServeIfChild] first.

// serveEnv carries the child's mount arguments; its presence makes ServeIfChild serve.
const serveEnv = "FOLDSTREAM_POWERCUT_SERVE"

type remoteArgs struct {
	Mountpoint, Backing string
	Options             Options
}

type request struct {
	Op   string // "cut", "stats" or "unmount"
	Dst  string
	Mode Mode
	Seed uint64
}

type response struct {
	Err    string
	Report CutReport
	Stats  Stats
}

// Remote is a power-cut file system served by a child process. Create it with [StartRemote].
type Remote struct {
	dir  string
	cmd  *exec.Cmd
	mu   sync.Mutex
	in   io.WriteCloser
	out  *json.Decoder
	done bool
}

// StartRemote mounts a power-cut file system at mountpoint, served by a child process running the
// current executable (a test binary whose TestMain calls [ServeIfChild]). It returns once the mount
// is ready, or the child's error (FUSE not usable here).
func StartRemote(mountpoint, backing string, opts Options) (*Remote, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args, err := json.Marshal(remoteArgs{Mountpoint: mountpoint, Backing: backing, Options: opts})
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"="+string(args))
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
	r := &Remote{dir: mountpoint, cmd: cmd, in: in, out: json.NewDecoder(bufio.NewReader(outPipe))}
	var ready response
	if err := r.out.Decode(&ready); err != nil {
		r.stop()
		return nil, fmt.Errorf("powercut: the file system's process ended before mounting: %w", err)
	}
	if ready.Err != "" {
		r.stop()
		return nil, errors.New(ready.Err)
	}
	return r, nil
}

// Dir returns the mount point.
func (r *Remote) Dir() string { return r.dir }

func (r *Remote) call(req request) (response, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return response{}, errors.New("powercut: the file system is unmounted")
	}
	if err := json.NewEncoder(r.in).Encode(req); err != nil {
		return response{}, fmt.Errorf("powercut: %s: %w", req.Op, err)
	}
	var resp response
	if err := r.out.Decode(&resp); err != nil {
		return response{}, fmt.Errorf("powercut: %s: no answer from the file system's process: %w", req.Op, err)
	}
	if resp.Err != "" {
		return resp, errors.New(resp.Err)
	}
	return resp, nil
}

// Cut cuts the power; see [FS.Cut].
func (r *Remote) Cut(dst string, mode Mode, seed uint64) (CutReport, error) {
	resp, err := r.call(request{Op: "cut", Dst: dst, Mode: mode, Seed: seed})
	return resp.Report, err
}

// Stats returns what the mount saw so far; see [FS.Stats].
func (r *Remote) Stats() (Stats, error) {
	resp, err := r.call(request{Op: "stats"})
	return resp.Stats, err
}

// Unmount unmounts the file system and waits for its process to end. It may be called more than
// once.
func (r *Remote) Unmount() error {
	_, err := r.call(request{Op: "unmount"})
	r.mu.Lock()
	already := r.done
	r.done = true
	r.mu.Unlock()
	if already {
		return nil
	}
	return errors.Join(err, r.stop())
}

func (r *Remote) stop() error {
	r.in.Close() // the child unmounts and ends when its input ends
	return r.cmd.Wait()
}

// ServeIfChild serves a power-cut file system and exits when the process was started by
// [StartRemote]; otherwise it returns at once. Call it first in TestMain.
func ServeIfChild() {
	spec := os.Getenv(serveEnv)
	if spec == "" {
		return
	}
	os.Exit(serve(spec, os.Stdin, os.Stdout))
}

func serve(spec string, in io.Reader, out io.Writer) int {
	enc := json.NewEncoder(out)
	var args remoteArgs
	if err := json.Unmarshal([]byte(spec), &args); err != nil {
		enc.Encode(response{Err: "powercut: bad arguments: " + err.Error()})
		return 2
	}
	pfs, err := Mount(args.Mountpoint, args.Backing, args.Options)
	if err != nil {
		enc.Encode(response{Err: err.Error()})
		return 1
	}
	if err := enc.Encode(response{}); err != nil {
		pfs.Unmount()
		return 1
	}
	dec := json.NewDecoder(bufio.NewReader(in))
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			// The test ended (or died): leave no mount behind.
			pfs.Unmount()
			return 0
		}
		var resp response
		switch req.Op {
		case "cut":
			rep, err := pfs.Cut(req.Dst, req.Mode, req.Seed)
			resp.Report = rep
			if err != nil {
				resp.Err = err.Error()
			}
		case "stats":
			resp.Stats = pfs.Stats()
		case "unmount":
			if err := pfs.Unmount(); err != nil {
				resp.Err = err.Error()
			}
			enc.Encode(resp)
			return 0
		default:
			resp.Err = "powercut: unknown request " + req.Op
		}
		if err := enc.Encode(resp); err != nil {
			pfs.Unmount()
			return 1
		}
	}
}
