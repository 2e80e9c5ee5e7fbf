package errdefs

import (
	"context"
	"errors"
	"fmt"
)

// The kinds of error. Wrap them with context; test for them with errors.Is or KindOf.
var (
	// ErrNotFound: no such object, volume, image, container, layer or record.
	ErrNotFound = errors.New("not found")
	// ErrExists: the thing to be made already exists.
	ErrExists = errors.New("already exists")
	// ErrInvalid: a malformed argument or input (a bad name or digest, a range a
	// store object does not hold, a malformed block map, descriptor or trace).
	ErrInvalid = errors.New("invalid argument")
	// ErrBusy: the thing is in use (a mounted filesystem, a layer being applied,
	// another garbage collection running); the same call may succeed when it is not.
	ErrBusy = errors.New("busy")
	// ErrUnavailable: a store, registry or daemon that is away or answered with a
	// transient failure: worth retrying later. KindOf counts a passed deadline
	// (context.DeadlineExceeded) as this kind too.
	ErrUnavailable = errors.New("unavailable")
	// ErrCorrupt: data that does not match its digest (or its size). Corrupt data is
	// never served as if it were valid; retrying does not mend it.
	ErrCorrupt = errors.New("content does not match its digest")
	// ErrUnsupported: a valid request this program does not do (user-namespace
	// remapping in the graph driver, an xz layer, a store that keeps no records).
	ErrUnsupported = errors.New("not supported")
	// ErrOutOfRange: an offset past the end of a volume (a write past the end of the
	// device it backs).
	ErrOutOfRange = errors.New("out of range")
)

// Kind is the class of an error, as KindOf tells it.
type Kind uint8

// The kinds, one per sentinel, plus Internal (none of them) and Canceled.
const (
	// Internal is an error of no kind: a bug, a local I/O error, anything a caller
	// cannot act on but report.
	Internal Kind = iota
	NotFound
	Exists
	Invalid
	Busy
	// Unavailable is ErrUnavailable, and a deadline that passed
	// (context.DeadlineExceeded): inside Slacker every deadline bounds a wait for a
	// store, a registry or the daemon, so one that passes says that it did not
	// answer in time, worth retrying later.
	Unavailable
	Corrupt
	Unsupported
	OutOfRange
	// Canceled: the caller gave up (context.Canceled), e.g. an interrupted request.
	Canceled
)

// Kinds returns every kind, Internal first.
func Kinds() []Kind {
	ks := make([]Kind, 0, len(kinds))
	for k := range kinds {
		ks = append(ks, Kind(k))
	}
	return ks
}

// kinds holds each kind's name and error, in Kind order.
var kinds = [...]struct {
	name string
	err  error
}{
	Internal:    {"internal", nil},
	NotFound:    {"not_found", ErrNotFound},
	Exists:      {"exists", ErrExists},
	Invalid:     {"invalid", ErrInvalid},
	Busy:        {"busy", ErrBusy},
	Unavailable: {"unavailable", ErrUnavailable},
	Corrupt:     {"corrupt", ErrCorrupt},
	Unsupported: {"unsupported", ErrUnsupported},
	OutOfRange:  {"out_of_range", ErrOutOfRange},
	Canceled:    {"canceled", context.Canceled},
}

// precedence is the order in which KindOf tests an error that is of several kinds
// (say, a busy unmount whose cause was a deadline): a caller that gave up first
// (nobody reads the answer, and FUSE must say EINTR), corrupt data next (it must
// never pass for a transient failure), the specific kinds, and unavailability last.
var precedence = [...]Kind{
	Canceled, Corrupt, NotFound, Exists, Invalid, OutOfRange, Busy, Unsupported, Unavailable,
}

// KindOf classifies err: the first kind in precedence order that err is (errors.Is
// its sentinel; context.Canceled is Canceled, context.DeadlineExceeded Unavailable),
// Internal if none (or if err is nil).
func KindOf(err error) Kind {
	if err == nil {
		return Internal
	}
	for _, k := range precedence {
		if errors.Is(err, kinds[k].err) || k == Unavailable && errors.Is(err, context.DeadlineExceeded) {
			return k
		}
	}
	return Internal
}

// String is the kind's name, as logs and the daemon's API (package api) spell it:
// "not_found", "exists", "invalid", "busy", "unavailable", "corrupt", "unsupported",
// "out_of_range", "canceled", "internal".
func (k Kind) String() string {
	if int(k) < len(kinds) {
		return kinds[k].name
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind returns the kind named name (String's inverse); false for a name it does
// not know.
func ParseKind(name string) (Kind, bool) {
	for k, d := range kinds {
		if d.name == name {
			return Kind(k), true
		}
	}
	return Internal, false
}

// Err returns the error that is the kind: its sentinel, or context.Canceled; nil for
// Internal. KindOf(k.Err()) == k.
func (k Kind) Err() error {
	if int(k) < len(kinds) {
		return kinds[k].err
	}
	return nil
}

// New returns an error whose message is msg and which is kind (errors.Is(err, kind)),
// for a package's sentinel that says more than its kind:
//
//	var ErrMalformed = errdefs.New(errdefs.ErrInvalid, "malformed block map")
//
// kind is one of this package's sentinels (or context.Canceled). The message does not
// repeat the kind's own words.
func New(kind error, msg string) error {
	return &kindError{err: errors.New(msg), kind: kind}
}

// Errorf formats an error as fmt.Errorf does (%w included) and returns it as kind,
// with the formatted message only: errdefs.Errorf(errdefs.ErrNotFound, "no such
// container: %s", name) says just that, and is ErrNotFound.
func Errorf(kind error, format string, args ...any) error {
	return &kindError{err: fmt.Errorf(format, args...), kind: kind}
}

// kindError is an error with its own message that is also a kind.
type kindError struct {
	err  error
	kind error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.err, e.kind} }
