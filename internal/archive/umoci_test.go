package archive_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/fstree"
	"github.com/slacker-dev/slacker/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestMatchesUmoci builds a multi-layer OCI image with umoci, from layers written here
// and one umoci itself generated from a modified rootfs, unpacks it with umoci, applies
// the same layer blobs in order with Apply (as stored: gzip; and re-encoded as zstd and
// as plain tar), and requires the trees to be identical.
func TestMatchesUmoci(t *testing.T) {
	testutil.RequireRoot(t)
	umoci := testutil.RequireTool(t, "umoci")
	work := t.TempDir()
	image := filepath.Join(work, "image")
	ref := image + ":test"
	run := func(name string, args ...string) {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	addLayer := func(name string, es ...ent) {
		t.Helper()
		p := filepath.Join(work, name+".tar")
		must(t, os.WriteFile(p, layer(t, es...), 0o644))
		run(umoci, "raw", "add-layer", "--image", ref, p)
	}
	run(umoci, "init", "--layout", image)
	run(umoci, "new", "--image", ref)

	t1 := time.Date(2019, 5, 6, 7, 8, 9, 0, time.UTC)
	t2 := time.Date(2021, 1, 2, 3, 4, 5, 0, time.UTC)
	addLayer("base",
		dir("./"),
		dir("etc"), file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"), file("etc/motd", "hello\n"),
		file("etc/shadow", "root:*::\n").withMode(0o640).withOwner(0, 42),
		dir("usr"), dir("usr/bin"), dir("usr/lib"), file("usr/lib/libc.so", "ELF libc").withMtime(t1),
		symlink("usr/lib64", "lib"), symlink("bin", "usr/bin"), symlink("lib", "/usr/lib"),
		file("usr/bin/passwd", "ELF passwd").withMode(0o4755),
		file("usr/bin/wall", "ELF wall").withMode(0o2755).withOwner(0, 5),
		file("usr/bin/ping", "ELF ping").withMode(0o755).withXattr("security.capability", capNetBindService),
		file("usr/bin/a", "shared inode"), hardlink("usr/bin/b", "usr/bin/a"),
		dir("usr/share"), dir("usr/share/doc"), file("usr/share/doc/lower", "from the base layer"),
		dir("home"), dir("home/user").withOwner(1000, 1000).withMode(0o750),
		file("home/user/.profile", "export A=1\n").withOwner(1000, 1000).withXattr("user.origin", "base"),
		dir("tmp").withMode(0o1777),
		dir("run"), fifo("run/initctl").withMode(0o600),
		dir("dev"), chardev("dev/null", 1, 3), chardev("dev/zero", 1, 5),
		dir("var"), dir("var/cache"), dir("var/cache/old"), file("var/cache/old/x", "x"), dir("var/cache/old/sub"),
		file("var/cache/old/sub/y", "y"), file("var/cache/keep", "keep"),
		dir("opt"), dir("opt/app"), file("opt/app/a", "a1"), file("opt/app/b", "b1"), dir("opt/app/sub"),
		file("opt/app/sub/c", "c1"),
		dir("opt/app2"), file("opt/app2/old", "old"), dir("opt/app2/d"), file("opt/app2/d/old", "old"),
		dir("srv"), file("srv/becomes-dir", "f"), dir("srv/becomes-file"), file("srv/becomes-file/x", "x"),
		symlink("srv/link-becomes-file", "/etc"),
	)
	addLayer("changes",
		whiteout("etc/.wh.motd"),
		whiteout("var/cache/.wh.old"),
		dir("opt/app"), whiteout("opt/app/.wh..wh..opq"), file("opt/app/b", "b2"), dir("opt/app/sub"), file("opt/app/sub/new", "new"),
		dir("opt/app2").withMode(0o700), file("opt/app2/new", "new"), dir("opt/app2/d"), whiteout("opt/app2/.wh..wh..opq"),
		file("etc/shadow", "root:*::\n").withMode(0o600).withOwner(0, 42).withMtime(t2), // chmod only
		dir("home/user").withOwner(1000, 1000).withMode(0o700),                          // chmod only, dir
		file("usr/bin/passwd", "ELF passwd").withMode(0o4711).withOwner(0, 0),
		hardlink("usr/share/doc/link", "usr/share/doc/lower"),
		dir("srv/becomes-dir"), file("srv/becomes-dir/z", "z"),
		file("srv/becomes-file", "now a file"),
		file("srv/link-becomes-file", "now a file"),
		file("home/user/.profile", "export A=2\n").withOwner(1000, 1000).withXattr("user.origin", "changes").withMtime(t2),
		dir("data").withOwner(33, 33).withMode(0o2770),
		file("data/log", "entry\n").withOwner(33, 33).withMode(0o660),
		symlink("data/current", "../data/log").withOwner(33, 33),
		whiteout("nothing/.wh.here"),
	)

	// A layer umoci writes itself: unpack, change the rootfs, repack.
	bundle := filepath.Join(work, "bundle")
	run(umoci, "unpack", "--image", ref, bundle)
	rootfs := filepath.Join(bundle, "rootfs")
	must(t, os.Remove(filepath.Join(rootfs, "etc/passwd")))
	must(t, os.RemoveAll(filepath.Join(rootfs, "opt/app2")))
	must(t, os.Chmod(filepath.Join(rootfs, "usr/bin/wall"), 0o755))
	must(t, os.Lchown(filepath.Join(rootfs, "srv/becomes-file"), 7, 7))
	must(t, os.WriteFile(filepath.Join(rootfs, "etc/hostname"), []byte("umoci\n"), 0o644))
	must(t, os.Link(filepath.Join(rootfs, "usr/lib/libc.so"), filepath.Join(rootfs, "usr/lib/libc.so.6")))
	must(t, unix.Mkfifo(filepath.Join(rootfs, "run/fifo2"), 0o620))
	must(t, os.Symlink("/usr/share/doc", filepath.Join(rootfs, "doc")))
	must(t, unix.Lsetxattr(filepath.Join(rootfs, "etc/hostname"), "user.repacked", []byte("yes"), 0))
	must(t, os.Chtimes(filepath.Join(rootfs, "etc/hostname"), t1, t2))
	run(umoci, "repack", "--image", ref, bundle)

	addLayer("last",
		dir("opt/app"), file("opt/app/late", "late"), whiteout("opt/app/.wh..wh..opq"),
		whiteout("usr/bin/.wh.b"),
		file("etc/passwd", "root:x:0:0::/root:/bin/bash\n"),
	)

	want := filepath.Join(work, "want")
	run(umoci, "unpack", "--image", ref, want)
	blobs := layerBlobs(t, image, "test")
	if len(blobs) != 4 {
		t.Fatalf("image has %d layers, want 4", len(blobs))
	}
	opts := fstree.Options{Mtimes: true, DirMtimes: true, LabelA: "archive.Apply", LabelB: "umoci",
		Xattrs: []string{"user.", "security.capability", "trusted."}}
	for _, enc := range []string{"gzip", "zstd", "none"} {
		t.Run(enc, func(t *testing.T) {
			_, root := newRoot(t)
			var total archive.Stats
			for _, blob := range blobs {
				data, err := os.ReadFile(blob)
				must(t, err)
				if enc != "gzip" {
					data = compress(t, enc, decompressAll(t, data))
				}
				rc, err := archive.Decompress(bytes.NewReader(data))
				must(t, err)
				st, err := archive.Apply(context.Background(), root, rc, archive.Options{AllowDevices: true})
				rc.Close()
				if err != nil {
					t.Fatalf("apply %s: %v", filepath.Base(blob), err)
				}
				total.Entries += st.Entries
				total.Whiteouts += st.Whiteouts
				total.Opaques += st.Opaques
				total.Hardlinks += st.Hardlinks
			}
			if total.Whiteouts < 5 || total.Opaques != 3 || total.Hardlinks < 3 {
				t.Errorf("layers did not exercise what they should: %+v", total)
			}
			diffs, err := fstree.Compare(context.Background(), root, filepath.Join(want, "rootfs"), opts)
			must(t, err)
			for _, d := range diffs {
				t.Errorf("%s", d)
			}
			tree, err := fstree.Walk(context.Background(), root, opts)
			must(t, err)
			for _, p := range []string{"usr/share/doc/link", "usr/lib/libc.so.6", "dev/null", "run/fifo2", "etc/hostname", "opt/app/late"} {
				if tree.Entries[p] == nil {
					t.Errorf("%s missing: the image did not exercise it", p)
				}
			}
			for _, p := range []string{"etc/motd", "var/cache/old", "opt/app/a", "opt/app2", "usr/bin/b"} {
				if tree.Entries[p] != nil {
					t.Errorf("%s still there: the image did not exercise its whiteout", p)
				}
			}
		})
	}
}

// layerBlobs returns the paths of the layer blobs of tag in an OCI layout, in order.
func layerBlobs(t *testing.T, layout, tag string) []string {
	t.Helper()
	type descriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Annotations map[string]string `json:"annotations"`
	}
	blob := func(d string) string {
		algo, hex, _ := strings.Cut(d, ":")
		return filepath.Join(layout, "blobs", algo, hex)
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	readJSON(t, filepath.Join(layout, "index.json"), &index)
	for _, m := range index.Manifests {
		if m.Annotations["org.opencontainers.image.ref.name"] != tag {
			continue
		}
		var manifest struct {
			Layers []descriptor `json:"layers"`
		}
		readJSON(t, blob(m.Digest), &manifest)
		var out []string
		for _, l := range manifest.Layers {
			out = append(out, blob(l.Digest))
		}
		return out
	}
	t.Fatalf("tag %s not in %s", tag, layout)
	return nil
}

func readJSON(t *testing.T, p string, v any) {
	t.Helper()
	b, err := os.ReadFile(p)
	must(t, err)
	must(t, json.Unmarshal(b, v))
}

func decompressAll(t *testing.T, data []byte) []byte {
	t.Helper()
	rc, err := archive.Decompress(bytes.NewReader(data))
	must(t, err)
	defer rc.Close()
	out, err := io.ReadAll(rc)
	must(t, err)
	return out
}
