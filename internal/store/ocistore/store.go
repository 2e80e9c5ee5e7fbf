package ocistore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/errgroup"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/transport"
)

// Options configure a Store. Zero values take the defaults shown.
type Options struct {
	// Repository is HOST[:PORT]/PATH, e.g. registry.example.com/slacker/chunks.
	Repository string
	// Insecure speaks plain HTTP to any registry (loopback and private addresses
	// always get it, as Docker does).
	Insecure bool
	// Keychain finds credentials (authn.DefaultKeychain: the Docker config and its
	// credential helpers).
	Keychain authn.Keychain
	// Transport carries the requests (default: transport.New's, with
	// ReceiveBuffer). Tests and fault injection wrap it.
	Transport http.RoundTripper
	// ReceiveBuffer is each connection's receive buffer for the default
	// transport (transport.Options.ReceiveBuffer: 0 its default, negative the
	// kernel's autotuning).
	ReceiveBuffer int
	// Timeout bounds each call whose ctx has no earlier deadline (2m); a Get's
	// bound covers the reading of its body.
	Timeout time.Duration
	// PackSize: a pack being filled is sent when it reaches this size (4 MiB).
	PackSize int64
	// SoloSize: objects at least this big get a pack of their own (1 MiB).
	SoloSize int64
	// MaxFlushes is how many packs may upload at once (4).
	MaxFlushes int
	// MaxAge: a Stat that finds an object in an index older than this refreshes
	// the index first, so deletions by other nodes are seen within MaxAge (30s).
	MaxAge time.Duration
	// BufferLimit is the largest object Put holds in memory (64 MiB); larger ones
	// are streamed into a pack of their own.
	BufferLimit int64
	// RangeGap and MaxRange shape GetBatch's requests: objects of one pack less
	// than RangeGap apart are read in one ranged request of at most MaxRange
	// (64 KiB, 8 MiB).
	RangeGap, MaxRange int64
	// CheckpointEvery: a node checkpoints the packs it uploaded (see
	// checkpoint.go) every this many (256).
	CheckpointEvery int
	// CheckpointQuiet: a node checkpoints the rest of its packs once its uploads
	// pause this long (1s).
	CheckpointQuiet time.Duration
	// Compress keeps each object of up to store.MaxEncodedObject bytes as a zstd
	// frame in its pack when that saves at least a sixteenth of it
	// (store.EncodeObject); the pack lists its encoding and sizes. Reads decode
	// whatever encoding an object was stored with.
	Compress bool
	Logger   *slog.Logger
}

// Store is a store.Store in a repository of an OCI registry. See the package doc.
type Store struct {
	o    Options
	c    *client
	repo name.Repository
	log  *slog.Logger

	mu          sync.Mutex
	packs       map[digest.Digest]*packState // by pack blob digest
	where       map[digest.Digest][]location // object -> where it is
	checkpoints map[string]bool              // checkpoint tags read or written
	own         []*pack                      // uploaded here, not checkpointed yet
	merging     bool
	quiet       *time.Timer    // checkpoints own packs once uploads pause
	bgWG        sync.WaitGroup // background checkpoints

	rmu    sync.Mutex
	flight *refreshFlight
	fresh  time.Time // start of the last refresh that succeeded

	bmu      sync.Mutex
	open     *batch   // being filled
	ready    []*batch // full, waiting for an upload slot
	pending  map[digest.Digest]*batch
	inflight int
	cfgReady bool // the empty config blob is known to exist

	refs refNames
}

type packState struct {
	*pack
	added time.Time // when this node learnt of it
}

type location struct {
	blob    digest.Digest
	entry   // where in the blob, and how it is kept
	created time.Time
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.BatchGetter = (*Store)(nil)
)

// New returns a store for the repository in o. It sends no request: the registry
// may be away when the store is opened.
func New(o Options) (*Store, error) {
	var nopts []name.Option
	if o.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	repo, err := name.NewRepository(o.Repository, nopts...)
	if err != nil {
		return nil, fmt.Errorf("registry store: repository %q: %w", o.Repository, err)
	}
	if o.Keychain == nil {
		o.Keychain = authn.DefaultKeychain
	}
	if o.Transport == nil {
		o.Transport = transport.New(transport.Options{ReceiveBuffer: o.ReceiveBuffer, HTTP2: true})
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.PackSize <= 0 {
		o.PackSize = 4 << 20
	}
	if o.SoloSize <= 0 {
		o.SoloSize = 1 << 20
	}
	if o.MaxFlushes <= 0 {
		o.MaxFlushes = 4
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 30 * time.Second
	}
	if o.BufferLimit <= 0 {
		o.BufferLimit = 64 << 20
	}
	if o.RangeGap <= 0 {
		o.RangeGap = 64 << 10
	}
	if o.MaxRange <= 0 {
		o.MaxRange = 8 << 20
	}
	if o.CheckpointEvery <= 0 {
		o.CheckpointEvery = 256
	}
	if o.CheckpointQuiet <= 0 {
		o.CheckpointQuiet = time.Second
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{o: o, repo: repo, log: log, c: &client{repo: repo, keychain: o.Keychain, base: o.Transport, log: log},
		packs: map[digest.Digest]*packState{}, where: map[digest.Digest][]location{}, checkpoints: map[string]bool{},
		pending: map[digest.Digest]*batch{}}, nil
}

// String is the store's location.
func (s *Store) String() string { return "registry://" + s.repo.Name() }

// Repository is where the packs are.
func (s *Store) Repository() name.Repository { return s.repo }

// bound gives ctx the store's per-call deadline unless it has an earlier one.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= s.o.Timeout {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.o.Timeout)
}

// --- the index -------------------------------------------------------------

// lookup returns where d is, as far as this node knows.
func (s *Store) lookup(d digest.Digest) (location, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := s.where[d]
	if len(ls) == 0 {
		return location{}, false
	}
	return ls[0], true
}

func (s *Store) addPackLocked(p *pack, added time.Time) {
	if _, ok := s.packs[p.blob]; ok {
		return
	}
	s.packs[p.blob] = &packState{pack: p, added: added}
	for _, e := range p.entries {
		s.where[e.d] = append(s.where[e.d], location{blob: p.blob, entry: e, created: p.created})
	}
}

func (s *Store) addPack(p *pack) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addPackLocked(p, time.Now())
}

func (s *Store) dropPackLocked(blob digest.Digest) {
	p, ok := s.packs[blob]
	if !ok {
		return
	}
	delete(s.packs, blob)
	for _, e := range p.entries {
		ls := slices.DeleteFunc(s.where[e.d], func(l location) bool { return l.blob == blob })
		if len(ls) == 0 {
			delete(s.where, e.d)
		} else {
			s.where[e.d] = ls
		}
	}
}

func (s *Store) dropPack(blob digest.Digest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropPackLocked(blob)
}

type refreshFlight struct {
	start time.Time
	done  chan struct{}
	err   error
}

// refreshSince returns once the index reflects a listing of the registry taken
// at or after t. Concurrent callers share refreshes.
func (s *Store) refreshSince(ctx context.Context, t time.Time) error {
	for {
		s.rmu.Lock()
		if !s.fresh.Before(t) {
			s.rmu.Unlock()
			return nil
		}
		f := s.flight
		if f == nil {
			f = &refreshFlight{start: time.Now(), done: make(chan struct{})}
			s.flight = f
			go s.runRefresh(f)
		}
		s.rmu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return fmt.Errorf("refresh index of %s: %w", s, ctx.Err())
		}
		if f.err != nil && !f.start.Before(t) {
			return f.err
		}
	}
}

// runRefresh runs one refresh, detached from any one caller's ctx.
func (s *Store) runRefresh(f *refreshFlight) {
	ctx, cancel := context.WithTimeout(context.Background(), s.o.Timeout)
	defer cancel()
	err := s.refresh(ctx, f.start)
	s.rmu.Lock()
	if err == nil && f.start.After(s.fresh) {
		s.fresh = f.start
	}
	f.err = err
	s.flight = nil
	s.rmu.Unlock()
	close(f.done)
}

// refresh lists the repository's tags, reads the checkpoints and the manifests of
// packs it does not know, and forgets packs that are gone.
func (s *Store) refresh(ctx context.Context, start time.Time) error {
	tags, err := s.c.tags(ctx)
	if err != nil {
		return fmt.Errorf("refresh index of %s: %w", s, err)
	}
	listed := map[digest.Digest]bool{}
	var newIdx, allIdx []string
	s.mu.Lock()
	for _, t := range tags {
		switch {
		case tagRE.MatchString(t):
			listed[digest.NewDigestFromEncoded(digest.SHA256, t[2:])] = true
		case indexTagRE.MatchString(t):
			allIdx = append(allIdx, t)
			if !s.checkpoints[t] {
				newIdx = append(newIdx, t)
			}
		}
	}
	s.mu.Unlock()
	// Checkpoints first: they cover many packs in two requests each.
	var covered []*pack
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, tag := range newIdx {
		g.Go(func() error {
			ps, err := s.readCheckpoint(gctx, tag)
			if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrCorrupt) {
				if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
					s.log.Warn("index-checkpoint-invalid", "tag", tag, "err", err)
				}
				return nil // merged away since the listing, or not to be trusted: read the packs
			}
			if err != nil {
				return err
			}
			mu.Lock()
			covered = append(covered, ps...)
			mu.Unlock()
			s.mu.Lock()
			s.checkpoints[tag] = true
			s.mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("refresh index of %s: %w", s, err)
	}
	s.mu.Lock()
	for _, p := range covered {
		if listed[p.blob] {
			s.addPackLocked(p, time.Now())
		}
	}
	var fresh []string
	for d := range listed {
		if _, ok := s.packs[d]; !ok {
			fresh = append(fresh, packTag(d))
		}
	}
	s.mu.Unlock()
	got := make([]*pack, len(fresh))
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, tag := range fresh {
		g.Go(func() error {
			b, err := s.c.getManifest(gctx, tag)
			if errors.Is(err, errdefs.ErrNotFound) {
				return nil // deleted since the listing
			}
			if err != nil {
				return err
			}
			p, err := decodeManifest(b)
			if err != nil || packTag(p.blob) != tag {
				s.log.Warn("pack-manifest-invalid", "tag", tag, "err", err)
				return nil // never trusted, never fatal to the rest
			}
			got[i] = p
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("refresh index of %s: %w", s, err)
	}
	var read []*pack
	s.mu.Lock()
	for d, p := range s.packs {
		// A pack no longer listed was deleted, unless this node learnt of it
		// after the listing began (its own new upload).
		if !listed[d] && p.added.Before(start) {
			s.dropPackLocked(d)
		}
	}
	for _, p := range got {
		if p != nil {
			s.addPackLocked(p, time.Now())
			read = append(read, p)
		}
	}
	s.mu.Unlock()
	if len(read) >= minCheckpointRead {
		s.checkpointLater(read, "read one by one")
	}
	if len(allIdx) > maxCheckpoints {
		s.mergeLater(allIdx)
	}
	return nil
}

// minCheckpointRead: a refresh that read this many pack manifests one by one
// checkpoints them, so the next cold node does not (the node that wrote them may
// have stopped before checkpointing its last packs).
const minCheckpointRead = 16

// maxCheckpoints: more checkpoint tags than this are merged into one, so a cold
// index costs a handful of reads.
const maxCheckpoints = 8

// mergeLater writes one checkpoint of every pack this node knows, then deletes the
// checkpoints among tags that it has read (their packs are in the new one). Best
// effort, in the background; nodes merging at once leave overlapping checkpoints,
// which is harmless.
func (s *Store) mergeLater(tags []string) {
	s.mu.Lock()
	if s.merging {
		s.mu.Unlock()
		return
	}
	s.merging = true
	var packs []*pack
	for _, p := range s.packs {
		packs = append(packs, p.pack)
	}
	var old []string
	for _, t := range tags {
		if s.checkpoints[t] {
			old = append(old, t)
		}
	}
	s.mu.Unlock()
	s.bgWG.Add(1)
	go func() {
		defer s.bgWG.Done()
		defer func() {
			s.mu.Lock()
			s.merging = false
			s.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), s.o.Timeout)
		defer cancel()
		tag, err := s.writeCheckpoint(ctx, packs)
		if err != nil {
			s.log.Warn("index-merge-failed", "err", err)
			return
		}
		s.mu.Lock()
		s.checkpoints[tag] = true
		s.mu.Unlock()
		for _, t := range old {
			if t == tag {
				continue
			}
			md, err := s.c.manifestDigest(ctx, t)
			if err == nil {
				err = s.c.deleteManifest(ctx, md)
			}
			if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				s.log.Warn("index-merge-delete-failed", "tag", t, "err", err)
			}
		}
		s.log.Debug("index-merged", "tag", tag, "packs", len(packs), "replaced", len(old))
	}()
}

// Wait checkpoints the packs this node uploaded and not yet checkpointed, and
// waits for background work (index checkpoints) to finish.
func (s *Store) Wait() {
	s.checkpointRest()
	s.bgWG.Wait()
}

// Close is Wait, bounded to closeWait: slackerd calls it when it stops, so that
// the last packs it wrote are checkpointed for the nodes that read them next (a
// registry that is away does not hold the shutdown). The store stays usable.
func (s *Store) Close() error {
	done := make(chan struct{})
	go func() { s.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(closeWait):
		return fmt.Errorf("close %s: index checkpoints still running after %v", s, closeWait)
	}
}

const closeWait = 15 * time.Second

// locate finds d, refreshing the index on a miss (and, when stat is set, when the
// index is older than MaxAge).
func (s *Store) locate(ctx context.Context, d digest.Digest, stat bool) (location, error) {
	t := time.Now()
	if l, ok := s.lookup(d); ok {
		if !stat || s.freshWithin(s.o.MaxAge) {
			return l, nil
		}
	}
	if err := s.refreshSince(ctx, t); err != nil {
		return location{}, err
	}
	if l, ok := s.lookup(d); ok {
		return l, nil
	}
	return location{}, fmt.Errorf("%s: object %w", d, errdefs.ErrNotFound)
}

func (s *Store) freshWithin(age time.Duration) bool {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return time.Since(s.fresh) <= age
}

// --- reads -----------------------------------------------------------------

func (s *Store) Get(ctx context.Context, d digest.Digest) (io.ReadCloser, error) {
	if err := store.CheckDigest(d); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", d, err)
	}
	for attempt := 0; ; attempt++ {
		l, err := s.locate(ctx, d, false)
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", d, err)
		}
		if l.size == 0 {
			return io.NopCloser(store.VerifyingReader(bytes.NewReader(nil), d, 0)), nil
		}
		if l.enc != store.EncodingRaw {
			// An encoded object is read whole, decoded and verified before its first
			// byte is handed out (it is at most store.MaxEncodedObject).
			b, err := s.readSpan(ctx, l.blob, l.off, l.stored)
			if errors.Is(err, errdefs.ErrNotFound) && attempt == 0 {
				s.dropPack(l.blob)
				continue
			}
			if err == nil {
				b, err = store.DecodeObject(d, l.size, l.enc, b)
			}
			if err != nil {
				return nil, fmt.Errorf("get %s: %w", d, err)
			}
			return store.NewInMemory(b), nil
		}
		cctx, cancel := s.bound(ctx)
		rc, err := s.c.readRange(cctx, l.blob, l.off, l.size)
		if errors.Is(err, errdefs.ErrNotFound) && attempt == 0 {
			// The pack went away (repacked by a Delete on some node): look again.
			cancel()
			s.dropPack(l.blob)
			continue
		}
		if err != nil {
			cancel()
			return nil, fmt.Errorf("get %s: %w", d, err)
		}
		return store.VerifyingBody(rc, d, l.size, func(err error) error { return s.c.mapErr(ctx, "read", err) }, cancel), nil
	}
}

func (s *Store) GetRange(ctx context.Context, d digest.Digest, off, length int64) ([]byte, error) {
	// An object is the unit of verification: read it whole (one ranged request
	// into its pack), check it, then cut.
	return store.ReadRange(ctx, s, d, off, length)
}

func (s *Store) Stat(ctx context.Context, d digest.Digest) (store.Info, error) {
	if err := store.CheckDigest(d); err != nil {
		return store.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.Info{}, fmt.Errorf("stat %s: %w", d, err)
	}
	l, err := s.locate(ctx, d, true)
	if err != nil {
		return store.Info{}, fmt.Errorf("stat %s: %w", d, err)
	}
	return store.Info{Digest: d, Size: l.size, Stored: l.stored, ModTime: l.created}, nil
}

func (s *Store) List(ctx context.Context, fn func(store.Info) error) error {
	if err := s.refreshSince(ctx, time.Now()); err != nil {
		return fmt.Errorf("list: %w", err)
	}
	s.mu.Lock()
	infos := make([]store.Info, 0, len(s.where))
	for d, ls := range s.where {
		i := store.Info{Digest: d, Size: ls[0].size, Stored: ls[0].stored, ModTime: ls[0].created}
		for _, l := range ls[1:] {
			if l.created.Before(i.ModTime) {
				i.ModTime = l.created
			}
		}
		infos = append(infos, i)
	}
	s.mu.Unlock()
	for _, i := range infos {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("list: %w", err)
		}
		if err := fn(i); err != nil {
			return err
		}
	}
	return nil
}

// GetBatch reads whole objects, several per ranged request where they lie close
// together in one pack (store.BatchGetter).
func (s *Store) GetBatch(ctx context.Context, ds []digest.Digest, fn func(d digest.Digest, data []byte, err error)) error {
	var mu sync.Mutex
	report := func(d digest.Digest, b []byte, err error) {
		mu.Lock()
		defer mu.Unlock()
		fn(d, b, err)
	}
	type want struct {
		d digest.Digest
		l location
	}
	var wants []want
	var missing []digest.Digest
	seen := map[digest.Digest]bool{}
	for _, d := range ds {
		if seen[d] {
			continue
		}
		seen[d] = true
		if err := store.CheckDigest(d); err != nil {
			report(d, nil, err)
			continue
		}
		if l, ok := s.lookup(d); ok {
			wants = append(wants, want{d, l})
		} else {
			missing = append(missing, d)
		}
	}
	if len(missing) > 0 {
		err := s.refreshSince(ctx, time.Now())
		for _, d := range missing {
			l, ok := s.lookup(d)
			switch {
			case err != nil:
				report(d, nil, fmt.Errorf("get %s: %w", d, err))
			case !ok:
				report(d, nil, fmt.Errorf("get %s: object %w", d, errdefs.ErrNotFound))
			default:
				wants = append(wants, want{d, l})
			}
		}
	}
	// Ranges: per pack, in blob order, merging neighbours.
	slices.SortFunc(wants, func(a, b want) int {
		if c := cmpDigest(a.l.blob, b.l.blob); c != 0 {
			return c
		}
		return int(a.l.off - b.l.off)
	})
	type span struct {
		blob       digest.Digest
		start, end int64
		objs       []want
	}
	var spans []*span
	for _, w := range wants {
		if n := len(spans); n > 0 {
			sp := spans[n-1]
			end := max(sp.end, w.l.off+w.l.stored)
			if sp.blob == w.l.blob && w.l.off-sp.end <= s.o.RangeGap && end-sp.start <= s.o.MaxRange {
				sp.end, sp.objs = end, append(sp.objs, w)
				continue
			}
		}
		spans = append(spans, &span{blob: w.l.blob, start: w.l.off, end: w.l.off + w.l.stored, objs: []want{w}})
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for _, sp := range spans {
		g.Go(func() error {
			buf, err := s.readSpan(gctx, sp.blob, sp.start, sp.end-sp.start)
			if errors.Is(err, errdefs.ErrNotFound) {
				// The pack went away: read each object on its own, which looks again.
				s.dropPack(sp.blob)
				for _, w := range sp.objs {
					b, err := store.ReadAllSized(gctx, s, w.d, w.l.size)
					report(w.d, b, err)
				}
				return nil
			}
			for _, w := range sp.objs {
				if err != nil {
					report(w.d, nil, fmt.Errorf("get %s: %w", w.d, err))
					continue
				}
				from, to := w.l.off-sp.start, w.l.off-sp.start+w.l.stored
				b := buf[from:to:to]
				if len(sp.objs) > 1 && w.l.enc == store.EncodingRaw {
					// Its own copy: a caller that keeps it (the cache) keeps no
					// neighbours and gaps it does not count.
					b = append([]byte(nil), b...)
				}
				b, verr := store.DecodeObject(w.d, w.l.size, w.l.enc, b)
				if verr != nil {
					report(w.d, nil, fmt.Errorf("get %s: %w", w.d, verr))
					continue
				}
				report(w.d, b, nil)
			}
			return nil
		})
	}
	g.Wait()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("get batch: %w", err)
	}
	return nil
}

func cmpDigest(a, b digest.Digest) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// readSpan reads n bytes of blob at off into memory.
func (s *Store) readSpan(ctx context.Context, blob digest.Digest, off, n int64) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	cctx, cancel := s.bound(ctx)
	defer cancel()
	rc, err := s.c.readRange(cctx, blob, off, n)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	buf := make([]byte, n)
	if _, err := io.ReadFull(rc, buf); err != nil {
		return nil, s.c.mapErr(ctx, fmt.Sprintf("read blob %s [%d, +%d)", blob, off, n), err)
	}
	return buf, nil
}

// --- writes ----------------------------------------------------------------

func (s *Store) Put(ctx context.Context, d digest.Digest, size int64, r io.Reader) error {
	if err := store.CheckDigest(d); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("put %s: negative size %d: %w", d, size, errdefs.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %s: %w", d, err)
	}
	if l, ok := s.lookup(d); ok && l.size == size && s.freshWithin(s.o.MaxAge) {
		return nil // stored already (and not deleted as far as a recent listing knows)
	}
	if size > s.o.BufferLimit {
		return s.putStream(ctx, d, size, r)
	}
	// Read and verify first: nothing that fails its digest joins a pack.
	var buf bytes.Buffer
	buf.Grow(int(size) + 1)
	if _, err := buf.ReadFrom(io.LimitReader(store.VerifyingReader(r, d, size), size+1)); err != nil {
		return fmt.Errorf("put %s: %w", d, err)
	}
	o := pendingObject{d: d, data: buf.Bytes(), size: size}
	if s.o.Compress {
		o.data, o.enc = store.EncodeObject(o.data)
	}
	b := s.join(o)
	select {
	case <-b.done:
		if b.err != nil {
			return fmt.Errorf("put %s: %w", d, b.err)
		}
		return nil
	case <-ctx.Done():
		// The pack may still be stored; this Put just does not say so.
		return fmt.Errorf("put %s: %w", d, ctx.Err())
	}
}

// putStream stores an object too big to hold in memory as a pack of its own,
// streamed: the pack blob is the object, so its digest is known before the bytes.
func (s *Store) putStream(ctx context.Context, d digest.Digest, size int64, r io.Reader) error {
	cctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.ensureConfig(cctx); err != nil {
		return fmt.Errorf("put %s: %w", d, err)
	}
	if err := s.c.uploadBlobStream(cctx, d, size, store.VerifyingReader(r, d, size)); err != nil {
		return fmt.Errorf("put %s: %w", d, err)
	}
	created := time.Now()
	m, err := encodeManifest(d, []entry{rawEntry(d, 0, size)}, created)
	if err != nil {
		return fmt.Errorf("put %s: %w", d, err)
	}
	if err := s.c.putManifest(cctx, packTag(d), m); err != nil {
		return fmt.Errorf("put %s: %w", d, err)
	}
	p := &pack{blob: d, size: size, entries: []entry{rawEntry(d, 0, size)}, created: created.UTC().Truncate(time.Second), manifest: digest.FromBytes(m)}
	s.addPack(p)
	s.ownPack(p)
	return nil
}

// batch is a pack being filled, then uploaded; its Puts wait for done.
type batch struct {
	objs  []pendingObject
	bytes int64
	done  chan struct{}
	err   error
}

// pendingObject is an object on its way into a pack: data is its stored form
// (encoded with enc), size its plain size.
type pendingObject struct {
	d    digest.Digest
	data []byte
	size int64
	enc  string
}

// join adds an object to the pack being filled (group commit: a pack uploads as
// soon as no other is uploading, or when full; Puts arriving meanwhile fill the
// next one). Objects of SoloSize or more get a pack of their own.
func (s *Store) join(o pendingObject) *batch {
	s.bmu.Lock()
	defer s.bmu.Unlock()
	d := o.d
	if b := s.pending[d]; b != nil {
		return b // the same object is on its way already
	}
	size := int64(len(o.data))
	if size >= s.o.SoloSize {
		b := &batch{objs: []pendingObject{o}, bytes: size, done: make(chan struct{})}
		s.pending[d] = b
		s.ready = append(s.ready, b)
		s.kickLocked()
		return b
	}
	if s.open != nil && s.open.bytes+size > s.o.PackSize {
		s.ready = append(s.ready, s.open)
		s.open = nil
	}
	if s.open == nil {
		s.open = &batch{done: make(chan struct{})}
	}
	b := s.open
	b.objs = append(b.objs, o)
	b.bytes += size
	s.pending[d] = b
	if b.bytes >= s.o.PackSize {
		s.ready = append(s.ready, b)
		s.open = nil
	}
	s.kickLocked()
	return b
}

func (s *Store) kickLocked() {
	for s.inflight < s.o.MaxFlushes && len(s.ready) > 0 {
		b := s.ready[0]
		s.ready = s.ready[1:]
		s.inflight++
		go s.flush(b)
	}
	if s.inflight == 0 && s.open != nil {
		b := s.open
		s.open = nil
		s.inflight++
		go s.flush(b)
	}
}

func (s *Store) flush(b *batch) {
	err := s.uploadPack(b.objs)
	s.bmu.Lock()
	for _, o := range b.objs {
		if s.pending[o.d] == b {
			delete(s.pending, o.d)
		}
	}
	s.inflight--
	s.kickLocked()
	s.bmu.Unlock()
	b.err = err
	close(b.done)
}

// uploadPack uploads objs as one pack (blob, then manifest) and adds it to the
// index. Transient failures are retried a few times: the bytes are in memory.
func (s *Store) uploadPack(objs []pendingObject) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.o.Timeout)
	defer cancel()
	var blob []byte
	entries := make([]entry, len(objs))
	var off int64
	for i, o := range objs {
		entries[i] = entry{d: o.d, off: off, size: o.size, stored: int64(len(o.data)), enc: o.enc}
		off += int64(len(o.data))
	}
	if len(objs) == 1 {
		blob = objs[0].data
	} else {
		blob = make([]byte, 0, off)
		for _, o := range objs {
			blob = append(blob, o.data...)
		}
	}
	pd := digest.FromBytes(blob)
	created := time.Now().UTC().Truncate(time.Second)
	m, err := encodeManifest(pd, entries, created)
	if err != nil {
		return err
	}
	err = s.publish(ctx, pd, blob, m, len(objs) == 1)
	if err != nil {
		return fmt.Errorf("upload pack %s of %d objects: %w", pd, len(objs), err)
	}
	p := &pack{blob: pd, size: off, entries: entries, created: created, manifest: digest.FromBytes(m)}
	s.addPack(p)
	s.ownPack(p)
	return nil
}

// publish makes a pack visible: the blob first, then the manifest that names it,
// so a listed pack always has its data.
func (s *Store) publish(ctx context.Context, pd digest.Digest, blob, manifest []byte, solo bool) error {
	if err := s.ensureConfig(ctx); err != nil {
		return err
	}
	exists := false
	if solo { // an object may well be stored already as a pack of its own
		var err error
		if exists, err = s.c.headBlob(ctx, pd); err != nil {
			return err
		}
	}
	if !exists {
		if err := s.c.uploadBlob(ctx, pd, blob); err != nil {
			return err
		}
	}
	if err := s.c.putManifest(ctx, packTag(pd), manifest); err != nil {
		s.bmu.Lock()
		s.cfgReady = false // in case the config blob went away
		s.bmu.Unlock()
		return err
	}
	return nil
}

// ensureConfig uploads the empty config blob every pack manifest names, once.
func (s *Store) ensureConfig(ctx context.Context) error {
	s.bmu.Lock()
	ready := s.cfgReady
	s.bmu.Unlock()
	if ready {
		return nil
	}
	ok, err := s.c.headBlob(ctx, emptyDigest)
	if err != nil {
		return err
	}
	if !ok {
		if err := s.c.uploadBlob(ctx, emptyDigest, emptyJSON); err != nil {
			return err
		}
	}
	s.bmu.Lock()
	s.cfgReady = true
	s.bmu.Unlock()
	return nil
}

// Delete removes d: every pack holding it is replaced by a pack of its other
// objects (read back and verified), then deleted (manifest, then blob).
func (s *Store) Delete(ctx context.Context, d digest.Digest) error {
	if err := store.CheckDigest(d); err != nil {
		return err
	}
	if err := s.refreshSince(ctx, time.Now()); err != nil {
		return fmt.Errorf("delete %s: %w", d, err)
	}
	s.mu.Lock()
	var holders []*pack
	for _, l := range s.where[d] {
		if p := s.packs[l.blob]; p != nil {
			holders = append(holders, p.pack)
		}
	}
	s.mu.Unlock()
	if len(holders) == 0 {
		return fmt.Errorf("delete %s: object %w", d, errdefs.ErrNotFound)
	}
	for _, p := range holders {
		if err := s.repackWithout(ctx, p, d); err != nil {
			return fmt.Errorf("delete %s: %w", d, err)
		}
	}
	return nil
}

func (s *Store) repackWithout(ctx context.Context, p *pack, d digest.Digest) error {
	var rest []entry
	for _, e := range p.entries {
		if e.d != d {
			rest = append(rest, e)
		}
	}
	if len(rest) > 0 {
		buf, err := s.readSpan(ctx, p.blob, 0, p.size)
		if err != nil {
			return fmt.Errorf("read pack %s to repack it: %w", p.blob, err)
		}
		var objs []pendingObject
		seen := map[digest.Digest]bool{}
		for _, e := range rest {
			b := buf[e.off : e.off+e.stored]
			if _, err := store.DecodeObject(e.d, e.size, e.enc, b); err != nil {
				return fmt.Errorf("pack %s holds a damaged object; not repacking it: %w", p.blob, err)
			}
			if !seen[e.d] {
				seen[e.d] = true
				objs = append(objs, pendingObject{d: e.d, data: b, size: e.size, enc: e.enc})
			}
		}
		if err := s.uploadPack(objs); err != nil {
			return err
		}
	}
	cctx, cancel := s.bound(ctx)
	defer cancel()
	md, err := s.c.manifestDigest(cctx, packTag(p.blob))
	if err == nil {
		err = s.c.deleteManifest(cctx, md)
	}
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("delete pack %s: %w", p.blob, err)
	}
	s.dropPack(p.blob)
	if p.blob != emptyDigest { // the config every manifest names
		if err := s.c.deleteBlob(cctx, p.blob); err != nil {
			return fmt.Errorf("delete pack blob %s: %w", p.blob, err)
		}
	}
	return nil
}
