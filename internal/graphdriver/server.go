package graphdriver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/node"
)

// Backend is what the protocol server needs; *Driver has it.
type Backend interface {
	Init(home string, opts []string, remapped bool) error
	Create(ctx context.Context, id, parent string, rw bool, storageOpt map[string]string) error
	Remove(ctx context.Context, id string) error
	Get(ctx context.Context, id string) (string, error)
	Put(ctx context.Context, id string) error
	Exists(id string) bool
	Status() [][2]string
	Metadata(ctx context.Context, id string) (map[string]string, error)
	Cleanup(ctx context.Context) error
	Diff(ctx context.Context, id, parent string) (io.ReadCloser, error)
	Changes(ctx context.Context, id, parent string) ([]Change, error)
	ApplyDiff(ctx context.Context, id, parent string, r io.Reader) (int64, error)
	DiffSize(ctx context.Context, id, parent string) (int64, error)
}

var _ Backend = (*Driver)(nil)

// The wire types, field for field what dockerd 20.10's graphdriver proxy
// (daemon/graphdriver/proxy.go) and plugin client (pkg/plugins) send and read.

// Request is the body of most GraphDriver calls.
type Request struct {
	ID         string            `json:",omitempty"`
	Parent     string            `json:",omitempty"`
	MountLabel string            `json:",omitempty"`
	StorageOpt map[string]string `json:",omitempty"`
}

// IDMap is one user-namespace mapping of GraphDriver.Init.
type IDMap struct {
	ContainerID int `json:"ContainerID"`
	HostID      int `json:"HostID"`
	Size        int `json:"Size"`
}

// InitRequest is the body of GraphDriver.Init.
type InitRequest struct {
	Home    string
	Opts    []string `json:"Opts"`
	UIDMaps []IDMap  `json:"UIDMaps"`
	GIDMaps []IDMap  `json:"GIDMaps"`
}

// Capabilities tell dockerd how the driver's diffs behave. ReproducesExactDiffs is
// false: dockerd keeps each layer's tar-split and reassembles the layer for push and
// save from Get (a Slacker layer reassembles from its header alone).
type Capabilities struct {
	ReproducesExactDiffs bool
}

// Response is the body of every GraphDriver answer.
type Response struct {
	Err          string            `json:",omitempty"`
	Dir          string            `json:",omitempty"`
	Exists       bool              `json:",omitempty"`
	Status       [][2]string       `json:",omitempty"`
	Changes      []Change          `json:",omitempty"`
	Size         int64             `json:",omitempty"`
	Metadata     map[string]string `json:",omitempty"`
	Capabilities Capabilities      `json:",omitempty"`
}

// ActivateResponse answers Plugin.Activate.
type ActivateResponse struct {
	Implements []string
}

// MediaType is the plugin protocol's content type.
const MediaType = "application/vnd.docker.plugins.v1+json"

// Server serves the plugin protocol for a Backend on a unix socket.
type Server struct {
	b       Backend
	log     *slog.Logger
	srv     *http.Server
	socket  string
	onError func(error) // Options.OnError
}

// NewServer returns a server for b.
func NewServer(b Backend, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{b: b, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /Plugin.Activate", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
		writeJSON(w, http.StatusOK, ActivateResponse{Implements: []string{"GraphDriver"}})
	})
	mux.HandleFunc("POST /GraphDriver.Init", s.init)
	mux.HandleFunc("POST /GraphDriver.Create", s.create(false))
	mux.HandleFunc("POST /GraphDriver.CreateReadWrite", s.create(true))
	mux.HandleFunc("POST /GraphDriver.Remove", s.simple(func(ctx context.Context, q Request) (Response, error) {
		return Response{}, b.Remove(ctx, q.ID)
	}))
	mux.HandleFunc("POST /GraphDriver.Get", s.simple(func(ctx context.Context, q Request) (Response, error) {
		dir, err := b.Get(ctx, q.ID)
		return Response{Dir: dir}, err
	}))
	mux.HandleFunc("POST /GraphDriver.Put", s.simple(func(ctx context.Context, q Request) (Response, error) {
		return Response{}, b.Put(ctx, q.ID)
	}))
	mux.HandleFunc("POST /GraphDriver.Exists", s.simple(func(ctx context.Context, q Request) (Response, error) {
		return Response{Exists: b.Exists(q.ID)}, nil
	}))
	mux.HandleFunc("POST /GraphDriver.Status", s.simple(func(ctx context.Context, q Request) (Response, error) {
		return Response{Status: b.Status()}, nil
	}))
	mux.HandleFunc("POST /GraphDriver.GetMetadata", s.simple(func(ctx context.Context, q Request) (Response, error) {
		m, err := b.Metadata(ctx, q.ID)
		return Response{Metadata: m}, err
	}))
	mux.HandleFunc("POST /GraphDriver.Cleanup", s.simple(func(ctx context.Context, q Request) (Response, error) {
		return Response{}, b.Cleanup(ctx)
	}))
	mux.HandleFunc("POST /GraphDriver.Capabilities", s.simple(func(ctx context.Context, q Request) (Response, error) {
		return Response{Capabilities: Capabilities{ReproducesExactDiffs: false}}, nil
	}))
	mux.HandleFunc("POST /GraphDriver.Changes", s.simple(func(ctx context.Context, q Request) (Response, error) {
		cs, err := b.Changes(ctx, q.ID, q.Parent)
		return Response{Changes: cs}, err
	}))
	mux.HandleFunc("POST /GraphDriver.DiffSize", s.simple(func(ctx context.Context, q Request) (Response, error) {
		n, err := b.DiffSize(ctx, q.ID, q.Parent)
		return Response{Size: n}, err
	}))
	mux.HandleFunc("POST /GraphDriver.Diff", s.diff)
	mux.HandleFunc("POST /GraphDriver.ApplyDiff", s.applyDiff)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// dockerd treats 404 as "the plugin does not implement this call".
		writeJSON(w, http.StatusNotFound, Response{Err: fmt.Sprintf("%s %s: not implemented", r.Method, r.URL.Path)})
	})
	s.srv = &http.Server{Handler: s.logged(mux), ReadHeaderTimeout: 10 * time.Second}
	return s
}

// Listen makes the unix socket at path (replacing a stale one, refusing one that
// answers).
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("graph-driver socket %s: another process already serves it", path)
	}
	os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("graph-driver socket: %w", err)
	}
	os.Chmod(path, 0o600)
	return l, nil
}

// Serve answers on l until Shutdown.
func (s *Server) Serve(l net.Listener) error {
	s.log.Info("graphdriver-listening", "socket", l.Addr().String())
	err := s.srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting calls and waits for those running.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *Server) logged(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		s.log.Debug("graphdriver-call", "call", r.URL.Path, "id", r.URL.Query().Get("id"), "status", sw.status, "took", time.Since(start))
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", MediaType)
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// ErrorAnswer is the graph driver's one translation of an error, the way dockerd's
// plugin client reads one: status 500 and {"Err": message}, whatever its kind.
// dockerd reads only the message (which names the kind in its own words: "no such
// layer", "layer in use", "not supported by the slacker graph driver"), and it reads
// a 404 as "the plugin does not implement this call", so a kind must not become a
// status here; the kind goes to the log line.
func ErrorAnswer(err error) (int, Response) {
	return http.StatusInternalServerError, Response{Err: err.Error()}
}

// fail answers err (ErrorAnswer) and logs it with its errdefs kind.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if s.onError != nil {
		s.onError(err)
	}
	s.log.Warn("graphdriver-call-failed", "call", r.URL.Path, "kind", errdefs.KindOf(err).String(), "err", err)
	status, resp := ErrorAnswer(err)
	writeJSON(w, status, resp)
}

func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("read request: %w", err)
	}
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	return nil
}

func (s *Server) simple(f func(ctx context.Context, q Request) (Response, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var q Request
		if err := decode(r, &q); err != nil {
			s.fail(w, r, err)
			return
		}
		resp, err := f(r.Context(), q)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

func (s *Server) init(w http.ResponseWriter, r *http.Request) {
	var q InitRequest
	if err := decode(r, &q); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.b.Init(q.Home, q.Opts, len(q.UIDMaps) > 0 || len(q.GIDMaps) > 0); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, Response{})
}

func (s *Server) create(rw bool) http.HandlerFunc {
	return s.simple(func(ctx context.Context, q Request) (Response, error) {
		return Response{}, s.b.Create(ctx, q.ID, q.Parent, rw, q.StorageOpt)
	})
}

// diff streams the layer tar. An error after the first byte can no longer be
// answered, so the connection is cut: dockerd sees a failed read, never a short tar.
func (s *Server) diff(w http.ResponseWriter, r *http.Request) {
	var q Request
	if err := decode(r, &q); err != nil {
		s.fail(w, r, err)
		return
	}
	rc, err := s.b.Diff(r.Context(), q.ID, q.Parent)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		s.log.Error("graphdriver-diff-failed", "layer", q.ID, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// applyDiff reads the layer tar from the body; id and parent come in the query.
func (s *Server) applyDiff(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n, err := s.b.ApplyDiff(r.Context(), q.Get("id"), q.Get("parent"), r.Body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, Response{Size: n})
}

// Serve opens the driver on n and serves it on the unix socket in the background;
// the server's error, if it stops by itself, goes to errc. Stop it with Stop.
func Serve(ctx context.Context, n *node.Node, o Options, socket string, errc chan<- error) (*Server, error) {
	d, err := Open(ctx, n, o)
	if err != nil {
		return nil, err
	}
	l, err := Listen(socket)
	if err != nil {
		return nil, err
	}
	s := NewServer(d, o.Logger)
	s.socket, s.onError = socket, o.OnError
	go func() { errc <- s.Serve(l) }()
	return s, nil
}

// Stop shuts the server down and removes its socket.
func (s *Server) Stop(ctx context.Context) error {
	err := s.Shutdown(ctx)
	if s.socket != "" {
		os.Remove(s.socket)
	}
	return err
}
