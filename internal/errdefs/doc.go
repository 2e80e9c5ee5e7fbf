// Package errdefs is Slacker's one vocabulary of error kinds, in the manner of
// containerd's errdefs: ErrNotFound, ErrExists, ErrInvalid, ErrBusy, ErrUnavailable,
// ErrCorrupt, ErrUnsupported and ErrOutOfRange are defined here and nowhere else, and
// KindOf is the one classifier every edge switches on (context.Canceled is a kind of
// its own, Canceled; context.DeadlineExceeded is Unavailable).
//
// Packages return these kinds wrapped with context (fmt.Errorf("volume %s: %w", id,
// errdefs.ErrNotFound)), or with a message of their own that still is the kind
// (Errorf, New): "no such image x", "registry unreachable". A package keeps a sentinel
// of its own only when it says more than a kind (a malformed block map, an invalid
// start-up trace, an ordinary OCI image, an unreachable registry); such a sentinel is
// made with New, so that errors.Is(err, errdefs.ErrInvalid) holds for it too.
//
// The edges translate KindOf once each: the daemon to its API's kind and HTTP status
// (and package api's client back to the kind), the containerd snapshotter to
// containerd's errdefs (gRPC codes), the graph driver to its answers to dockerd, FUSE
// to an errno, the CLI to an exit code and one line. docs/operating.md has the table,
// and edges_test.go checks that the edges agree on it.
//
// This package is a leaf: it imports only the standard library, and it never decides
// what to do about an error (retry, log, answer); it only names what kind it is.
package errdefs
