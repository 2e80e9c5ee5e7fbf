package gc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
)

// ErrMalformed is wrapped by every error decoding a record.
var ErrMalformed = errdefs.New(errdefs.ErrInvalid, "malformed gc record")

// ErrNoRecords: the store keeps no records, so it cannot hold leases and cannot be
// collected safely (errdefs.ErrUnsupported).
var ErrNoRecords = errdefs.New(errdefs.ErrUnsupported, "this store keeps no records (leases), so it cannot be garbage collected safely")

// Refs returns the store's records, or ErrNoRecords.
func Refs(s store.Store) (store.Refs, error) {
	r, ok := s.(store.Refs)
	if !ok {
		return nil, ErrNoRecords
	}
	return r, nil
}

// noRecords reports an error meaning the store has no records.
func noRecords(err error) bool { return errors.Is(err, errdefs.ErrUnsupported) }

// LeaseVersion is the only lease version this package reads and writes.
const LeaseVersion = 1

// LeasePrefix is where leases live among the store's records.
const LeasePrefix = "leases/"

// StateName is the collector's record.
const StateName = "gc/state"

var nodePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// LeaseName returns the record name of node's lease.
func LeaseName(node string) string { return LeasePrefix + node }

// Lease is what one node uses, written by the node (package node).
type Lease struct {
	Version int       `json:"version"`
	Node    string    `json:"node"`
	Host    string    `json:"host,omitempty"`
	PID     int       `json:"pid,omitempty"`
	Updated time.Time `json:"updated"`
	// Expires is when the lease stops protecting anything unless refreshed.
	Expires time.Time `json:"expires"`
	// Snapshots are in use on the node: bases of its volumes, images named there.
	Snapshots []digest.Digest `json:"snapshots,omitempty"`
	// Uploads are snapshots being written.
	Uploads []Upload `json:"uploads,omitempty"`
}

// Upload is a snapshot being written: the chunks it will name, before it checks
// which of them the store has.
type Upload struct {
	ID      string          `json:"id"`
	Volume  string          `json:"volume,omitempty"`
	Started time.Time       `json:"started"`
	Chunks  []digest.Digest `json:"chunks,omitempty"`
}

// Live reports whether the lease protects anything at now. skew allows for the
// clocks of the node and of the reader to differ.
func (l *Lease) Live(now time.Time, skew time.Duration) bool {
	return now.Before(l.Expires.Add(skew))
}

// EncodeLease returns the lease's record.
func EncodeLease(l *Lease) ([]byte, error) {
	c := *l
	c.Version = LeaseVersion
	if err := c.validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, err
	}
	if len(b) > store.MaxRefSize {
		return nil, fmt.Errorf("%w: lease of %d bytes, more than %d", ErrMalformed, len(b), store.MaxRefSize)
	}
	return b, nil
}

// DecodeLease parses and validates a lease record.
func DecodeLease(b []byte) (*Lease, error) {
	var l Lease
	if err := decodeStrict(b, &l); err != nil {
		return nil, err
	}
	if l.Version != LeaseVersion {
		return nil, fmt.Errorf("%w: lease version %d (this build reads %d)", ErrMalformed, l.Version, LeaseVersion)
	}
	if err := l.validate(); err != nil {
		return nil, err
	}
	return &l, nil
}

func (l *Lease) validate() error {
	if !nodePattern.MatchString(l.Node) {
		return fmt.Errorf("%w: node name %q", ErrMalformed, l.Node)
	}
	if l.Updated.IsZero() || l.Expires.IsZero() {
		return fmt.Errorf("%w: lease of %s without times", ErrMalformed, l.Node)
	}
	for _, d := range l.Snapshots {
		if err := store.CheckDigest(d); err != nil {
			return fmt.Errorf("%w: lease of %s: snapshot: %v", ErrMalformed, l.Node, err)
		}
	}
	for _, u := range l.Uploads {
		for _, d := range u.Chunks {
			if err := store.CheckDigest(d); err != nil {
				return fmt.Errorf("%w: lease of %s: upload %s: %v", ErrMalformed, l.Node, u.ID, err)
			}
		}
	}
	return nil
}

func decodeStrict(b []byte, v any) error {
	if len(b) > store.MaxRefSize {
		return fmt.Errorf("%w: %d bytes", ErrMalformed, len(b))
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data", ErrMalformed)
	}
	return nil
}

// PutLease writes l as its node's lease.
func PutLease(ctx context.Context, r store.Refs, l *Lease) error {
	b, err := EncodeLease(l)
	if err != nil {
		return err
	}
	return r.PutRef(ctx, LeaseName(l.Node), b)
}

// LeaseRecord is a lease as read from the store, or why it could not be.
type LeaseRecord struct {
	Name  string
	Lease *Lease // nil if Err
	Err   error
}

// ReadLeases returns every lease in the store.
func ReadLeases(ctx context.Context, r store.Refs) ([]LeaseRecord, error) {
	var names []string
	if err := r.ListRefs(ctx, LeasePrefix, func(n string) error { names = append(names, n); return nil }); err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	var out []LeaseRecord
	for _, n := range names {
		b, err := r.GetRef(ctx, n)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("read lease %s: %w", n, err)
		}
		l, err := DecodeLease(b)
		out = append(out, LeaseRecord{Name: n, Lease: l, Err: err})
	}
	return out, nil
}

// StateVersion is the only collector state version this package reads and writes.
const StateVersion = 1

// State is the collector's record. Epoch grows by one each time a collection
// starts; Running is true from before the collector reads leases until after its
// last deletion.
type State struct {
	Version   int       `json:"version"`
	Epoch     int64     `json:"epoch"`
	Running   bool      `json:"running"`
	Owner     string    `json:"owner,omitempty"` // random, per collection
	Host      string    `json:"host,omitempty"`
	PID       int       `json:"pid,omitempty"`
	Started   time.Time `json:"started,omitzero"`
	Heartbeat time.Time `json:"heartbeat,omitzero"`
	Finished  time.Time `json:"finished,omitzero"`
}

// StaleAfter is how long a running collection may go without a heartbeat before
// others treat it as dead. A collection whose own heartbeat is half that old stops
// deleting.
const StaleAfter = 2 * time.Minute

// Active reports whether a collection is running at now (not stale).
func (s State) Active(now time.Time) bool {
	return s.Running && now.Sub(s.Heartbeat) < StaleAfter
}

// EncodeState returns the state's record.
func EncodeState(s State) ([]byte, error) {
	s.Version = StateVersion
	if s.Epoch < 0 {
		return nil, fmt.Errorf("%w: negative epoch", ErrMalformed)
	}
	return json.Marshal(s)
}

// DecodeState parses a collector state record.
func DecodeState(b []byte) (State, error) {
	var s State
	if err := decodeStrict(b, &s); err != nil {
		return State{}, err
	}
	if s.Version != StateVersion {
		return State{}, fmt.Errorf("%w: gc state version %d (this build reads %d)", ErrMalformed, s.Version, StateVersion)
	}
	if s.Epoch < 0 {
		return State{}, fmt.Errorf("%w: negative epoch", ErrMalformed)
	}
	return s, nil
}

// ReadState returns the collector's state (the zero State if none ever ran).
func ReadState(ctx context.Context, r store.Refs) (State, error) {
	b, err := r.GetRef(ctx, StateName)
	if errors.Is(err, errdefs.ErrNotFound) {
		return State{Version: StateVersion}, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("read gc state: %w", err)
	}
	return DecodeState(b)
}

func writeState(ctx context.Context, r store.Refs, s State) error {
	b, err := EncodeState(s)
	if err != nil {
		return err
	}
	if err := r.PutRef(ctx, StateName, b); err != nil {
		return fmt.Errorf("write gc state: %w", err)
	}
	return nil
}
