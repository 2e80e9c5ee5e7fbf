package faultstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
)

// Op is a set of store operations.
type Op uint16

// Operations a fault can apply to.
const (
	OpPut Op = 1 << iota
	OpGet
	OpGetRange
	OpStat
	OpList
	OpDelete
	OpRefs // the optional store.Refs methods, when the inner store has them

	// Reads are the calls that read objects.
	Reads = OpGet | OpGetRange | OpStat
	// All is every operation.
	All = OpPut | OpGet | OpGetRange | OpStat | OpList | OpDelete | OpRefs
)

var opNames = map[Op]string{OpPut: "put", OpGet: "get", OpGetRange: "get-range", OpStat: "stat", OpList: "list",
	OpDelete: "delete", OpRefs: "refs"}

func (o Op) String() string {
	if n, ok := opNames[o]; ok {
		return n
	}
	return fmt.Sprintf("ops(%#x)", uint16(o))
}

// Fault describes one injected misbehaviour. The zero Fault matches every call
// and does nothing.
type Fault struct {
	// Ops are the calls it applies to (zero: all).
	Ops Op
	// Match selects objects by digest (nil: all). List and Refs calls have no
	// digest and are matched only by a nil Match.
	Match func(digest.Digest) bool
	// Delay waits this long before the call goes ahead (or fails).
	Delay time.Duration
	// Hang blocks the call until its ctx is done (the call then fails with the
	// context's error) or the fault is removed (the call then goes ahead).
	Hang bool
	// Err fails the call with an error wrapping Err, without reaching the inner
	// store. errdefs.ErrUnavailable is a store that is gone.
	Err error
	// Cut lets a transfer start and breaks it in the middle: Get serves half the
	// object, then its reader fails with errdefs.ErrUnavailable; Put reads half of its
	// input, stores nothing and fails with errdefs.ErrUnavailable.
	Cut bool
	// Corrupt makes the object read as if its stored bytes were damaged, as a
	// conforming backend reports it: Get's reader fails with errdefs.ErrCorrupt at
	// the end, GetRange fails with errdefs.ErrCorrupt.
	Corrupt bool
	// Times fires the fault at most this many times (zero: every time).
	Times int
	// Skip lets this many matching calls through before the fault fires.
	Skip int
}

type active struct {
	Fault
	skipped, fired int
}

// Store is a store.Store that injects faults into calls to an inner store. It is
// safe for concurrent use; faults may be changed while calls are in flight.
type Store struct {
	inner store.Store

	mu      sync.Mutex
	faults  []*active
	changed chan struct{} // closed (and replaced) whenever the fault set changes

	calls    [16]atomic.Int64
	injected atomic.Int64
}

var _ store.Store = (*Store)(nil)

// New wraps inner. It injects nothing until a fault is added.
func New(inner store.Store) *Store {
	return &Store{inner: inner, changed: make(chan struct{})}
}

// Inner returns the wrapped store.
func (s *Store) Inner() store.Store { return s.inner }

// Inject adds a fault and returns a function that removes it.
func (s *Store) Inject(f Fault) (remove func()) {
	a := &active{Fault: f}
	s.mu.Lock()
	s.faults = append(s.faults, a)
	s.signalLocked()
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, x := range s.faults {
			if x == a {
				s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
				s.signalLocked()
				return
			}
		}
	}
}

// Set replaces every fault with fs (none: the store behaves).
func (s *Store) Set(fs ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
	for _, f := range fs {
		s.faults = append(s.faults, &active{Fault: f})
	}
	s.signalLocked()
}

// Clear removes every fault; hung calls go ahead.
func (s *Store) Clear() { s.Set() }

func (s *Store) signalLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Calls returns how many calls of op reached the wrapper (faulted or not).
func (s *Store) Calls(op Op) int64 {
	var n int64
	for i := range 16 {
		if op&(1<<i) != 0 {
			n += s.calls[i].Load()
		}
	}
	return n
}

// Injected returns how many calls a fault changed.
func (s *Store) Injected() int64 { return s.injected.Load() }

func (s *Store) count(op Op) {
	for i := range 16 {
		if op == 1<<i {
			s.calls[i].Add(1)
		}
	}
}

// pick returns the first fault that fires for this call, counting it, and the
// channel that signals a change of the fault set.
func (s *Store) pick(op Op, d digest.Digest, hasDigest bool) (*active, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.faults {
		if a.Ops != 0 && a.Ops&op == 0 {
			continue
		}
		if a.Match != nil && (!hasDigest || !a.Match(d)) {
			continue
		}
		if a.Times > 0 && a.fired >= a.Times {
			continue
		}
		if a.skipped < a.Skip {
			a.skipped++
			continue
		}
		a.fired++
		return a, s.changed
	}
	return nil, nil
}

func (s *Store) stillActive(a *active) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.faults {
		if x == a {
			return true
		}
	}
	return false
}

// before applies the delay, hang and error of the fault chosen for a call. It
// returns the fault (nil if none fired) for the transfer-level faults.
func (s *Store) before(ctx context.Context, op Op, d digest.Digest, hasDigest bool) (*active, error) {
	s.count(op)
	a, changed := s.pick(op, d, hasDigest)
	if a == nil {
		return nil, nil
	}
	s.injected.Add(1)
	if a.Delay > 0 {
		t := time.NewTimer(a.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("faultstore %s %s: %w", op, d, ctx.Err())
		}
	}
	for a.Hang {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("faultstore %s %s: hung: %w", op, d, ctx.Err())
		case <-changed:
		}
		s.mu.Lock()
		changed = s.changed
		s.mu.Unlock()
		if !s.stillActive(a) {
			break
		}
	}
	if a.Err != nil {
		return nil, fmt.Errorf("faultstore %s %s: injected: %w", op, d, a.Err)
	}
	return a, nil
}

func (s *Store) Put(ctx context.Context, d digest.Digest, size int64, r io.Reader) error {
	a, err := s.before(ctx, OpPut, d, true)
	if err != nil {
		return err
	}
	if a != nil && a.Cut {
		io.CopyN(io.Discard, r, size/2)
		return fmt.Errorf("faultstore put %s: connection cut after %d of %d bytes: store %w", d, size/2, size, errdefs.ErrUnavailable)
	}
	return s.inner.Put(ctx, d, size, r)
}

func (s *Store) Get(ctx context.Context, d digest.Digest) (io.ReadCloser, error) {
	a, err := s.before(ctx, OpGet, d, true)
	if err != nil {
		return nil, err
	}
	if a == nil || (!a.Cut && !a.Corrupt) {
		return s.inner.Get(ctx, d)
	}
	b, err := store.ReadAll(ctx, s.inner, d)
	if err != nil {
		return nil, err
	}
	if a.Corrupt {
		bad := bytes.Clone(b)
		if len(bad) == 0 {
			bad = []byte{0}
		} else {
			bad[len(bad)/2] ^= 0x01
		}
		return io.NopCloser(store.VerifyingReader(bytes.NewReader(bad), d, int64(len(b)))), nil
	}
	return io.NopCloser(io.MultiReader(bytes.NewReader(b[:len(b)/2]), errReader{
		fmt.Errorf("faultstore get %s: connection cut after %d of %d bytes: store %w", d, len(b)/2, len(b), errdefs.ErrUnavailable)})), nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func (s *Store) GetRange(ctx context.Context, d digest.Digest, off, length int64) ([]byte, error) {
	a, err := s.before(ctx, OpGetRange, d, true)
	if err != nil {
		return nil, err
	}
	if a != nil && a.Corrupt {
		return nil, fmt.Errorf("faultstore get %s: injected damage: object %w", d, errdefs.ErrCorrupt)
	}
	if a != nil && a.Cut {
		return nil, fmt.Errorf("faultstore get %s [%d, +%d): connection cut: store %w", d, off, length, errdefs.ErrUnavailable)
	}
	return s.inner.GetRange(ctx, d, off, length)
}

func (s *Store) Stat(ctx context.Context, d digest.Digest) (store.Info, error) {
	if _, err := s.before(ctx, OpStat, d, true); err != nil {
		return store.Info{}, err
	}
	return s.inner.Stat(ctx, d)
}

func (s *Store) List(ctx context.Context, fn func(store.Info) error) error {
	if _, err := s.before(ctx, OpList, "", false); err != nil {
		return err
	}
	return s.inner.List(ctx, fn)
}

func (s *Store) Delete(ctx context.Context, d digest.Digest) error {
	if _, err := s.before(ctx, OpDelete, d, true); err != nil {
		return err
	}
	return s.inner.Delete(ctx, d)
}

// Only returns a Match for exactly the digests given.
func Only(ds ...digest.Digest) func(digest.Digest) bool {
	set := make(map[digest.Digest]bool, len(ds))
	for _, d := range ds {
		set[d] = true
	}
	return func(d digest.Digest) bool { return set[d] }
}

var _ store.Refs = (*Store)(nil)

// refs returns the inner store's records, or an error wrapping
// errdefs.ErrUnsupported.
func (s *Store) refs() (store.Refs, error) {
	r, ok := s.inner.(store.Refs)
	if !ok {
		return nil, fmt.Errorf("faultstore: the inner store keeps no records: %w", errdefs.ErrUnsupported)
	}
	return r, nil
}

func (s *Store) PutRef(ctx context.Context, name string, b []byte) error {
	r, err := s.refs()
	if err != nil {
		return err
	}
	if _, err := s.before(ctx, OpRefs, "", false); err != nil {
		return err
	}
	return r.PutRef(ctx, name, b)
}

func (s *Store) GetRef(ctx context.Context, name string) ([]byte, error) {
	r, err := s.refs()
	if err != nil {
		return nil, err
	}
	if _, err := s.before(ctx, OpRefs, "", false); err != nil {
		return nil, err
	}
	return r.GetRef(ctx, name)
}

func (s *Store) ListRefs(ctx context.Context, prefix string, fn func(string) error) error {
	r, err := s.refs()
	if err != nil {
		return err
	}
	if _, err := s.before(ctx, OpRefs, "", false); err != nil {
		return err
	}
	return r.ListRefs(ctx, prefix, fn)
}

func (s *Store) DeleteRef(ctx context.Context, name string) error {
	r, err := s.refs()
	if err != nil {
		return err
	}
	if _, err := s.before(ctx, OpRefs, "", false); err != nil {
		return err
	}
	return r.DeleteRef(ctx, name)
}
