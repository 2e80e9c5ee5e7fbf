package api

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// serve answers on a unix socket with h and returns the socket.
func serve(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// TestStream: a streamed answer's progress lines reach the callback in order and
// its result the caller; an error line, an error answered at once and a stream
// cut short are errors of the right kind; no daemon says how to start one.
func TestStream(t *testing.T) {
	write := func(w http.ResponseWriter, lines ...StreamLine) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, l := range lines {
			json.NewEncoder(w).Encode(l)
			w.(http.Flusher).Flush()
		}
	}
	sock := serve(t, func(w http.ResponseWriter, r *http.Request) {
		var req GCRequest
		json.NewDecoder(r.Body).Decode(&req)
		if !req.Progress {
			t.Errorf("request without progress: %+v", req)
		}
		switch {
		case req.DryRun && req.GraceSeconds == 1: // an error in the stream
			write(w, StreamLine{Progress: &ProgressEvent{Phase: "list", Done: 3}},
				StreamLine{Error: &ErrorBody{Error: "store unavailable: it went", Kind: "unavailable"}})
		case req.DryRun && req.GraceSeconds == 2: // an error answered at once
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(ErrorBody{Error: "no such thing", Kind: "not_found"})
		case req.DryRun && req.GraceSeconds == 3: // cut short
			write(w, StreamLine{Progress: &ProgressEvent{Phase: "list", Done: 1}})
		default:
			write(w, StreamLine{Progress: &ProgressEvent{Phase: "list", Done: 10}},
				StreamLine{Progress: &ProgressEvent{Phase: "sweep", Done: 2, Total: 4}},
				StreamLine{Result: json.RawMessage(`{"Objects": 10}`)})
		}
	})
	c := NewClient(sock)
	var got []ProgressEvent
	var rep struct{ Objects int }
	if err := c.GCProgress(t.Context(), GCRequest{}, &rep, func(p ProgressEvent) { got = append(got, p) }); err != nil {
		t.Fatal(err)
	}
	if rep.Objects != 10 || len(got) != 2 || got[0].Phase != "list" || got[1] != (ProgressEvent{Phase: "sweep", Done: 2, Total: 4}) {
		t.Fatalf("result %+v, progress %+v", rep, got)
	}
	err := c.GCProgress(t.Context(), GCRequest{DryRun: true, GraceSeconds: 1}, &rep, nil)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "it went") {
		t.Fatalf("an error in the stream: %v", err)
	}
	if err := c.GCProgress(t.Context(), GCRequest{DryRun: true, GraceSeconds: 2}, &rep, nil); !errors.Is(err, errdefs.ErrNotFound) ||
		!strings.Contains(err.Error(), "no such thing") {
		t.Fatalf("an error answered at once: %v", err)
	}
	if err := c.GCProgress(t.Context(), GCRequest{DryRun: true, GraceSeconds: 3}, &rep, nil); err == nil ||
		!strings.Contains(err.Error(), "unexpected EOF") {
		t.Fatalf("a stream cut short: %v", err)
	}
	if err := NewClient(filepath.Join(t.TempDir(), "none")).GCProgress(t.Context(), GCRequest{}, &rep, nil); !errors.Is(err, ErrDaemon) {
		t.Fatalf("no daemon: %v", err)
	}
}
