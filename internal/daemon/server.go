package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/gc"
	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/node"
	"github.com/slacker-dev/slacker/internal/volume"
)

// Version is slackerd's version, set at build time.
var Version = "dev"

// Server serves the API for one node.
type Server struct {
	node      *node.Node
	log       *slog.Logger
	storeDesc string
	stateRoot string
	chunkSize int64
	onError   func(error)
	srv       *http.Server
}

// Options describe the daemon for Info.
type Options struct {
	StateRoot string // Slacker's state directory (names, containers)
	Store     string // the store's location, for display
	ChunkSize int64
	Logger    *slog.Logger
	// OnError, if set, is told of every error the API answers (slackerd's
	// metrics count them by kind).
	OnError func(err error)
}

// New returns a server for n.
func New(n *node.Node, o Options) *Server {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{node: n, log: log, storeDesc: o.Store, stateRoot: o.StateRoot, chunkSize: o.ChunkSize, onError: o.OnError}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", s.info)
	mux.HandleFunc("GET /v1/stats", s.stats)
	mux.HandleFunc("GET /v1/volumes", s.listVolumes)
	mux.HandleFunc("POST /v1/volumes", s.createVolume)
	mux.HandleFunc("GET /v1/volumes/{id}", s.getVolume)
	mux.HandleFunc("DELETE /v1/volumes/{id}", s.deleteVolume)
	mux.HandleFunc("POST /v1/volumes/{id}/mount", s.mountVolume)
	mux.HandleFunc("POST /v1/volumes/{id}/unmount", s.unmountVolume)
	mux.HandleFunc("POST /v1/volumes/{id}/snapshot", s.snapshotVolume)
	mux.HandleFunc("POST /v1/snapshots/mkfs", s.mkfs)
	mux.HandleFunc("GET /v1/snapshots/{id}", s.getSnapshot)
	mux.HandleFunc("POST /v1/store/warm", s.warmStore)
	mux.HandleFunc("GET /v1/snapshots/{id}/map", s.getSnapshotMap)
	mux.HandleFunc("PUT /v1/snapshots/{id}/map", s.carryMap)
	mux.HandleFunc("POST /v1/snapshots/{id}/layout", s.layoutSnapshot)
	mux.HandleFunc("POST /v1/snapshots/{id}/prepare", s.prepareSnapshot)
	mux.HandleFunc("POST /v1/cache/drop", s.dropCache)
	mux.HandleFunc("POST /v1/cache/trim", s.trimCache)
	mux.HandleFunc("POST /v1/gc", s.collect)
	mux.HandleFunc("POST /v1/check", s.check)
	s.srv = &http.Server{Handler: s.logged(mux), ReadHeaderTimeout: 10 * time.Second}
	return s
}

// Serve listens on the unix socket path (replacing a stale socket) until Shutdown.
func (s *Server) Serve(socket string) error {
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return err
	}
	if c, err := net.Dial("unix", socket); err == nil {
		c.Close()
		return fmt.Errorf("another slackerd already listens on %s", socket)
	}
	os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", socket, err)
	}
	os.Chmod(socket, 0o600)
	s.log.Info("api-listening", "socket", socket)
	err = s.srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting requests and waits for those running.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }

func (s *Server) logged(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: 200}
		h.ServeHTTP(sw, r)
		s.log.Debug("api-request", "method", r.Method, "path", r.URL.Path, "status", sw.status, "took", time.Since(start))
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// statusClientClosed is the status of a request its client gave up on (nginx's 499;
// the client is gone, so nobody reads it but the request log).
const statusClientClosed = 499

// statuses holds the HTTP status of each errdefs kind.
var statuses = map[errdefs.Kind]int{
	errdefs.Internal:    http.StatusInternalServerError,
	errdefs.NotFound:    http.StatusNotFound,
	errdefs.Exists:      http.StatusConflict,
	errdefs.Invalid:     http.StatusBadRequest,
	errdefs.Busy:        http.StatusConflict,
	errdefs.Unavailable: http.StatusServiceUnavailable,
	errdefs.Corrupt:     http.StatusInternalServerError,
	errdefs.Unsupported: http.StatusNotImplemented,
	errdefs.OutOfRange:  http.StatusBadRequest,
	errdefs.Canceled:    statusClientClosed,
}

// ErrorAnswer is the daemon's one translation of an error (errdefs.KindOf): the HTTP
// status, and the body that names the kind, which api.Client turns back into it.
func ErrorAnswer(err error) (int, api.ErrorBody) {
	k := errdefs.KindOf(err)
	status, ok := statuses[k]
	if !ok {
		status = http.StatusInternalServerError
	}
	return status, api.ErrorBody{Error: err.Error(), Kind: k.String()}
}

// fail answers err (ErrorAnswer), logging the ones that are the daemon's own failure
// or corrupt data.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if s.onError != nil {
		s.onError(err)
	}
	status, body := ErrorAnswer(err)
	if status == http.StatusInternalServerError {
		s.log.Error("api-error", "method", r.Method, "path", r.URL.Path, "kind", body.Kind, "err", err)
	}
	writeJSON(w, status, body)
}

func decode(r *http.Request, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: request body: %v", errdefs.ErrInvalid, err)
	}
	return nil
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, api.Info{Version: Version, StateRoot: s.stateRoot, Root: s.node.Root(), Store: s.storeDesc,
		ChunkSize: s.chunkSize, PID: os.Getpid()})
}

func volumeOf(v node.VolumeInfo) api.Volume {
	return api.Volume{ID: v.ID, Labels: v.Labels, Base: v.Base, Size: v.Size, Mounted: v.Mountpoint != "",
		ReadOnly: v.ReadOnly, Mountpoint: v.Mountpoint, Device: v.Device, File: v.File, Created: v.Created,
		Mode: string(v.Mode), Image: v.Image, Idle: v.Idle,
		Stats: api.VolumeStats{ReadBytes: v.Stats.ReadBytes, WrittenBytes: v.Stats.WrittenBytes,
			BaseReadBytes: v.Stats.BaseReadBytes, FetchedBytes: v.Stats.FetchedBytes,
			CacheHits: v.Stats.CacheHits, CacheMisses: v.Stats.CacheMisses,
			DeltaBytes: v.Stats.DeltaBytes, DeltaRuns: v.Stats.DeltaRuns,
			BaseReadRuns: v.Stats.BaseReadRuns, BaseReadRunsTruncated: v.Stats.BaseReadRunsTruncated}}
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	vs := s.node.Volumes()
	out := make([]api.Volume, 0, len(vs))
	for _, v := range vs {
		out = append(out, volumeOf(v))
	}
	writeJSON(w, 200, out)
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	var req api.CreateVolumeRequest
	if err := decode(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	mode, err := node.ParseRootMode(req.Mode)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v, err := s.node.CreateVolume(r.Context(), node.CreateOptions{ID: req.ID, Snapshot: req.Snapshot, Size: req.Size, Labels: req.Labels,
		Startup: req.Startup, StartupFallback: req.StartupFallback, Mode: mode})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Mount {
		mounted, err := s.node.MountVolume(r.Context(), v.ID, req.ReadOnly)
		if err != nil {
			// v, not mounted: the volume must not outlive the failed request.
			if derr := s.node.DeleteVolume(context.WithoutCancel(r.Context()), v.ID); derr != nil {
				s.log.Error("volume-delete-failed", "volume", v.ID, "err", derr)
			}
			s.fail(w, r, err)
			return
		}
		v = mounted
	}
	writeJSON(w, http.StatusCreated, volumeOf(v))
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	v, err := s.node.Volume(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, volumeOf(v))
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) {
	if err := s.node.DeleteVolume(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) mountVolume(w http.ResponseWriter, r *http.Request) {
	var req api.MountRequest
	if err := decode(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	v, err := s.node.MountVolume(r.Context(), r.PathValue("id"), req.ReadOnly)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, volumeOf(v))
}

func (s *Server) unmountVolume(w http.ResponseWriter, r *http.Request) {
	if err := s.node.UnmountVolume(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func snapshotOf(m *blockmap.Map, id digest.Digest) api.Snapshot {
	return api.Snapshot{ID: id, Size: m.Size, DataSize: m.DataSize(), ChunkBytes: m.ChunkBytes(),
		Chunks: len(m.Chunks), Extents: len(m.Extents)}
}

func snapshotResult(res *volume.SnapshotResult, took time.Duration) api.Snapshot {
	out := snapshotOf(res.Map, res.ID)
	out.MapBytes, out.DeltaBytes, out.NewBytes = res.EncodedMapLen, res.DeltaBytes, res.NewBytes
	out.NewChunks, out.ReusedChunks, out.TookSeconds = res.NewChunks, res.ReusedChunks, took.Seconds()
	return out
}

func (s *Server) snapshotVolume(w http.ResponseWriter, r *http.Request) {
	var req api.SnapshotRequest
	if err := decode(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	start := time.Now()
	res, err := s.node.SnapshotVolume(r.Context(), r.PathValue("id"), node.SnapshotOptions{ChunkSize: req.ChunkSize})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, snapshotResult(res, time.Since(start)))
}

func (s *Server) mkfs(w http.ResponseWriter, r *http.Request) {
	var req api.MkfsRequest
	if err := decode(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	start := time.Now()
	res, err := s.node.MakeFilesystem(r.Context(), req.Size)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, snapshotResult(res, time.Since(start)))
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	id := digest.Digest(r.PathValue("id"))
	// The node keeps the maps it read; StoredMap says so if the store no longer
	// has one.
	m, err := s.node.StoredMap(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, snapshotOf(m, id))
}

// warmStore opens connections to the store ahead of a pull, in the background
// (node.WarmStore): 202 at once.
func (s *Server) warmStore(w http.ResponseWriter, r *http.Request) {
	s.node.WarmStore()
	w.WriteHeader(http.StatusAccepted)
}

// getSnapshotMap answers the snapshot's encoded block map (for a push, which
// carries it in the image's Slacker layer).
func (s *Server) getSnapshotMap(w http.ResponseWriter, r *http.Request) {
	b, err := s.node.EncodedMap(r.Context(), digest.Digest(r.PathValue("id")))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, api.BlockMap{Map: b})
}

// carryMap takes a snapshot's block map that a pull read with the image's
// manifest (node.CarryMap).
func (s *Server) carryMap(w http.ResponseWriter, r *http.Request) {
	var req api.BlockMap
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 2*image.MaxCarriedMap))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.fail(w, r, fmt.Errorf("%w: request body: %v", errdefs.ErrInvalid, err))
		return
	}
	if err := s.node.CarryMap(r.Context(), digest.Digest(r.PathValue("id")), req.Map); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// prepareSnapshot readies the image snapshot for a container expected soon (a
// pull's last step), in the background: 202 once it has begun.
func (s *Server) prepareSnapshot(w http.ResponseWriter, r *http.Request) {
	id, err := digest.Parse(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, fmt.Errorf("snapshot %q: %v: %w", r.PathValue("id"), err, errdefs.ErrInvalid))
		return
	}
	s.node.PrepareImage(id)
	w.WriteHeader(http.StatusAccepted)
}

func (s *Server) layoutSnapshot(w http.ResponseWriter, r *http.Request) {
	res, err := s.node.LayoutStartup(r.Context(), digest.Digest(r.PathValue("id")))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, 200, api.Layout{Snapshot: res.Snapshot, Unchanged: res.Unchanged, NewChunks: res.NewChunks,
		GatheredBytes: res.GatheredBytes, ReadBytes: res.ReadBytes, FetchBefore: res.FetchBefore,
		FetchAfter: res.FetchAfter, TookSeconds: res.Took.Seconds()})
}

func (s *Server) dropCache(w http.ResponseWriter, r *http.Request) {
	s.node.DropCaches(r.Context(), r.URL.Query().Get("disk") != "")
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	st := s.node.Stats()
	rss, peak := memory()
	writeJSON(w, 200, api.NodeStats{Cache: api.CacheStats(st.Cache), Fetch: api.FetchStats(st.Fetch),
		Prefetch: api.PrefetchStats(st.Prefetch), Volumes: st.Volumes, Mounted: st.Mounted, RSSBytes: rss, PeakRSS: peak,
		LocalImages: api.LocalImageStats(st.LocalImages)})
}

// memory returns this process's resident set size and its peak, from /proc.
func memory() (rss, peak int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		var v int64
		if _, err := fmt.Sscanf(line, "VmRSS: %d kB", &v); err == nil {
			rss = v << 10
		}
		if _, err := fmt.Sscanf(line, "VmHWM: %d kB", &v); err == nil {
			peak = v << 10
		}
	}
	return rss, peak
}

func (s *Server) trimCache(w http.ResponseWriter, r *http.Request) {
	var req api.TrimCacheRequest
	if err := decode(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	chunks, bytes := s.node.Cache().Trim(req.KeepBytes)
	s.log.Info("cache-trimmed", "chunks", chunks, "bytes", bytes, "keep", req.KeepBytes)
	writeJSON(w, 200, api.TrimCacheResult{Chunks: chunks, Bytes: bytes, Cache: api.CacheStats(s.node.Cache().Stats())})
}

func gcRoots(rs []api.GCRoot) []gc.Root {
	out := make([]gc.Root, len(rs))
	for i, r := range rs {
		out[i] = gc.Root{Snapshot: r.Snapshot, From: r.From}
	}
	return out
}

// collect runs a garbage collection of the node's store with the caller's roots
// (the node's own lease is in the store already).
func (s *Server) collect(w http.ResponseWriter, r *http.Request) {
	var req api.GCRequest
	if err := decode(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	st := s.streamer(w, r, req.Progress)
	rep, err := gc.Collect(r.Context(), s.node.Store(), gc.Options{Roots: gcRoots(req.Roots), DryRun: req.DryRun, Logger: s.log,
		Grace: time.Duration(req.GraceSeconds * float64(time.Second)), Skew: time.Duration(req.SkewSeconds * float64(time.Second)),
		Progress: st.progress})
	if err == nil {
		s.log.Info("gc-done", "epoch", rep.Epoch, "deleted", rep.Deleted, "deleted_bytes", rep.DeletedBytes, "dry_run", rep.DryRun)
	}
	st.answer(rep, err)
}

func (s *Server) check(w http.ResponseWriter, r *http.Request) {
	var req api.CheckRequest
	if err := decode(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	st := s.streamer(w, r, req.Progress)
	rep, err := gc.Check(r.Context(), s.node.Store(), gc.CheckOptions{Roots: gcRoots(req.Roots), ReadData: req.ReadData, Logger: s.log,
		Progress: func(done, total int) { st.progress("read", int64(done), int64(total)) }})
	st.answer(rep, err)
}

// streamer answers a long call: at once with its result (or error), or, when the
// request asked for progress, as a stream of api.StreamLine (progress lines, at
// most one every 200 ms and each phase's last, then the result or the error).
type streamer struct {
	s      *Server
	w      http.ResponseWriter
	r      *http.Request
	stream bool
	mu     sync.Mutex
	last   time.Time
	phase  string
}

func (s *Server) streamer(w http.ResponseWriter, r *http.Request, stream bool) *streamer {
	st := &streamer{s: s, w: w, r: r, stream: stream}
	if stream {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(200)
		st.flush()
	}
	return st
}

func (st *streamer) flush() {
	if f, ok := st.w.(http.Flusher); ok {
		f.Flush()
	}
}

func (st *streamer) line(l api.StreamLine) {
	json.NewEncoder(st.w).Encode(l)
	st.flush()
}

// progress sends a progress line (a func for gc's Progress hooks).
func (st *streamer) progress(phase string, done, total int64) {
	if !st.stream {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	now := time.Now()
	if phase == st.phase && now.Sub(st.last) < 200*time.Millisecond && (total == 0 || done < total) {
		return
	}
	st.phase, st.last = phase, now
	st.line(api.StreamLine{Progress: &api.ProgressEvent{Phase: phase, Done: done, Total: total}})
}

// answer sends the result, or the error.
func (st *streamer) answer(result any, err error) {
	if !st.stream {
		if err != nil {
			st.s.fail(st.w, st.r, err)
			return
		}
		writeJSON(st.w, 200, result)
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		if st.s.onError != nil {
			st.s.onError(err)
		}
		_, body := ErrorAnswer(err)
		st.line(api.StreamLine{Error: &body})
		return
	}
	b, merr := json.Marshal(result)
	if merr != nil {
		_, body := ErrorAnswer(merr)
		st.line(api.StreamLine{Error: &body})
		return
	}
	st.line(api.StreamLine{Result: b})
}
