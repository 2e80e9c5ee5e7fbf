package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/contrib/snapshotservice"
	"github.com/containerd/containerd/snapshots"
	"google.golang.org/grpc"
)

// Server serves a snapshotter as a containerd proxy plugin (the snapshots gRPC
// service) on a unix socket.
type Server struct {
	rpc    *grpc.Server
	socket string
	log    *slog.Logger
}

// Listen opens the unix socket (replacing a stale one; refusing one that answers)
// and returns a server for sn; Serve runs it.
func Listen(socket string, sn snapshots.Snapshotter, log *slog.Logger) (*Server, net.Listener, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return nil, nil, fmt.Errorf("snapshotter socket: %w", err)
	}
	if c, err := net.DialTimeout("unix", socket, time.Second); err == nil {
		c.Close()
		return nil, nil, fmt.Errorf("snapshotter socket %s: another process already listens there", socket)
	}
	os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, nil, fmt.Errorf("snapshotter socket: %w", err)
	}
	// containerd runs as root; nobody else may drive the node's volumes.
	if err := os.Chmod(socket, 0o600); err != nil {
		l.Close()
		return nil, nil, fmt.Errorf("snapshotter socket: %w", err)
	}
	rpc := grpc.NewServer()
	snapshotsapi.RegisterSnapshotsServer(rpc, snapshotservice.FromSnapshotter(sn))
	return &Server{rpc: rpc, socket: socket, log: log}, l, nil
}

// Serve answers on l until Stop.
func (s *Server) Serve(l net.Listener) error {
	s.log.Info("snapshotter-listening", "socket", s.socket)
	err := s.rpc.Serve(l)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Stop lets running calls finish (until ctx ends), then closes the socket.
func (s *Server) Stop(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.rpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.rpc.Stop()
	}
	os.Remove(s.socket)
}
