package store

import (
	"context"
	"fmt"
	"regexp"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// Refs is an optional ability of a Store (found by type assertion): small named
// records that can be replaced, the only mutable things in a store. Nodes keep
// their leases there and garbage collection its state (package gc), so that a
// store shared by many nodes needs nothing else to be collected safely.
//
// Rules every implementation follows (checked by storetest.Run when the store has
// the ability):
//   - Names match RefNamePattern; any other name is errdefs.ErrInvalid.
//   - PutRef replaces the record atomically and durably: a reader sees the old
//     record or the new one, whole, never a mix; once PutRef returns, every later
//     GetRef sees the new record (or a newer one).
//   - A record holds at most MaxRefSize bytes (more is errdefs.ErrInvalid).
//   - Safe for concurrent use; concurrent PutRefs of one name leave one of them.
//
// A wrapper that cannot reach an inner store's refs returns an error wrapping
// errdefs.ErrUnsupported from every method.
type Refs interface {
	// PutRef stores b under name, replacing any record there.
	PutRef(ctx context.Context, name string, b []byte) error
	// GetRef returns the record named name, or errdefs.ErrNotFound.
	GetRef(ctx context.Context, name string) ([]byte, error)
	// ListRefs calls fn with the name of every record whose name starts with
	// prefix, in no particular order. An error from fn stops it and is returned.
	ListRefs(ctx context.Context, prefix string, fn func(name string) error) error
	// DeleteRef removes the record; an absent record is errdefs.ErrNotFound.
	DeleteRef(ctx context.Context, name string) error
}

// MaxRefSize bounds a record.
const MaxRefSize = 16 << 20

// RefNamePattern is what a record's name looks like: lowercase slash-separated
// words of letters, digits, '.', '_' and '-', none starting with '.'.
var RefNamePattern = regexp.MustCompile(`^[a-z0-9_-][a-z0-9._-]*(/[a-z0-9_-][a-z0-9._-]*)*$`)

// CheckRefName returns errdefs.ErrInvalid unless name is a valid record name.
func CheckRefName(name string) error {
	if len(name) > 200 || !RefNamePattern.MatchString(name) {
		return fmt.Errorf("record name %q: %w", name, errdefs.ErrInvalid)
	}
	return nil
}
