package snapshotter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/mount"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/snapshots"
	"github.com/containerd/containerd/snapshots/testsuite"
	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/node"
	"github.com/slacker-dev/slacker/internal/snapshotter"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/testenv"
)

// TestContainerdSuite runs containerd's own snapshotter test suite against the
// Slacker snapshotter on a real node (FUSE, loop devices, ext4), in each container
// root mode. Its tests run in parallel, each with its own snapshotter on the shared
// node. The suite is told that shared roots are "overlayfs": that name makes it
// expect overlayfs's rule for renaming a directory of a lower layer (EXDEV, which
// programs answer by copying), the rule of containerd's own overlay snapshotter and
// Docker's overlay2 too; everything else it checks alike.
func TestContainerdSuite(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	var seq atomic.Int64
	for name, mode := range map[string]node.RootMode{"overlayfs": node.RootShared, "slacker-block": node.RootBlock} {
		testsuite.SnapshotterSuite(t, name, func(ctx context.Context, root string) (snapshots.Snapshotter, func() error, error) {
			prefix := fmt.Sprintf("ts%d-", seq.Add(1))
			sn, err := snapshotter.New(d.Node, snapshotter.Options{Dir: root, VolumePrefix: prefix, RootMode: mode})
			if err != nil {
				return nil, nil, err
			}
			return sn, func() error {
				sn.Close()
				return deleteVolumes(d.Node, prefix)
			}, nil
		})
	}
}

func deleteVolumes(n *node.Node, prefix string) error {
	var errs []error
	for _, v := range n.Volumes() {
		if strings.HasPrefix(v.ID, prefix) {
			if err := n.DeleteVolume(context.Background(), v.ID); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// logBuffer collects JSON log lines for checks on event names.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(event string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), `"msg":"`+event+`"`)
}

type fixture struct {
	t    *testing.T
	d    *testenv.Daemon
	sn   *snapshotter.Snapshotter
	dir  string
	logs *logBuffer
	ctx  context.Context
}

func newFixture(t *testing.T) *fixture {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	f := &fixture{t: t, d: d, dir: t.TempDir(), logs: &logBuffer{},
		ctx: namespaces.WithNamespace(context.Background(), "test")}
	f.open()
	t.Cleanup(func() {
		f.sn.Close()
		if err := deleteVolumes(d.Node, "ctrd-"); err != nil {
			t.Error(err)
		}
	})
	return f
}

func (f *fixture) open() {
	f.t.Helper()
	var err error
	f.sn, err = snapshotter.New(f.d.Node, snapshotter.Options{Dir: f.dir,
		Logger: slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		f.t.Fatal(err)
	}
}

// slackerSnapshot makes a Slacker snapshot holding files, as `slacker convert` would.
func (f *fixture) slackerSnapshot(files map[string]string) digest.Digest {
	f.t.Helper()
	n := f.d.Node
	blank, err := n.MakeFilesystem(f.ctx, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	v, err := n.CreateVolume(f.ctx, node.CreateOptions{ID: "img", Snapshot: blank.ID})
	if err != nil {
		f.t.Fatal(err)
	}
	if v, err = n.MountVolume(f.ctx, "img", false); err != nil {
		f.t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(v.Mountpoint, name), []byte(content), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := n.UnmountVolume(f.ctx, "img"); err != nil {
		f.t.Fatal(err)
	}
	res, err := n.SnapshotVolume(f.ctx, "img", node.SnapshotOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := n.DeleteVolume(f.ctx, "img"); err != nil {
		f.t.Fatal(err)
	}
	return res.ID
}

// withMount mounts ms on a temporary directory for fn.
func withMount(t *testing.T, ms []mount.Mount, fn func(root string)) {
	t.Helper()
	dir := t.TempDir()
	if err := mount.All(ms, dir); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := mount.UnmountAll(dir, 0); err != nil {
			t.Error(err)
		}
	}()
	fn(dir)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRemoteSnapshot is containerd's remote-snapshot flow for a Slacker layer:
// Prepare with the chain ID and the Slacker label returns ErrAlreadyExists and
// leaves a committed snapshot that containerd's metadata layer finds with its Walk
// filter; a container prepared from it sees the image's files; and the snapshots
// survive a restart of the snapshotter.
func TestRemoteSnapshot(t *testing.T) {
	f := newFixture(t)
	snap := f.slackerSnapshot(map[string]string{"hello": "from slacker\n"})
	chain := digest.FromString("a chain ID").String()
	labels := map[string]string{
		labels.SnapshotRef:      chain,
		labels.LayerSnapshot:    snap.String(),
		"containerd.io/gc.root": "x",
	}
	for i := range 2 { // a second pull of the same image finds it
		_, err := f.sn.Prepare(f.ctx, fmt.Sprintf("default/%d/extract-%s", i, chain), "", snapshots.WithLabels(labels))
		if !errdefs.IsAlreadyExists(err) {
			t.Fatalf("prepare %d of a Slacker layer: %v, want ErrAlreadyExists", i, err)
		}
	}
	if got := f.logs.count("remote-snapshot-prepared"); got != 2 {
		t.Fatalf("remote-snapshot-prepared logged %d times, want 2", got)
	}
	var found []snapshots.Info
	filter := fmt.Sprintf(`labels."containerd.io/snapshot.ref"==%s,parent==""`, chain)
	if err := f.sn.Walk(f.ctx, func(_ context.Context, i snapshots.Info) error {
		found = append(found, i)
		return nil
	}, filter); err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Name != chain || found[0].Kind != snapshots.KindCommitted {
		t.Fatalf("walk %s: %+v", filter, found)
	}
	if u, err := f.sn.Usage(f.ctx, chain); err != nil || u.Size != 0 {
		t.Fatalf("usage of a lazy snapshot: %+v %v", u, err)
	}

	// Restart the snapshotter: metadata and records are durable.
	f.sn.Close()
	f.open()
	ms, err := f.sn.Prepare(f.ctx, "container", chain)
	if err != nil {
		t.Fatal(err)
	}
	withMount(t, ms, func(root string) {
		if got := readFile(t, filepath.Join(root, "hello")); got != "from slacker\n" {
			t.Fatalf("container sees %q", got)
		}
		if err := os.WriteFile(filepath.Join(root, "new"), []byte("written"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	if u, err := f.sn.Usage(f.ctx, "container"); err != nil || u.Size == 0 {
		t.Fatalf("usage of a written container: %+v %v", u, err)
	}
	// A containerd commit makes a Slacker snapshot of the container.
	if err := f.sn.Commit(f.ctx, "committed", "container"); err != nil {
		t.Fatal(err)
	}
	ms, err = f.sn.View(f.ctx, "view", "committed")
	if err != nil {
		t.Fatal(err)
	}
	withMount(t, ms, func(root string) {
		if got := readFile(t, filepath.Join(root, "new")); got != "written" {
			t.Fatalf("view of the commit sees %q", got)
		}
		if err := os.WriteFile(filepath.Join(root, "x"), nil, 0o644); err == nil {
			t.Fatal("a view is writable")
		}
	})
	for _, k := range []string{"view", "committed", chain} {
		if err := f.sn.Remove(f.ctx, k); err != nil {
			t.Fatalf("remove %s: %v", k, err)
		}
	}
	for _, v := range f.d.Node.Volumes() {
		if strings.HasPrefix(v.ID, "ctrd-") && !strings.HasPrefix(v.ID, "ctrd-base") {
			t.Errorf("volume %s left after every snapshot was removed", v.ID)
		}
	}
}

// TestRemoteSnapshotErrors: a Slacker label that names no snapshot in the store, or
// is not a digest, fails the Prepare with advice; nothing is recorded.
func TestRemoteSnapshotErrors(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		snap string
		want func(error) bool
		msg  string
	}{
		{digest.FromString("nothing").String(), errdefs.IsNotFound, "not in this node's store"},
		{"not-a-digest", errdefs.IsInvalidArgument, "dev.slacker.snapshot"},
	} {
		_, err := f.sn.Prepare(f.ctx, "extract-"+tc.snap, "", snapshots.WithLabels(map[string]string{
			labels.SnapshotRef:   "sha256:" + strings.Repeat("a", 64),
			labels.LayerSnapshot: tc.snap,
		}))
		if err == nil || !tc.want(err) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("snapshot %q: %v", tc.snap, err)
		}
	}
	n := 0
	f.sn.Walk(f.ctx, func(context.Context, snapshots.Info) error { n++; return nil })
	if n != 0 {
		t.Fatalf("%d snapshots recorded after failed prepares", n)
	}
}

// TestNotLazyLogged: an ordinary layer unpack is logged as not lazy, once per image
// when containerd names the image, and the layer is applied into a clone.
func TestNotLazyLogged(t *testing.T) {
	f := newFixture(t)
	for i, img := range []string{"reg/a:1", "reg/a:1", "reg/b:1"} {
		chain := digest.FromString(fmt.Sprint(i)).String()
		key := "extract-" + chain
		ms, err := f.sn.Prepare(f.ctx, key, "", snapshots.WithLabels(map[string]string{
			labels.SnapshotRef: chain, labels.CRIImageRef: img}))
		if err != nil {
			t.Fatal(err)
		}
		withMount(t, ms, func(root string) {
			if _, err := os.Stat(filepath.Join(root, "lost+found")); !os.IsNotExist(err) {
				t.Errorf("a first layer starts with lost+found (%v)", err)
			}
			os.WriteFile(filepath.Join(root, "f"), []byte(img), 0o644)
		})
		if err := f.sn.Commit(f.ctx, chain, key); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.logs.count("snapshot-not-lazy"); got != 2 {
		t.Fatalf("snapshot-not-lazy logged %d times for 2 images, want 2", got)
	}
}

// TestCleanup removes volumes whose snapshots are gone (as after a crash between
// a volume's creation and its record) and keeps those in use.
func TestCleanup(t *testing.T) {
	f := newFixture(t)
	if _, err := f.sn.Prepare(f.ctx, "keep", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := f.d.Node.CreateVolume(f.ctx, node.CreateOptions{ID: "ctrd-999",
		Labels: map[string]string{labels.Kind: labels.KindContainerd}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.d.Node.CreateVolume(f.ctx, node.CreateOptions{ID: "other"}); err != nil {
		t.Fatal(err)
	}
	// A record being written (its temporary file, before the rename in the
	// transaction that commits its snapshot) is no garbage; a record of no
	// snapshot is.
	recs := filepath.Join(f.dir, "records")
	writing, stale := filepath.Join(recs, ".77.json.tmp-0123456789abcdef"), filepath.Join(recs, "78.json")
	for _, p := range []string{writing, stale} {
		if err := os.WriteFile(p, []byte(`{}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.sn.Cleanup(f.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(writing); err != nil {
		t.Errorf("cleanup removed a record being written: %v", err)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("cleanup kept the record of no snapshot")
	}
	have := map[string]bool{}
	for _, v := range f.d.Node.Volumes() {
		have[v.ID] = true
	}
	if have["ctrd-999"] || !have["other"] {
		t.Fatalf("after cleanup: %v", have)
	}
	if _, err := f.sn.Mounts(f.ctx, "keep"); err != nil {
		t.Fatalf("the active snapshot lost its volume: %v", err)
	}
	f.d.Node.DeleteVolume(f.ctx, "other")
}

func TestRootsListRecordsAndBase(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "records"), 0o700)
	a, b, c := digest.FromString("a"), digest.FromString("b"), digest.FromString("c")
	os.WriteFile(filepath.Join(dir, "records", "1.json"), []byte(`{"snapshot":"`+a.String()+`"}`), 0o600)
	os.WriteFile(filepath.Join(dir, "records", "2.json"), []byte(`{"snapshot":"`+b.String()+`","lazy":true}`), 0o600)
	os.WriteFile(filepath.Join(dir, "base.json"), []byte(`{"size":1,"snapshot":"`+c.String()+`"}`), 0o600)
	roots := func() ([]digest.Digest, error) {
		var out []digest.Digest
		for _, src := range snapshotter.Roots(dir) {
			ds, err := src(context.Background())
			if err != nil {
				return nil, err
			}
			out = append(out, ds...)
		}
		return out, nil
	}
	got, err := roots()
	if err != nil {
		t.Fatal(err)
	}
	want := map[digest.Digest]bool{a: true, b: true, c: true}
	if len(got) != len(want) {
		t.Fatalf("roots %v", got)
	}
	for _, d := range got {
		if !want[d] {
			t.Fatalf("unexpected root %s", d)
		}
	}
	os.WriteFile(filepath.Join(dir, "records", "3.json"), []byte(`garbage`), 0o600)
	if _, err := roots(); err == nil {
		t.Fatal("an unreadable record did not fail the roots")
	}
}

// The blank base first layers start from is recorded in the store: a second
// node's snapshotter (here another one on the same store, with a state of its
// own) finds it there instead of making its own, so that both start first layers
// from the same snapshot. A record of a base the store no longer has is passed
// over: a new base is made, and recorded instead.
func TestBlankBaseSharedThroughTheStore(t *testing.T) {
	f := newFixture(t)
	f.sn.Warm(f.ctx)
	if n := f.logs.count("blank-base-made"); n != 1 {
		t.Fatalf("first snapshotter: blank-base-made %d times, want 1", n)
	}
	baseOf := func(dir string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, "base.json"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	second := func(prefix string, size int64) (string, *logBuffer) {
		t.Helper()
		dir, logs := t.TempDir(), &logBuffer{}
		sn, err := snapshotter.New(f.d.Node, snapshotter.Options{Dir: dir, VolumePrefix: prefix, Size: size,
			Logger: slog.New(slog.NewJSONHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer sn.Close()
		sn.Warm(f.ctx)
		return dir, logs
	}
	dir2, logs2 := second("ctrd2-", 0)
	if logs2.count("blank-base-found") != 1 || logs2.count("blank-base-made") != 0 {
		t.Fatalf("second snapshotter did not take the recorded base: %s", logs2.b.String())
	}
	if a, b := baseOf(f.dir), baseOf(dir2); a != b {
		t.Fatalf("bases differ: %s and %s", a, b)
	}
	// A node whose size is set to the default's value names the same record and
	// takes it: the record holds the filesystem's size, not the option's.
	dirSized, logsSized := second("ctrd4-", f.d.Node.DefaultSize())
	if logsSized.count("blank-base-found") != 1 || logsSized.count("blank-base-made") != 0 {
		t.Fatalf("a snapshotter sized at the default did not take the recorded base: %s", logsSized.b.String())
	}
	if a, b := baseOf(f.dir), baseOf(dirSized); a != b {
		t.Fatalf("bases differ: %s and %s", a, b)
	}

	refs := f.d.Node.Store().(store.Refs)
	var name string
	refs.ListRefs(f.ctx, "containerd/blank-base/", func(n string) error { name = n; return nil })
	if name == "" {
		t.Fatal("no blank base record in the store")
	}
	old, err := refs.GetRef(f.ctx, name)
	if err != nil || string(old) != baseOf(f.dir) {
		t.Fatalf("the record %q is not the base made: %v", old, err)
	}
	gone := digest.FromString("a base the store does not have")
	var wasBase struct {
		Snapshot digest.Digest `json:"snapshot"`
	}
	json.Unmarshal(old, &wasBase)
	if err := refs.PutRef(f.ctx, name, bytes.ReplaceAll(old, []byte(wasBase.Snapshot), []byte(gone))); err != nil {
		t.Fatal(err)
	}
	dir3, logs3 := second("ctrd3-", 0)
	if logs3.count("blank-base-missing") != 1 || logs3.count("blank-base-made") != 1 {
		t.Fatalf("third snapshotter: %s", logs3.b.String())
	}
	b, err := refs.GetRef(f.ctx, name)
	if err != nil || string(b) != baseOf(dir3) || strings.Contains(string(b), gone.String()) {
		t.Fatalf("the record was not replaced by the new base: %s, %v", b, err)
	}
	for _, p := range []string{"ctrd2-", "ctrd3-", "ctrd4-"} {
		if err := deleteVolumes(f.d.Node, p); err != nil {
			t.Error(err)
		}
	}
}
