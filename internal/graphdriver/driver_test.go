package graphdriver

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/fstree"
	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/mount"
	"github.com/slacker-dev/slacker/internal/node"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testutil"
)

type testDriver struct {
	*Driver
	node  *node.Node
	store string // store directory
}

// newDriver opens a driver on a fresh in-process node (sharing store, if given).
func newDriver(t *testing.T, shared bool, store string) *testDriver {
	t.Helper()
	dm := testenv.StartDaemon(t, testenv.DaemonOptions{StoreDir: store, Size: 256 << 20})
	d, err := Open(context.Background(), dm.Node, Options{Root: filepath.Join(dm.StateRoot, "graphdriver"),
		Store: "local:" + dm.StoreDir, SharedStore: shared})
	if err != nil {
		t.Fatal(err)
	}
	// Registered after StartDaemon's cleanup, so it runs first: the node closes after.
	t.Cleanup(func() {
		if err := d.Cleanup(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return &testDriver{Driver: d, node: dm.Node, store: dm.StoreDir}
}

type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func layerTar(t *testing.T, es ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body)),
			ModTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	return buf.Bytes()
}

// baseLayer is a small image layer.
func baseLayer(t *testing.T) []byte {
	return layerTar(t,
		entry{name: "etc/", typ: tar.TypeDir},
		entry{name: "etc/motd", body: "hello\n"},
		entry{name: "etc/issue", body: "Debian\n"},
		entry{name: "etc/motd2", typ: tar.TypeLink, link: "etc/motd"},
		entry{name: "usr/", typ: tar.TypeDir},
		entry{name: "usr/bin/", typ: tar.TypeDir},
		entry{name: "usr/bin/tool", body: "#!/bin/sh\necho tool\n", mode: 0o755},
		entry{name: "bin", typ: tar.TypeSymlink, link: "usr/bin"},
		entry{name: "big", body: strings.Repeat("0123456789abcdef", 1<<16)},
	)
}

func (d *testDriver) volumes() []string {
	var ids []string
	for _, v := range d.node.Volumes() {
		ids = append(ids, v.ID)
	}
	return ids
}

func (d *testDriver) hasVolume(id string) bool {
	for _, v := range d.volumes() {
		if v == volumeID(id) {
			return true
		}
	}
	return false
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func isMounted(t *testing.T, dir string) bool {
	t.Helper()
	ms, err := mount.Mounts(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Target == dir {
			return true
		}
	}
	return false
}

// modes are the container root modes the tests of containers run in.
var modes = []node.RootMode{node.RootShared, node.RootBlock}

// modeTest runs f as a subtest in each root mode (shared ones need overlayfs).
func modeTest(t *testing.T, f func(t *testing.T, mode node.RootMode)) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			if mode == node.RootShared {
				testutil.RequireOverlay(t)
			}
			f(t, mode)
		})
	}
}

// opt is what docker run --storage-opt root-mode=MODE passes ("": nothing).
func opt(mode node.RootMode) map[string]string {
	if mode == "" {
		return nil
	}
	return map[string]string{"root-mode": string(mode)}
}

// container makes an init layer (written like dockerd does) and a container layer on
// parent, in mode ("": the node's), and returns the container's mounted root.
func container(t *testing.T, d *testDriver, id, parent string, mode node.RootMode) string {
	t.Helper()
	ctx := context.Background()
	if err := d.Create(ctx, id+"-init", parent, true, opt(mode)); err != nil {
		t.Fatal(err)
	}
	dir, err := d.Get(ctx, id+"-init")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{".dockerenv", "etc/hosts"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(dir, "dev/pts"), 0o755)
	if err := d.Put(ctx, id+"-init"); err != nil {
		t.Fatal(err)
	}
	if err := d.Create(ctx, id, id+"-init", true, opt(mode)); err != nil {
		t.Fatal(err)
	}
	root, err := d.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// edit edits a container's root the way the tests expect, deleting del.
func edit(t *testing.T, root, del string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(root, "etc/motd"), []byte("changed\n"), 0o644); err != nil { // same inode as etc/motd2
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, del)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "tmp/x"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "usr/bin"), 0o700); err != nil {
		t.Fatal(err)
	}
}

func TestDriverLayersAndContainers(t *testing.T) { modeTest(t, testDriverLayersAndContainers) }

func testDriverLayersAndContainers(t *testing.T, mode node.RootMode) {
	d := newDriver(t, false, "")
	shared := mode == node.RootShared
	ctx := context.Background()
	if err := d.Init("", nil, false); err != nil {
		t.Fatal(err)
	}
	if err := d.Init("", nil, true); !errors.Is(err, errdefs.ErrUnsupported) {
		t.Fatalf("Init with user namespace maps: %v", err)
	}
	// docker load: Create + ApplyDiff of an ordinary layer, applied into a clone.
	if err := d.Create(ctx, "l1", "", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Create(ctx, "l1", "", false, nil); !errors.Is(err, errdefs.ErrExists) {
		t.Fatalf("second Create: %v", err)
	}
	if err := d.Create(ctx, "x", "", false, map[string]string{"size": "1G"}); !errors.Is(err, errdefs.ErrUnsupported) {
		t.Fatalf("Create with storage options: %v", err)
	}
	size, err := d.ApplyDiff(ctx, "l1", "", bytes.NewReader(baseLayer(t)))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(6 + 7 + 20 + 1<<20); size != want {
		t.Fatalf("ApplyDiff size %d, want %d", size, want)
	}
	if d.hasVolume("l1") {
		t.Fatal("an applied image layer kept a volume; it should be only its snapshot")
	}
	if err := d.Create(ctx, "l2", "l1", false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ApplyDiff(ctx, "l2", "l1", bytes.NewReader(layerTar(t,
		entry{name: "etc/.wh.issue"}, entry{name: "etc/new", body: "n"}))); err != nil {
		t.Fatal(err)
	}
	// Get mounts a read-only view, counted.
	dir, err := d.Get(ctx, "l2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "etc/issue")); !os.IsNotExist(err) {
		t.Fatalf("whiteout not applied: %v", err)
	}
	if mustRead(t, filepath.Join(dir, "etc/new")) != "n" || mustRead(t, filepath.Join(dir, "bin/tool")) != "#!/bin/sh\necho tool\n" {
		t.Fatal("layer content wrong")
	}
	if err := os.WriteFile(filepath.Join(dir, "etc/new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Fatalf("an image layer's view is writable: %v", err)
	}
	dir2, err := d.Get(ctx, "l2")
	if err != nil || dir2 != dir {
		t.Fatalf("second Get: %q %v", dir2, err)
	}
	d.Put(ctx, "l2")
	if !isMounted(t, dir) {
		t.Fatal("unmounted after one Put of two Gets")
	}
	d.Put(ctx, "l2")
	if isMounted(t, dir) || d.hasVolume("l2") {
		t.Fatal("still mounted after the last Put")
	}
	if err := d.Put(ctx, "l2"); err != nil {
		t.Fatalf("a Put too many: %v", err)
	}
	// Gets and Puts from many goroutines balance out.
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := d.Get(ctx, "l2")
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := os.Stat(filepath.Join(p, "etc/new")); err != nil {
				t.Error(err)
			}
			if err := d.Put(ctx, "l2"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if d.hasVolume("l2") {
		t.Fatal("still mounted after balanced concurrent Gets and Puts")
	}

	// docker run: init layer, container layer; snapshot caching.
	root := container(t, d, "c", "l2", mode)
	meta := func(id string) map[string]string {
		m, err := d.Metadata(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	l2snap := meta("l2")["Snapshot"]
	for _, id := range []string{"e-init", "f-init"} {
		if err := d.Create(ctx, id, "l2", true, opt(mode)); err != nil {
			t.Fatal(err)
		}
		if got := meta(id)["Snapshot"]; got != l2snap {
			t.Fatalf("%s starts from %s, not its parent's snapshot %s", id, got, l2snap)
		}
	}
	// A block init layer is its snapshot once its container is made; a shared one
	// is the root its container stands on.
	if d.hasVolume("c-init") != shared {
		t.Fatalf("init layer's volume kept: %v, want %v", d.hasVolume("c-init"), shared)
	}
	if m := meta("c"); m["Mountpoint"] != root || m["RootMode"] != string(mode) {
		t.Fatalf("metadata %v", m)
	}
	edit(t, root, "etc/new")
	cs, err := d.Changes(ctx, "c", "c-init")
	if err != nil {
		t.Fatal(err)
	}
	want := []Change{{"/etc", ChangeModify}, {"/etc/motd", ChangeModify}, {"/etc/motd2", ChangeModify},
		{"/etc/new", ChangeDelete}, {"/tmp", ChangeAdd}, {"/tmp/x", ChangeAdd}, {"/usr/bin", ChangeModify}}
	if shared {
		// overlayfs copies /etc/motd up alone: /etc/motd2 keeps the image's inode
		// and content (as with overlay2); /usr, copied up only because /usr/bin
		// changed, is not a change.
		want = slices.DeleteFunc(want, func(c Change) bool { return c.Path == "/etc/motd2" })
		if got := mustRead(t, filepath.Join(root, "etc/motd2")); got != "hello\n" {
			t.Fatalf("etc/motd2 after writing etc/motd: %q", got)
		}
	}
	if !reflect.DeepEqual(cs, want) {
		t.Fatalf("changes\n%v\nwant\n%v", cs, want)
	}
	if n, err := d.DiffSize(ctx, "c", "c-init"); err != nil || n != 8+4 {
		t.Fatalf("DiffSize %d %v, want 12 (a file with two names counted once)", n, err)
	}

	// docker commit: Diff (an ordinary tar: the store is not shared) applied on l2.
	rc, err := d.Diff(ctx, "c", "c-init")
	if err != nil {
		t.Fatal(err)
	}
	diff, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(diff))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name+" "+string(h.Typeflag)+" "+h.Linkname)
	}
	wantNames := []string{"etc/ 5 ", "etc/motd 0 ", "etc/motd2 1 etc/motd", "etc/.wh.new 0 ", "tmp/ 5 ", "tmp/x 0 ", "usr/bin/ 5 "}
	if shared {
		// Straight from the upper layer, its directories included.
		wantNames = []string{"etc/ 5 ", "etc/motd 0 ", "etc/.wh.new 0 ", "tmp/ 5 ", "tmp/x 0 ", "usr/ 5 ", "usr/bin/ 5 "}
	}
	if !reflect.DeepEqual(names, wantNames) {
		t.Fatalf("diff tar entries\n%q\nwant\n%q", names, wantNames)
	}
	if err := d.Create(ctx, "l3", "l2", false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ApplyDiff(ctx, "l3", "l2", bytes.NewReader(diff)); err != nil {
		t.Fatal(err)
	}
	l3, err := d.Get(ctx, "l3")
	if err != nil {
		t.Fatal(err)
	}
	diffs, err := fstree.Compare(ctx, l3, root, fstree.Options{Mtimes: true, IgnoreRoot: true,
		Ignore: []string{".dockerenv", "etc/hosts", "dev"}, LabelA: "committed", LabelB: "container"})
	if err != nil {
		t.Fatal(err)
	}
	for _, df := range diffs {
		t.Errorf("%s", df)
	}
	d.Put(ctx, "l3")
	if err := d.Put(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if isMounted(t, root) {
		t.Fatal("container still mounted after Put")
	}

	// A restart of slackerd keeps the layers; a stopped container keeps its changes;
	// an image layer's view left mounted is dropped.
	if _, err := d.Get(ctx, "l2"); err != nil {
		t.Fatal(err)
	}
	d2, err := Open(ctx, d.node, d.o)
	if err != nil {
		t.Fatal(err)
	}
	root, err = d2.Get(ctx, "c")
	if err != nil || mustRead(t, filepath.Join(root, "tmp/x")) != "data" {
		t.Fatalf("container after reopen: %v", err)
	}
	d2.Put(ctx, "c")
	if d.hasVolume("l2") {
		t.Fatal("reopening kept an image layer's view")
	}

	for _, id := range []string{"c", "c-init", "e-init", "f-init", "l3", "l2", "l1"} {
		if err := d2.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
		if d2.Exists(id) {
			t.Fatalf("%s exists after Remove", id)
		}
	}
	if err := d2.Remove(ctx, "l1"); err != nil {
		t.Fatalf("removing a removed layer: %v", err)
	}
	for _, v := range d.volumes() {
		if strings.HasPrefix(v, "docker-") || strings.HasPrefix(v, "image-") {
			t.Errorf("volume %s left after every layer was removed", v)
		}
	}
}

func TestDriverSlackerLayers(t *testing.T) { modeTest(t, testDriverSlackerLayers) }

func testDriverSlackerLayers(t *testing.T, mode node.RootMode) {
	a := newDriver(t, true, "")
	ctx := context.Background()
	if err := a.Create(ctx, "l1", "", false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ApplyDiff(ctx, "l1", "", bytes.NewReader(baseLayer(t))); err != nil {
		t.Fatal(err)
	}
	root := container(t, a, "c", "l1", mode)
	edit(t, root, "etc/issue")
	// The container's own version of a file the init layer made is kept.
	if err := os.WriteFile(filepath.Join(root, "etc/hosts"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	// docker commit with a shared store: the container's snapshot as a Slacker layer.
	rc, err := a.Diff(ctx, "c", "c-init")
	if err != nil {
		t.Fatal(err)
	}
	layer, _ := io.ReadAll(rc)
	rc.Close()
	m, err := DecodeLayer(layer)
	if err != nil {
		t.Fatalf("diff is not a Slacker layer (%d bytes): %v", len(layer), err)
	}
	l1meta, _ := a.Metadata(ctx, "l1")
	if m.Parent.String() != l1meta["Snapshot"] || m.Store != "local:"+a.store || m.Size != 16 {
		t.Fatalf("marker %+v (l1 is %s)", m, l1meta["Snapshot"])
	}
	if err := a.Create(ctx, "l2", "l1", false, nil); err != nil {
		t.Fatal(err)
	}
	size, err := a.ApplyDiff(ctx, "l2", "l1", bytes.NewReader(layer))
	if err != nil || size != 16 {
		t.Fatalf("ApplyDiff of the Slacker layer: %d %v", size, err)
	}
	if a.hasVolume("l2") {
		t.Fatal("ApplyDiff of a Slacker layer made a volume; it should only record the snapshot")
	}
	// Pushing reads the layer back verbatim.
	rc, err = a.Diff(ctx, "l2", "l1")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(again, layer) {
		t.Fatal("Diff of a layer applied from a Slacker layer is not that layer")
	}
	a.Put(ctx, "c")

	// Another node sharing the store pulls it: nothing but the marker moves.
	b := newDriver(t, true, a.store)
	if err := b.Create(ctx, "m1", "", false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ApplyDiff(ctx, "m1", "", bytes.NewReader(layer)); err != nil {
		t.Fatal(err)
	}
	if b.hasVolume("m1") {
		t.Fatal("ApplyDiff of a Slacker layer made a volume")
	}
	if _, err := os.Stat(filepath.Join(b.o.Root, "base.json")); !os.IsNotExist(err) {
		t.Fatalf("a Slacker layer on a fresh node made the blank filesystem: %v", err)
	}
	dir, err := b.Get(ctx, "m1")
	if err != nil {
		t.Fatal(err)
	}
	if mustRead(t, filepath.Join(dir, "etc/motd")) != "changed\n" || mustRead(t, filepath.Join(dir, "tmp/x")) != "data" {
		t.Fatal("the pulled layer lacks the container's changes")
	}
	// What the init layer added is not part of the commit; what the image had is.
	for _, p := range []string{".dockerenv", "dev", "etc/issue"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); !os.IsNotExist(err) {
			t.Errorf("%s in the committed layer: %v", p, err)
		}
	}
	if mustRead(t, filepath.Join(dir, "etc/hosts")) != "mine" {
		t.Error("the container's own /etc/hosts was taken out of the commit")
	}
	if mustRead(t, filepath.Join(dir, "usr/bin/tool")) != "#!/bin/sh\necho tool\n" {
		t.Error("image content missing from the committed layer")
	}
	b.Put(ctx, "m1")

	// A node with another store says where the snapshot is.
	c := newDriver(t, true, "")
	c.Create(ctx, "m1", "", false, nil)
	_, err = c.ApplyDiff(ctx, "m1", "", bytes.NewReader(layer))
	if err == nil || !strings.Contains(err.Error(), "not in this node's store") || !strings.Contains(err.Error(), a.store) {
		t.Fatalf("ApplyDiff with a foreign snapshot: %v", err)
	}

	// The Slacker layer of `slacker push` (package image's format) is lazy too, and
	// its view shows its files, from which dockerd reassembles it when it pushes.
	desc := &image.Descriptor{Snapshot: m.Snapshot, Size: 256 << 20, DataSize: 1 << 20,
		Config: ocispec.ImageConfig{Cmd: []string{"sh"}}, Created: time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)}
	il, err := image.EncodeLayer(desc)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Create(ctx, "i1", "", false, nil); err != nil {
		t.Fatal(err)
	}
	if size, err := b.ApplyDiff(ctx, "i1", "", bytes.NewReader(il)); err != nil || size != desc.DataSize {
		t.Fatalf("ApplyDiff of an image-format Slacker layer: %d %v", size, err)
	}
	if b.hasVolume("i1") {
		t.Fatal("ApplyDiff of an image-format Slacker layer made a volume")
	}
	dir, err = b.Get(ctx, "i1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := image.Decode([]byte(mustRead(t, filepath.Join(dir, image.LayerDescriptorPath))))
	if err != nil || got.Snapshot != m.Snapshot || mustRead(t, filepath.Join(dir, "etc/motd")) != "changed\n" {
		t.Fatalf("view of the image layer: %+v %v", got, err)
	}
	b.Put(ctx, "i1")
	if err := b.Create(ctx, "ic", "i1", true, opt(mode)); err != nil {
		t.Fatal(err)
	}
	dir, err = b.Get(ctx, "ic")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".slacker")); !os.IsNotExist(err) {
		t.Fatalf("a container of the image sees the layer's own files: %v", err)
	}
	b.Put(ctx, "ic")
}

func TestSnapshotsAreRoots(t *testing.T) { modeTest(t, testSnapshotsAreRoots) }

func testSnapshotsAreRoots(t *testing.T, mode node.RootMode) {
	d := newDriver(t, false, "")
	ctx := context.Background()
	if err := d.Create(ctx, "l1", "", false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ApplyDiff(ctx, "l1", "", bytes.NewReader(baseLayer(t))); err != nil {
		t.Fatal(err)
	}
	if err := d.Create(ctx, "c-init", "l1", true, opt(mode)); err != nil {
		t.Fatal(err)
	}
	roots, err := Roots(d.o.Root)(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := d.Metadata(ctx, "l1")
	want := []digest.Digest{digest.Digest(m["Snapshot"]), digest.Digest(m["Snapshot"])}
	if !reflect.DeepEqual(roots, want) {
		t.Fatalf("roots %v, want %v", roots, want)
	}
	if roots, err := Roots(filepath.Join(t.TempDir(), "none"))(ctx); err != nil || len(roots) != 0 {
		t.Fatalf("no driver state: %v %v", roots, err)
	}
}
