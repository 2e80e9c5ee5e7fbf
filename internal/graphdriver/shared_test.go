package graphdriver

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/node"
	"github.com/slacker-dev/slacker/internal/store/local"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// overlayLower returns the lowerdir of the overlay mounted at target.
func overlayLower(t *testing.T, target string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == target {
			for _, o := range strings.Split(line, ",") {
				if l, ok := strings.CutPrefix(o, "lowerdir="); ok {
					return l
				}
			}
		}
	}
	t.Fatalf("no overlay mounted at %s", target)
	return ""
}

// imageRoots lists the node's read-only image mounts.
func imageRoots(n *node.Node) []node.VolumeInfo {
	var out []node.VolumeInfo
	for _, v := range n.Volumes() {
		if v.Labels[labels.Kind] == labels.KindImageRoot {
			out = append(out, v)
		}
	}
	return out
}

func applyLayer(t *testing.T, d *testDriver, id, parent string, tarball []byte) {
	t.Helper()
	ctx := context.Background()
	if err := d.Create(ctx, id, parent, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ApplyDiff(ctx, id, parent, bytes.NewReader(tarball)); err != nil {
		t.Fatal(err)
	}
}

// checkStack checks that container id's root is an overlay of its upper layer
// over its init layer's and the image's one read-only mount on the node.
func checkStack(t *testing.T, d *testDriver, id, root string) {
	t.Helper()
	irs := imageRoots(d.node)
	if len(irs) != 1 || irs[0].Mountpoint == "" {
		t.Fatalf("image roots %+v, want one, mounted", irs)
	}
	v, err := d.node.Volume(volumeID(id))
	if err != nil {
		t.Fatal(err)
	}
	iv, err := d.node.Volume(volumeID(id + "-init"))
	if err != nil {
		t.Fatal(err)
	}
	if v.Mode != node.RootShared || v.Parent != iv.ID || iv.Mode != node.RootShared || v.Image != irs[0].Base {
		t.Fatalf("%s: mode %q on %q of %s; init mode %q; want shared roots of %s", id, v.Mode, v.Parent, v.Image, iv.Mode, irs[0].Base)
	}
	if got, want := overlayLower(t, root), iv.Upper+":"+irs[0].Mountpoint; got != want {
		t.Fatalf("%s: lowerdir %q, want %q (its init layer's upper, then the image root)", id, got, want)
	}
}

// TestSharedRootsShareTheImage: the containers of one image, in the node's
// default mode, are overlays on their init layers over the node's one read-only
// mount of the image; a container asking for block gets a block clone beside
// them; storage options are checked; an init layer cannot go before its
// container; the image's mount goes with the last of its roots.
func TestSharedRootsShareTheImage(t *testing.T) {
	testutil.RequireOverlay(t)
	d := newDriver(t, false, "")
	ctx := context.Background()
	if d.node.RootMode() != node.RootShared {
		t.Fatalf("node's root mode %q", d.node.RootMode())
	}
	applyLayer(t, d, "l1", "", baseLayer(t))
	roots := map[string]string{}
	for _, id := range []string{"c1", "c2"} {
		roots[id] = container(t, d, id, "l1", "")
		checkStack(t, d, id, roots[id])
		m, err := d.Metadata(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := d.node.Volume(volumeID(id))
		if m["RootMode"] != "shared" || m["UpperDir"] != v.Upper || m["Mountpoint"] != roots[id] {
			t.Fatalf("metadata of %s: %v", id, m)
		}
	}
	if err := os.WriteFile(filepath.Join(roots["c1"], "etc/motd"), []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, filepath.Join(roots["c2"], "etc/motd")); got != "hello\n" {
		t.Fatalf("c2 sees c1's write: %q", got)
	}
	if _, err := os.Stat(filepath.Join(roots["c2"], ".dockerenv")); err != nil {
		t.Fatalf("c2 does not see its init layer: %v", err)
	}

	// --storage-opt root-mode=block: a block clone of its own, beside them.
	rootB := container(t, d, "b", "l1", node.RootBlock)
	roots["b"] = rootB
	vb, err := d.node.Volume(volumeID("b"))
	if err != nil {
		t.Fatal(err)
	}
	if vb.Mode != "" || vb.Device == "" || vb.Mountpoint != rootB || len(imageRoots(d.node)) != 1 {
		t.Fatalf("block container: %+v (image roots %d)", vb, len(imageRoots(d.node)))
	}
	if mustRead(t, filepath.Join(rootB, "etc/motd")) != "hello\n" {
		t.Fatal("the block container sees another's write")
	}
	if m, _ := d.Metadata(ctx, "b"); m["RootMode"] != "block" {
		t.Fatalf("metadata of b: %v", m)
	}

	for _, c := range []struct {
		rw   bool
		opts map[string]string
		want error
		msg  string
	}{
		{true, map[string]string{"root-mode": "bogus"}, errdefs.ErrInvalid, "root-mode=shared"},
		{true, map[string]string{"root-mode": ""}, errdefs.ErrInvalid, "root-mode=block"},
		{true, map[string]string{"size": "1G"}, errdefs.ErrUnsupported, "takes only root-mode"},
		{true, map[string]string{"root-mode": "block", "size": "1G"}, errdefs.ErrUnsupported, "[size=1G]"},
		{false, map[string]string{"root-mode": "shared"}, errdefs.ErrUnsupported, "an image layer takes none"},
	} {
		err := d.Create(ctx, "x", "l1", c.rw, c.opts)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Create(rw %v, %v): %v, want %v saying %q", c.rw, c.opts, err, c.want, c.msg)
		}
		if d.Exists("x") || d.hasVolume("x") {
			t.Fatalf("a refused Create left layer x")
		}
	}
	if _, err := d.ApplyDiff(ctx, "c1", "c1-init", bytes.NewReader(baseLayer(t))); !errors.Is(err, errdefs.ErrUnsupported) {
		t.Fatalf("ApplyDiff to a shared container layer: %v", err)
	}
	if err := d.Remove(ctx, "c1-init"); !errors.Is(err, errdefs.ErrBusy) || !d.Exists("c1-init") {
		t.Fatalf("removing an init layer under its container: %v (exists %v)", err, d.Exists("c1-init"))
	}

	// docker rm: the container, then its init layer.
	for _, id := range []string{"c1", "c2", "b"} {
		if err := d.Put(ctx, id); err != nil {
			t.Fatal(err)
		}
		if isMounted(t, roots[id]) {
			t.Fatalf("%s still mounted after its Put", id)
		}
	}
	if v, err := d.node.Volume(volumeID("c1")); err != nil || v.Stats.DeltaBytes != 4 {
		t.Fatalf("c1's root after Put: %+v %v (its changes are kept)", v, err)
	}
	for i, id := range []string{"c1", "c1-init", "c2", "c2-init", "b", "b-init"} {
		if err := d.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
		if i == 1 && len(imageRoots(d.node)) != 1 {
			t.Fatal("the image root went while c2 still stands on it")
		}
	}
	if irs := imageRoots(d.node); len(irs) != 0 {
		t.Fatalf("image roots left after the last container went: %+v", irs)
	}
	for _, v := range d.volumes() {
		if strings.HasPrefix(v, "docker-") {
			t.Errorf("volume %s left", v)
		}
	}
}

// TestSharedRootsAfterRestart: slackerd stops (or crashes) under running and
// stopped containers; when it starts again, their roots are back on one image
// mount, unmounted until Docker's Get, with their changes, and volumes no record
// names are gone, containers before the init layers they stand on.
func TestSharedRootsAfterRestart(t *testing.T) {
	testenv.RequirePrivileged(t)
	testutil.RequireOverlay(t)
	ctx := context.Background()
	dir := t.TempDir()
	st, err := local.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	var d *testDriver
	start := func() {
		t.Helper()
		n, err := node.Open(ctx, node.Config{Root: filepath.Join(dir, "node"), Store: st, CacheBytes: 256 << 20,
			DefaultSize: 256 << 20})
		if err != nil {
			t.Fatal(err)
		}
		drv, err := Open(ctx, n, Options{Root: filepath.Join(dir, "graphdriver"), Store: "local:" + filepath.Join(dir, "store")})
		if err != nil {
			n.Close(ctx)
			t.Fatal(err)
		}
		d = &testDriver{Driver: drv, node: n}
	}
	start()
	t.Cleanup(func() {
		if err := d.node.Close(ctx); err != nil {
			t.Error(err)
		}
		testenv.CheckNoMounts(t, dir)
	})
	applyLayer(t, d, "l1", "", baseLayer(t))
	r1 := container(t, d, "c1", "l1", "") // running
	if err := os.WriteFile(filepath.Join(r1, "etc/motd"), []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(r1, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r1, "data/f"), []byte("f"), 0o600); err != nil {
		t.Fatal(err)
	}
	r2 := container(t, d, "c2", "l1", "") // stopped
	if err := os.Remove(filepath.Join(r2, "etc/issue")); err != nil {
		t.Fatal(err)
	}
	if err := d.Put(ctx, "c2"); err != nil {
		t.Fatal(err)
	}
	// What a crash between a node's volume and the driver's record leaves: a
	// container's root on its init layer's, no record naming either.
	img, _ := d.Metadata(ctx, "l1")
	for _, o := range []node.CreateOptions{{ID: "docker-x-init"}, {ID: "docker-x", Parent: "docker-x-init"}} {
		o.Snapshot, o.Mode, o.Labels = digest.Digest(img["Snapshot"]), node.RootShared, map[string]string{labels.Kind: labels.KindDocker}
		if _, err := d.node.CreateVolume(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	// slackerd goes, with no Put or Cleanup from Docker.
	if err := d.node.Close(ctx); err != nil {
		t.Fatal(err)
	}
	start()
	for _, id := range []string{"docker-x", "docker-x-init"} {
		if _, err := d.node.Volume(id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("orphan volume %s: %v", id, err)
		}
	}
	if isMounted(t, r1) {
		t.Fatal("a container's root was left mounted after the restart; Docker calls Get again")
	}
	r1, err = d.Get(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	checkStack(t, d, "c1", r1)
	if mustRead(t, filepath.Join(r1, "etc/motd")) != "one\n" || mustRead(t, filepath.Join(r1, "data/f")) != "f" {
		t.Fatal("c1 lost its changes")
	}
	cs, err := d.Changes(ctx, "c1", "c1-init")
	want := []Change{{"/data", ChangeAdd}, {"/data/f", ChangeAdd}, {"/etc/motd", ChangeModify}}
	if err != nil || !reflect.DeepEqual(cs, want) {
		t.Fatalf("changes of c1: %v %v, want %v", cs, err, want)
	}
	cs, err = d.Changes(ctx, "c2", "c2-init")
	want = []Change{{"/etc", ChangeModify}, {"/etc/issue", ChangeDelete}}
	if err != nil || !reflect.DeepEqual(cs, want) {
		t.Fatalf("changes of c2: %v %v, want %v", cs, err, want)
	}
	if err := d.Put(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c1", "c1-init", "c2", "c2-init", "l1"} {
		if err := d.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if vs := d.volumes(); len(vs) != 0 {
		t.Fatalf("volumes left: %v", vs)
	}
}

// TestUpperChanges: a shared root's changes, read from its upper layer, are told
// added or changed by looking below it as overlayfs does (whiteouts, opaque
// directories and files above directories hide what is under them), and a
// directory only copied up is not a change unless something was added or deleted
// in it.
func TestUpperChanges(t *testing.T) {
	testutil.RequireRoot(t) // whiteouts are device nodes; opaque marks, trusted xattrs
	dir := t.TempDir()
	image, initUp, upper := filepath.Join(dir, "image"), filepath.Join(dir, "init"), filepath.Join(dir, "upper")
	files := func(root string, names ...string) {
		for _, n := range names {
			p := filepath.Join(root, n)
			if strings.HasSuffix(n, "/") {
				if err := os.MkdirAll(p, 0o755); err != nil {
					t.Fatal(err)
				}
				continue
			}
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(n), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	whiteout := func(root, name string) {
		if err := unix.Mknod(filepath.Join(root, name), unix.S_IFCHR, 0); err != nil {
			t.Fatal(err)
		}
	}
	opaque := func(root, name string) {
		if err := unix.Setxattr(filepath.Join(root, name), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
			t.Fatal(err)
		}
	}
	files(image, "a/f1", "a/f2", "b/g", "c", "d/h", "e", "x/old", "x/new")
	files(initUp, "a/f1", "c/k", "d/")
	opaque(initUp, "a")   // the image's a/f2 is hidden
	whiteout(initUp, "b") // and all of b
	files(upper, "a/f1", "a/f2", "b/g", "c/k", "d/h", "x/new", "n/")
	opaque(upper, "x")   // x made again: x/new is new, whatever the image has
	whiteout(upper, "e") // e deleted
	// Directories copied up have the times of those they were copied from.
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, root := range []string{image, initUp, upper} {
		filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.IsDir() {
				err = os.Chtimes(p, when, when)
			}
			return err
		})
	}
	cs, err := upperChanges(context.Background(), node.VolumeInfo{Upper: upper, Lowers: []string{initUp, image}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Change{
		{"/a", ChangeModify}, {"/a/f1", ChangeModify}, {"/a/f2", ChangeAdd},
		{"/b", ChangeAdd}, {"/b/g", ChangeAdd},
		{"/c/k", ChangeModify}, {"/d/h", ChangeModify}, {"/e", ChangeDelete},
		{"/n", ChangeAdd}, {"/x", ChangeModify}, {"/x/new", ChangeAdd},
	}
	if got := publicChanges(cs); !reflect.DeepEqual(got, want) {
		t.Fatalf("changes\n%v\nwant\n%v", got, want)
	}
	// Docker's DiffSize: the regular files added or changed.
	if n, want := changesSize(cs), int64(len("a/f1a/f2b/gc/kd/hx/new")); n != want {
		t.Fatalf("size %d, want %d", n, want)
	}
}
