package errdefs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want Kind
	}{
		{"nil", nil, Internal},
		{"plain", errors.New("disk on fire"), Internal},
		{"foreign not-exist", fs.ErrNotExist, Internal},
		{"not found", ErrNotFound, NotFound},
		{"exists", ErrExists, Exists},
		{"invalid", ErrInvalid, Invalid},
		{"busy", ErrBusy, Busy},
		{"unavailable", ErrUnavailable, Unavailable},
		{"corrupt", ErrCorrupt, Corrupt},
		{"unsupported", ErrUnsupported, Unsupported},
		{"out of range", ErrOutOfRange, OutOfRange},
		{"canceled", context.Canceled, Canceled},
		{"deadline", context.DeadlineExceeded, Unavailable},
		{"deadline, wrapped", fmt.Errorf("put x: %w", context.DeadlineExceeded), Unavailable},
		{"wrapped twice", fmt.Errorf("mount volume a: %w", fmt.Errorf("volume a: %w", ErrNotFound)), NotFound},
		{"joined", errors.Join(errors.New("x"), ErrBusy), Busy},
		{"own message", New(ErrInvalid, "malformed block map"), Invalid},
		{"own message, wrapped", fmt.Errorf("snapshot x: %w", New(ErrInvalid, "malformed block map")), Invalid},
		{"errorf", Errorf(ErrNotFound, "no such container: %s", "ghost"), NotFound},
		// An error of several kinds: the precedence decides.
		{"cancel beats unavailable", fmt.Errorf("%w: %w", ErrUnavailable, context.Canceled), Canceled},
		{"corrupt beats not found", fmt.Errorf("%w: %w", ErrNotFound, ErrCorrupt), Corrupt},
		{"busy beats unavailable", fmt.Errorf("unmount: %w: %w", ErrBusy, ErrUnavailable), Busy},
		{"cancel beats deadline", fmt.Errorf("%w: %w", context.DeadlineExceeded, context.Canceled), Canceled},
		{"not found beats deadline", fmt.Errorf("%w: %w", context.DeadlineExceeded, ErrNotFound), NotFound},
		{"errorf wrapping another kind", Errorf(ErrBusy, "layer in use: %w", context.DeadlineExceeded), Busy},
	} {
		if got := KindOf(tc.err); got != tc.want {
			t.Errorf("%s: KindOf(%v) = %s, want %s", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestNewAndErrorfKeepTheirMessage(t *testing.T) {
	sentinel := New(ErrUnavailable, "registry unreachable")
	err := fmt.Errorf("pull x: %w: dial tcp: refused", sentinel)
	if err.Error() != "pull x: registry unreachable: dial tcp: refused" {
		t.Errorf("message %q", err)
	}
	if !errors.Is(err, sentinel) || !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotFound) {
		t.Errorf("%v: Is sentinel %v, Is ErrUnavailable %v, Is ErrNotFound %v", err,
			errors.Is(err, sentinel), errors.Is(err, ErrUnavailable), errors.Is(err, ErrNotFound))
	}
	// Two sentinels with one message are still two errors.
	if errors.Is(err, New(ErrUnavailable, "registry unreachable")) {
		t.Error("a second New with the same message matched the first")
	}
	cause := errors.New("open /x: permission denied")
	e := Errorf(ErrNotFound, "image %s: no such image (%w)", "debian", cause)
	if e.Error() != "image debian: no such image (open /x: permission denied)" {
		t.Errorf("message %q", e)
	}
	if !errors.Is(e, ErrNotFound) || !errors.Is(e, cause) {
		t.Errorf("%v: Is ErrNotFound %v, Is its cause %v", e, errors.Is(e, ErrNotFound), errors.Is(e, cause))
	}
}

func TestKindNames(t *testing.T) {
	seen := map[string]bool{}
	ks := Kinds()
	if len(ks) != int(Canceled)+1 || ks[0] != Internal {
		t.Fatalf("Kinds() = %v", ks)
	}
	for _, k := range ks {
		name := k.String()
		if seen[name] {
			t.Errorf("two kinds are named %q", name)
		}
		seen[name] = true
		if got, ok := ParseKind(name); !ok || got != k {
			t.Errorf("ParseKind(%q) = %s, %v; want %s", name, got, ok, k)
		}
		if k == Internal {
			if k.Err() != nil {
				t.Errorf("Internal.Err() = %v, want nil", k.Err())
			}
			continue
		}
		if got := KindOf(k.Err()); got != k {
			t.Errorf("KindOf(%s.Err()) = %s", k, got)
		}
	}
	if k, ok := ParseKind("frobnicated"); ok || k != Internal {
		t.Errorf("ParseKind of an unknown name = %s, %v", k, ok)
	}
	if s := Kind(200).String(); s != "kind(200)" {
		t.Errorf("Kind(200).String() = %q", s)
	}
}
