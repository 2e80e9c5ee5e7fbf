package archive

import (
	"fmt"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

var (
	// ErrUnsafe marks a layer refused as hostile or malformed input: a path that is
	// absolute or climbs above root, a symlink target that climbs above root, a bad
	// hardlink, a device node that is not allowed, an unknown entry type, a corrupt
	// header. Errors from the filesystem (EIO, ENOSPC) never wrap it. It is
	// errdefs.ErrInvalid.
	ErrUnsafe = errdefs.New(errdefs.ErrInvalid, "unsafe layer")

	// ErrLimit marks a layer that exceeds one of the Options limits or a fixed bound
	// (a PAX header over 1 MiB). It wraps ErrUnsafe.
	ErrLimit = fmt.Errorf("%w: limit exceeded", ErrUnsafe)
)

// EntryError reports a failure tied to one tar entry of a layer.
type EntryError struct {
	// Name is the entry's name as written in the tar header. For header read errors it
	// is the last entry read successfully ("" when none was).
	Name string
	// Op is what was being done: "check", "resolve parent", "create", "write", ...
	Op string
	// Err is the cause; errors.Is(err, ErrUnsafe) tells refused input from I/O errors.
	Err error
}

func (e *EntryError) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("layer: %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("layer entry %q: %s: %v", e.Name, e.Op, e.Err)
}

func (e *EntryError) Unwrap() error { return e.Err }

// unsafef returns an error wrapping ErrUnsafe.
func unsafef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnsafe}, args...)...)
}

// limitf returns an error wrapping ErrLimit (and so ErrUnsafe).
func limitf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrLimit}, args...)...)
}
