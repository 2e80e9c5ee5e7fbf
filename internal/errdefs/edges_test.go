package errdefs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	cerrdefs "github.com/containerd/containerd/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/cli"
	"github.com/slacker-dev/slacker/internal/daemon"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/fusefs"
	"github.com/slacker-dev/slacker/internal/gc"
	"github.com/slacker-dev/slacker/internal/graphdriver"
	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/registry"
	"github.com/slacker-dev/slacker/internal/snapshotter"
	"github.com/slacker-dev/slacker/internal/trace"
)

// answer is what every edge says for one kind (docs/operating.md, "Error kinds and
// what each edge answers").
type answer struct {
	wire     string        // the daemon's API kind
	http     int           // the daemon's HTTP status
	grpc     codes.Code    // the snapshotter's gRPC code, through containerd's errdefs.ToGRPC
	graph    int           // the graph driver's HTTP status to dockerd
	errno    syscall.Errno // FUSE
	exitCode int           // the CLI
}

var edges = map[errdefs.Kind]answer{
	errdefs.Internal:    {"internal", 500, codes.Unknown, 500, syscall.EIO, 1},
	errdefs.NotFound:    {"not_found", 404, codes.NotFound, 500, syscall.EIO, 1},
	errdefs.Exists:      {"exists", 409, codes.AlreadyExists, 500, syscall.EIO, 1},
	errdefs.Invalid:     {"invalid", 400, codes.InvalidArgument, 500, syscall.EIO, 1},
	errdefs.Busy:        {"busy", 409, codes.FailedPrecondition, 500, syscall.EIO, 1},
	errdefs.Unavailable: {"unavailable", 503, codes.Unavailable, 500, syscall.EIO, 1},
	errdefs.Corrupt:     {"corrupt", 500, codes.Unknown, 500, syscall.EIO, 1},
	errdefs.Unsupported: {"unsupported", 501, codes.Unimplemented, 500, syscall.EIO, 1},
	errdefs.OutOfRange:  {"out_of_range", 400, codes.Unknown, 500, syscall.ENOSPC, 1},
	errdefs.Canceled:    {"canceled", 499, codes.Canceled, 500, syscall.EINTR, 1},
}

// inputs are errors of each kind as the product makes them: the sentinel, wrapped
// with context, with a message of its own, the context errors, and the packages'
// own sentinels.
func inputs() []struct {
	kind errdefs.Kind
	err  error
} {
	type in = struct {
		kind errdefs.Kind
		err  error
	}
	var out []in
	for _, k := range errdefs.Kinds() {
		base := k.Err()
		if k == errdefs.Internal {
			base = errors.New("disk on fire")
		}
		out = append(out,
			in{k, base},
			in{k, fmt.Errorf("mount volume v1: %w", fmt.Errorf("volume v1: %w", base))},
			in{k, fmt.Errorf("op: %w", errdefs.Errorf(base, "in its own words (%d)", 7))},
		)
	}
	return append(out,
		in{errdefs.Unavailable, context.DeadlineExceeded},
		in{errdefs.Unavailable, fmt.Errorf("put sha256:x: %w", context.DeadlineExceeded)},
		in{errdefs.Canceled, fmt.Errorf("fetch chunk sha256:x: %w", context.Canceled)},
		in{errdefs.Canceled, fmt.Errorf("store %w: %w", errdefs.ErrUnavailable, context.Canceled)},
		in{errdefs.Internal, fmt.Errorf("snapshot: %w", errors.New("no space left on device"))},
		in{errdefs.Invalid, fmt.Errorf("snapshot x: %w: bad magic", blockmap.ErrMalformed)},
		in{errdefs.Invalid, fmt.Errorf("%w: trailing data", image.ErrMalformed)},
		in{errdefs.Invalid, fmt.Errorf("%w: negative window", trace.ErrMalformed)},
		in{errdefs.Invalid, fmt.Errorf("%w: version 2", graphdriver.ErrMalformedLayer)},
		in{errdefs.Invalid, &archive.EntryError{Name: "../x", Op: "check", Err: archive.ErrLimit}},
		in{errdefs.Unsupported, fmt.Errorf("x is an image index: %w", registry.ErrNotSlacker)},
		in{errdefs.Unsupported, image.ErrNotSlackerLayer},
		in{errdefs.Unsupported, gc.ErrNoRecords},
		in{errdefs.Unavailable, fmt.Errorf("ref: %w: dial tcp: refused", registry.ErrUnreachable)},
		in{errdefs.Unavailable, fmt.Errorf("%w (no daemon at /x.sock)", api.ErrDaemon)},
	)
}

// TestEdgesAgree checks, for errors of every kind, what each edge answers: the
// daemon's API kind and status (and the api client's way back to the same kind and
// message), the snapshotter's gRPC code, the graph driver's answer to dockerd, the
// FUSE errno and the CLI's exit code and line. Each edge's answer depends on the kind
// alone, so a kind the daemon calls "not_found" is NotFound at the snapshotter too.
func TestEdgesAgree(t *testing.T) {
	for _, k := range errdefs.Kinds() {
		if _, ok := edges[k]; !ok {
			t.Fatalf("the table says nothing of kind %s", k)
		}
	}
	ins := inputs()
	client := serveErrors(t, ins)
	for i, in := range ins {
		err, want := in.err, edges[in.kind]
		t.Run(fmt.Sprintf("%d-%s", i, in.kind), func(t *testing.T) {
			if k := errdefs.KindOf(err); k != in.kind {
				t.Fatalf("KindOf(%v) = %s, want %s", err, k, in.kind)
			}

			st, body := daemon.ErrorAnswer(err)
			if st != want.http || body.Kind != want.wire || body.Error != err.Error() {
				t.Errorf("daemon: %d %+v; want %d %q with the message", st, body, want.http, want.wire)
			}
			_, back := client.Volume(context.Background(), strconv.Itoa(i))
			if k := errdefs.KindOf(back); k != in.kind {
				t.Errorf("api client: %v is %s, want %s", back, k, in.kind)
			}
			wantMsg := err.Error()
			if in.kind == errdefs.Internal {
				wantMsg = "slackerd: " + wantMsg
			}
			if back == nil || back.Error() != wantMsg {
				t.Errorf("api client: message %q, want %q", back, wantMsg)
			}

			mapped := snapshotter.MapError(err)
			if code := status.Code(cerrdefs.ToGRPC(mapped)); code != want.grpc {
				t.Errorf("snapshotter: gRPC %s, want %s (%v)", code, want.grpc, mapped)
			}
			if !errors.Is(mapped, err) {
				t.Errorf("snapshotter: %v lost the error it translated", mapped)
			}

			gst, resp := graphdriver.ErrorAnswer(err)
			if gst != want.graph || resp.Err != err.Error() {
				t.Errorf("graph driver: %d %+v; want %d with the message", gst, resp, want.graph)
			}

			if e := fusefs.Errno(err); e != want.errno {
				t.Errorf("fusefs: %v, want %v", e, want.errno)
			}

			if code, line := cli.Exit(err); code != want.exitCode || line != "slacker: "+err.Error() {
				t.Errorf("cli: %d %q; want %d and the message", code, line, want.exitCode)
			}
		})
	}
}

// serveErrors answers GET /v1/volumes/{i} on a unix socket with the daemon's answer
// to ins[i] (daemon.ErrorAnswer, written as the daemon writes it), and returns an
// api client for it.
func serveErrors(t *testing.T, ins []struct {
	kind errdefs.Kind
	err  error
}) *api.Client {
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/volumes/{i}", func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.PathValue("i"))
		st, body := daemon.ErrorAnswer(ins[i].err)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(st)
		json.NewEncoder(w).Encode(body)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return api.NewClient(sock)
}
