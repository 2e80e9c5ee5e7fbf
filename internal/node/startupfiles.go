package node

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/filetrace"
	"github.com/slacker-dev/slacker/internal/runs"
	"github.com/slacker-dev/slacker/internal/trace"
)

// rootFiles is the file side of the start-up trace of a volume made for a start
// (prefetch.StartupFiles, package filetrace): a shared root's image root, or a
// block clone. It records the files the start opens on the volume's mount, and
// warms the mount's page cache from the files of the trace the start replays. It
// lives from the volume being made until it is unmounted (close).
type rootFiles struct {
	log     *slog.Logger
	ctx     context.Context // ends at close: a warm-up stops
	cancel  context.CancelFunc
	mounted chan struct{} // closed once the root is mounted, or will not be
	// replaying is called once the root is mounted, when the start replays a
	// trace and records none, before the warm-up (the node narrows the root's
	// readahead; a start that records keeps the start-up readahead, which
	// decides what its trace holds).
	replaying func()

	mu      sync.Mutex
	mnt     string // the root's mountpoint, once mounted
	noRec   bool   // Record(false): the start records no trace
	rec     *filetrace.Recorder
	closed  bool
	warming sync.WaitGroup // a warm-up with files open on the root
}

func newRootFiles(log *slog.Logger, replaying func()) *rootFiles {
	ctx, cancel := context.WithCancel(context.Background())
	return &rootFiles{log: log, ctx: ctx, cancel: cancel, mounted: make(chan struct{}), replaying: replaying}
}

// mountedAt tells f that the root is mounted at mnt: the files the start opens
// are noted from now on, unless the start is known to record no trace (the
// lookup of its trace may end after the container's first opens).
func (f *rootFiles) mountedAt(mnt string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.mnt != "" {
		return
	}
	f.mnt = mnt
	close(f.mounted)
	if !f.noRec {
		f.startLocked()
	}
}

// close ends f's work: the recording (what it has stays, for Files) and any
// warm-up, waiting for the warm-up's reads under way (the root cannot be
// unmounted while it holds files open). Call it before the root is unmounted.
func (f *rootFiles) close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	if f.mnt == "" {
		close(f.mounted)
	}
	rec := f.rec
	f.mu.Unlock()
	f.cancel()
	if rec != nil {
		rec.Stop()
	}
	f.warming.Wait()
}

func (f *rootFiles) startLocked() {
	rec, err := filetrace.Record(f.mnt)
	if err != nil {
		f.log.Warn("startup-files-not-recorded", "err", err)
		return
	}
	f.rec = rec
}

// Record says whether the start records a trace: if not, the files are no longer
// noted.
func (f *rootFiles) Record(on bool) {
	if on {
		return // noted since the mount, or from it
	}
	f.mu.Lock()
	f.noRec = true
	rec := f.rec
	f.rec = nil
	f.mu.Unlock()
	if rec != nil {
		rec.Stop()
	}
}

// Files ends the recording and returns the files the start opened, with the
// ranges of them the start read.
func (f *rootFiles) Files(blocks []runs.Run) []trace.File {
	f.mu.Lock()
	rec := f.rec
	f.mu.Unlock()
	if rec == nil {
		return nil
	}
	if err := rec.Stop(); err != nil {
		f.log.Warn("startup-files-recording-ended", "err", err)
	}
	return rec.Files(blocks, blockmap.BlockSize)
}

// Replay, once the root is mounted, tells the node that the start replays a
// trace (if it records none: Record(false) came first), then warms the root's
// page cache from its files (if any) until the root goes.
func (f *rootFiles) Replay(files []trace.File) {
	select {
	case <-f.mounted:
	case <-f.ctx.Done():
		return
	}
	f.mu.Lock()
	mnt, closed, recording := f.mnt, f.closed, !f.noRec
	f.mu.Unlock()
	if mnt == "" || closed {
		return
	}
	if f.replaying != nil && !recording {
		// Not under f.mu, nor counted in f.warming: the node takes the volume's
		// lock, which an unmount holds while it closes f.
		f.replaying()
	}
	if len(files) == 0 {
		return
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.warming.Add(1)
	f.mu.Unlock()
	defer f.warming.Done()
	start := time.Now()
	st, err := filetrace.Warm(f.ctx, mnt, files, 0)
	if err != nil && f.ctx.Err() == nil {
		f.log.Warn("startup-files-warm-failed", "err", err)
		return
	}
	f.log.Info("startup-files-warmed", "files", st.Files, "bytes", st.Bytes, "skipped", st.Skipped, "of_files", len(files),
		"took", time.Since(start))
}
