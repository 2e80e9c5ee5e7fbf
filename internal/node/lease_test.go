package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/fetch"
	"github.com/slacker-dev/slacker/internal/gc"
	"github.com/slacker-dev/slacker/internal/store/faultstore"
	"github.com/slacker-dev/slacker/internal/store/local"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestUploadStalledAcrossCollection stalls a snapshot's upload half way (its next
// Put hangs, as a stopped process would), runs a garbage collection with no grace
// period, and lets the upload go on. With its lease alive the collector deletes
// none of its chunks; with its lease expired the collector deletes what was
// uploaded; either way the fence makes the upload check (and upload) its chunks
// again. In both cases the map it writes names only chunks the store has, and its
// data reads back.
func TestUploadStalledAcrossCollection(t *testing.T) {
	requirePrivileged(t)
	for _, tc := range []struct {
		name    string
		ttl     time.Duration
		deletes bool // the collection takes the chunks uploaded so far
	}{
		{"lease alive", time.Hour, false},
		{"lease expired", time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			st, err := local.Open(filepath.Join(dir, "store"))
			if err != nil {
				t.Fatal(err)
			}
			fs := faultstore.New(st)
			logs := &syncBuf{}
			n, err := Open(ctx, Config{Root: filepath.Join(dir, "node"), Store: fs, CacheBytes: 256 << 20,
				DefaultSize: 64 << 20, Fetch: fetch.Options{Attempt: time.Minute},
				Lease:  LeaseConfig{TTL: tc.ttl, Interval: time.Hour},
				Logger: slog.New(slog.NewJSONHandler(logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { n.Close(ctx) })
			v, err := n.CreateVolume(ctx, CreateOptions{ID: "v", Size: 64 << 20})
			if err != nil {
				t.Fatal(err)
			}
			data := make([]byte, 4<<20)
			rand.Read(data)
			f, err := os.OpenFile(v.File, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(data, 0); err != nil {
				t.Fatal(err)
			}
			f.Close()

			// The 6th upload hangs.
			const skip = 5
			remove := fs.Inject(faultstore.Fault{Ops: faultstore.OpPut, Hang: true, Skip: skip, Times: 1})
			type result struct {
				id  digest.Digest
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := n.SnapshotVolume(ctx, "v", SnapshotOptions{})
				if err != nil {
					done <- result{err: err}
					return
				}
				done <- result{id: res.ID}
			}()
			for fs.Calls(faultstore.OpPut) <= skip {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(5 * time.Millisecond) // the lease has expired, if it was to
			rep, err := gc.Collect(ctx, st, gc.Options{Grace: 0, Skew: -1})
			if err != nil {
				t.Fatal(err)
			}
			if tc.deletes != (rep.Deleted > 0) {
				t.Fatalf("the collection deleted %d objects (lease %s)", rep.Deleted, tc.name)
			}
			remove()
			r := <-done
			if r.err != nil {
				t.Fatalf("snapshot: %v", r.err)
			}
			// A collection ran during the upload: the fence makes it check its
			// chunks again, whatever the collection took.
			if !strings.Contains(logs.String(), "snapshot-rechecking-chunks") {
				t.Fatal("the upload did not check its chunks again after a collection")
			}
			// Everything the new map names is in the store, and reads back.
			id := r.id
			crep, err := gc.Check(ctx, st, gc.CheckOptions{Roots: []gc.Root{{Snapshot: id, From: "test"}}, ReadData: true})
			if err != nil || !crep.OK() {
				t.Fatalf("check of the snapshot written across a collection: %+v %v", crep, err)
			}
			n.Cache().Purge()
			c, err := n.CreateVolume(ctx, CreateOptions{ID: "c", Snapshot: id})
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(data))
			f, err = os.Open(c.File)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("the snapshot's data: %v", err)
			}
			// The lease lists both volumes' bases once refreshed.
			if err := n.lease.write(ctx); err != nil {
				t.Fatal(err)
			}
			b, err := st.GetRef(ctx, gc.LeaseName(n.lease.name))
			if err != nil {
				t.Fatal(err)
			}
			l, err := gc.DecodeLease(b)
			if err != nil || len(l.Snapshots) != 1 || l.Snapshots[0] != id || len(l.Uploads) != 0 {
				t.Fatalf("lease %+v %v", l, err)
			}
		})
	}
}
