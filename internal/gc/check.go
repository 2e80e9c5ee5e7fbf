package gc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/errgroup"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
)

// CheckOptions configure Check.
type CheckOptions struct {
	// Roots are the named snapshots to check (with the snapshots of live leases).
	Roots []Root
	// ReadData reads every object in the store and verifies its digest.
	ReadData bool
	// Parallel reads (8).
	Parallel int
	Logger   *slog.Logger
	// Progress, if set, is called as objects are read (ReadData).
	Progress func(done, total int)
}

// Problem is one thing wrong with the store.
type Problem struct {
	Kind   string        `json:"kind"` // missing, corrupt, size, malformed, lease
	Object digest.Digest `json:"object,omitempty"`
	From   string        `json:"from,omitempty"` // the chain of references that leads to it
	Detail string        `json:"detail,omitempty"`
}

func (p Problem) String() string {
	s := p.Kind
	if p.Object != "" {
		s += " " + p.Object.String()
	}
	if p.From != "" {
		s += " (" + p.From + ")"
	}
	if p.Detail != "" {
		s += ": " + p.Detail
	}
	return s
}

// CheckReport says what Check verified and what it found wrong.
type CheckReport struct {
	Roots     int           `json:"roots"`
	Snapshots int           `json:"snapshots"` // block maps verified and decoded
	Chunks    int           `json:"chunks"`    // distinct chunks referenced, all present
	Objects   int           `json:"objects"`   // in the store
	Read      int           `json:"objects_read,omitempty"`
	BytesRead int64         `json:"bytes_read,omitempty"`
	Problems  []Problem     `json:"problems,omitempty"`
	Took      time.Duration `json:"took"`
}

// OK reports whether nothing is wrong.
func (r *CheckReport) OK() bool { return len(r.Problems) == 0 }

// Check verifies every reference: each root (and each snapshot a live lease
// holds) is a block map in the store whose digest matches, that decodes, and whose
// chunks are all in the store with the sizes the map says. With ReadData it also
// reads every object in the store and verifies its digest. Problems are reported,
// not returned as errors; an error means the check itself could not run.
func Check(ctx context.Context, st store.Store, o CheckOptions) (*CheckReport, error) {
	start := time.Now()
	if o.Parallel <= 0 {
		o.Parallel = 8
	}
	rep := &CheckReport{}
	objs := map[digest.Digest]store.Info{}
	if err := st.List(ctx, func(i store.Info) error { objs[i.Digest] = i; return nil }); err != nil {
		return nil, fmt.Errorf("list the store: %w", err)
	}
	rep.Objects = len(objs)
	problem := func(p Problem) { rep.Problems = append(rep.Problems, p) }

	roots := append([]Root(nil), o.Roots...)
	if refs, err := Refs(st); err == nil {
		recs, err := ReadLeases(ctx, refs)
		if err != nil && !noRecords(err) {
			return nil, err
		}
		for _, r := range recs {
			if r.Err != nil {
				problem(Problem{Kind: "lease", From: r.Name, Detail: r.Err.Error()})
				continue
			}
			if !r.Lease.Live(time.Now(), time.Minute) {
				continue
			}
			for _, s := range r.Lease.Snapshots {
				roots = append(roots, Root{Snapshot: s, From: "lease of node " + r.Lease.Node})
			}
		}
	}
	rep.Roots = len(roots)
	checked := map[digest.Digest]bool{}
	chunks := map[digest.Digest]int64{}
	for _, r := range roots {
		if checked[r.Snapshot] {
			continue
		}
		checked[r.Snapshot] = true
		if err := store.CheckDigest(r.Snapshot); err != nil {
			problem(Problem{Kind: "malformed", From: r.From, Detail: err.Error()})
			continue
		}
		if _, ok := objs[r.Snapshot]; !ok {
			problem(Problem{Kind: "missing", Object: r.Snapshot, From: r.From, Detail: "the snapshot's block map is not in the store"})
			continue
		}
		b, err := store.ReadAll(ctx, st, r.Snapshot)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			problem(Problem{Kind: kindOf(err), Object: r.Snapshot, From: r.From, Detail: err.Error()})
			continue
		}
		m, err := blockmap.Decode(b)
		if err != nil {
			problem(Problem{Kind: "malformed", Object: r.Snapshot, From: r.From, Detail: err.Error()})
			continue
		}
		rep.Snapshots++
		from := r.From + " -> snapshot " + r.Snapshot.String()
		for _, c := range m.Chunks {
			if _, seen := chunks[c.Digest]; seen {
				continue
			}
			chunks[c.Digest] = c.Size
			info, ok := objs[c.Digest]
			if ok && info.Size != c.Size {
				// Asked once more, and kept: the data check below goes by it too.
				info.Size = exactSize(ctx, st, info)
				objs[c.Digest] = info
			}
			switch {
			case !ok:
				problem(Problem{Kind: "missing", Object: c.Digest, From: from, Detail: "a chunk the snapshot names is not in the store"})
			case info.Size != c.Size:
				problem(Problem{Kind: "size", Object: c.Digest, From: from,
					Detail: fmt.Sprintf("the store holds %d bytes, the map says %d", info.Size, c.Size)})
			default:
				rep.Chunks++
			}
		}
	}
	if o.ReadData {
		if err := readAll(ctx, st, objs, o, rep); err != nil {
			return nil, err
		}
	}
	sort.SliceStable(rep.Problems, func(i, j int) bool { return rep.Problems[i].Object < rep.Problems[j].Object })
	rep.Took = time.Since(start)
	return rep, nil
}

// exactSize is the size of a listed object, asked again with Stat when the listing
// may have given its stored size instead (S3 other than MinIO lists a compressed
// object so; see store.Info). The listed size if the store cannot say.
func exactSize(ctx context.Context, st store.Store, listed store.Info) int64 {
	if listed.Size != listed.StoredBytes() || listed.Stored == 0 {
		return listed.Size
	}
	info, err := st.Stat(ctx, listed.Digest)
	if err != nil {
		return listed.Size
	}
	return info.Size
}

func kindOf(err error) string {
	switch {
	case errors.Is(err, errdefs.ErrCorrupt):
		return "corrupt"
	case errors.Is(err, errdefs.ErrNotFound):
		return "missing"
	default:
		return "unreadable"
	}
}

// readAll reads every object, verifying digests and sizes.
func readAll(ctx context.Context, st store.Store, objs map[digest.Digest]store.Info, o CheckOptions, rep *CheckReport) error {
	ds := make([]digest.Digest, 0, len(objs))
	for d := range objs {
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	var mu sync.Mutex
	var done atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.Parallel)
	for _, d := range ds {
		g.Go(func() error {
			n, err := readOne(gctx, st, d)
			if gctx.Err() != nil {
				return gctx.Err()
			}
			mu.Lock()
			rep.Read++
			rep.BytesRead += n
			switch {
			case errors.Is(err, errdefs.ErrNotFound):
				// deleted since the listing
			case err != nil:
				rep.Problems = append(rep.Problems, Problem{Kind: kindOf(err), Object: d, Detail: err.Error()})
			case n != objs[d].Size && n != exactSize(gctx, st, objs[d]):
				rep.Problems = append(rep.Problems, Problem{Kind: "size", Object: d,
					Detail: fmt.Sprintf("read %d bytes, listed as %d", n, objs[d].Size)})
			}
			mu.Unlock()
			if o.Progress != nil {
				o.Progress(int(done.Add(1)), len(ds))
			}
			return nil
		})
	}
	return g.Wait()
}

func readOne(ctx context.Context, st store.Store, d digest.Digest) (int64, error) {
	rc, err := st.Get(ctx, d)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	return io.Copy(io.Discard, rc)
}
