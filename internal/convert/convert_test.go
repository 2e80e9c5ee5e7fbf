package convert_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/convert"
	"github.com/slacker-dev/slacker/internal/fstree"
	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/names"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testenv/services"
	"github.com/slacker-dev/slacker/internal/testutil"
)

type entry struct {
	hdr  tar.Header
	body string
}

func layerTar(t *testing.T, es ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := e.hdr
		h.Size = int64(len(e.body))
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if h.ModTime.IsZero() {
			h.ModTime = time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
		}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return buf.Bytes()
}

func reg(name, body string, mode int64, uid, gid int) entry {
	return entry{tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Uid: uid, Gid: gid}, body}
}
func dir(name string, mode int64) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: mode}}
}
func link(name, target string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}}
}
func hard(name, target string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: target}}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// TestConvertMatchesUmoci converts a multi-layer image with whiteouts, opaque
// directories, hardlinks, symlinks, xattrs, special modes, owners and device nodes
// into snapshots, mounts the result and compares it file by file with the same image
// unpacked by umoci.
func TestConvertMatchesUmoci(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	testutil.RequireTool(t, "umoci")
	ctx := context.Background()
	work := t.TempDir()
	layout := filepath.Join(work, "oci")
	ref := layout + ":test"
	run(t, "umoci", "init", "--layout", layout)
	run(t, "umoci", "new", "--image", ref)
	add := func(name string, es ...entry) {
		p := filepath.Join(work, name)
		if err := os.WriteFile(p, layerTar(t, es...), 0o600); err != nil {
			t.Fatal(err)
		}
		run(t, "umoci", "raw", "add-layer", "--image", ref, p)
	}
	caps := string([]byte{1, 0, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	ping := reg("usr/bin/ping", "ELF ping", 0o755, 0, 0)
	ping.hdr.PAXRecords = map[string]string{"SCHILY.xattr.security.capability": caps, "SCHILY.xattr.user.note": "ping"}
	null := entry{hdr: tar.Header{Name: "dev/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3}}
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB, spans chunks
	add("base.tar",
		dir("etc", 0o755), reg("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n", 0o644, 0, 0),
		reg("etc/shadow", "root:*::\n", 0o640, 0, 42), reg("etc/motd", "hi\n", 0o644, 0, 0),
		dir("usr", 0o755), dir("usr/bin", 0o755), dir("usr/lib", 0o755),
		reg("usr/lib/big.so", big, 0o644, 0, 0), hard("usr/lib/big.so.1", "usr/lib/big.so"),
		reg("usr/bin/su", "ELF su", 0o4755, 0, 0), ping, link("bin", "usr/bin"), link("lib", "/usr/lib"),
		dir("home", 0o755), dir("home/u", 0o750), reg("home/u/.profile", "A=1\n", 0o644, 1000, 1000),
		dir("opt", 0o755), dir("opt/app", 0o755), reg("opt/app/a", "a", 0o644, 0, 0), reg("opt/app/b", "b", 0o644, 0, 0),
		dir("var", 0o755), dir("var/cache", 0o755), dir("var/cache/old", 0o755), reg("var/cache/old/x", "x", 0o644, 0, 0),
		dir("dev", 0o755), null, dir("tmp", 0o1777),
	)
	add("changes.tar",
		reg("etc/.wh.motd", "", 0o644, 0, 0), reg("var/cache/.wh.old", "", 0o644, 0, 0),
		dir("opt/app", 0o700), reg("opt/app/.wh..wh..opq", "", 0o644, 0, 0), reg("opt/app/c", "c", 0o600, 7, 7),
		reg("usr/lib/big.so", big[:100]+"CHANGED"+big[107:], 0o644, 0, 0),
		reg("etc/shadow", "root:*::\n", 0o600, 0, 42),
	)
	// A layer umoci computes itself from a changed tree.
	bundle := filepath.Join(work, "bundle")
	run(t, "umoci", "unpack", "--image", ref, bundle)
	rootfs := filepath.Join(bundle, "rootfs")
	os.Remove(filepath.Join(rootfs, "etc/passwd"))
	os.RemoveAll(filepath.Join(rootfs, "home/u"))
	os.WriteFile(filepath.Join(rootfs, "etc/hostname"), []byte("x\n"), 0o644)
	os.Symlink("../usr/lib/big.so", filepath.Join(rootfs, "etc/biglink"))
	run(t, "umoci", "repack", "--image", ref, bundle)
	os.RemoveAll(bundle)

	st, err := names.Open(filepath.Join(work, "names"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := convert.Open(ctx, "oci:"+ref, convert.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	desc, stats, err := convert.Convert(ctx, src, convert.Options{Node: d.Client, Chains: st})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Layers != 3 || stats.LayersReused != 0 || len(desc.Layers) != 3 {
		t.Fatalf("stats %+v, %d layers in the descriptor", stats, len(desc.Layers))
	}
	// Converting again reuses every layer's snapshot by chain ID.
	desc2, stats2, err := convert.Convert(ctx, src, convert.Options{Node: d.Client, Chains: st})
	if err != nil || stats2.LayersReused != 3 || desc2.Snapshot != desc.Snapshot {
		t.Fatalf("second conversion: %+v, %v", stats2, err)
	}

	vol, err := d.Client.CreateVolume(ctx, api.CreateVolumeRequest{ID: "check", Snapshot: desc.Snapshot, Mount: true, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(work, "want")
	run(t, "umoci", "unpack", "--image", ref, want)
	diffs, err := fstree.Compare(ctx, vol.Mountpoint, filepath.Join(want, "rootfs"), fstree.Options{
		Mtimes: true, IgnoreRoot: true, Ignore: []string{"lost+found"}, LabelA: "slacker", LabelB: "umoci",
		Xattrs: []string{"user.", "security.capability"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, df := range diffs {
		t.Errorf("%s", df)
	}
	if _, err := os.Stat(filepath.Join(vol.Mountpoint, "opt/app/a")); !os.IsNotExist(err) {
		t.Error("opaque directory kept a lower-layer file")
	}
	d.Client.DeleteVolume(ctx, "check")
	// No conversion volume is left behind.
	vs, _ := d.Client.Volumes(ctx)
	if len(vs) != 0 {
		t.Fatalf("volumes left: %+v", vs)
	}
}

// TestConvertRefusesHostileLayer checks that a layer escaping its root fails the
// conversion, names the entry, writes nothing outside and leaves no volume behind.
func TestConvertRefusesHostileLayer(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	testutil.RequireTool(t, "umoci")
	ctx := context.Background()
	work := t.TempDir()
	layout := filepath.Join(work, "oci")
	ref := layout + ":evil"
	run(t, "umoci", "init", "--layout", layout)
	run(t, "umoci", "new", "--image", ref)
	for i, es := range [][]entry{
		{dir("etc", 0o755), reg("etc/ok", "fine", 0o644, 0, 0)},
		{link("escape", "../../../../../../tmp"), reg("escape/pwned", "x", 0o644, 0, 0)},
	} {
		p := filepath.Join(work, "l"+string(rune('0'+i)))
		os.WriteFile(p, layerTar(t, es...), 0o600)
		run(t, "umoci", "raw", "add-layer", "--image", ref, p)
	}
	st, _ := names.Open(filepath.Join(work, "names"))
	src, err := convert.Open(ctx, "oci:"+ref, convert.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	_, _, err = convert.Convert(ctx, src, convert.Options{Node: d.Client, Chains: st})
	if !errors.Is(err, archive.ErrUnsafe) || !strings.Contains(err.Error(), `"escape"`) {
		t.Fatalf("hostile layer: %v; want ErrUnsafe naming the entry", err)
	}
	if _, err := os.Stat("/tmp/pwned"); err == nil {
		t.Fatal("a file was written outside the volume")
	}
	if vs, _ := d.Client.Volumes(ctx); len(vs) != 0 {
		t.Fatalf("volumes left after a failed conversion: %+v", vs)
	}
}

// TestConvertSources converts one image from each kind of source (OCI layout, OCI
// archive, docker-archive, registry) and checks that all give the same snapshot
// chain: the same layers, reused by chain ID after the first.
func TestConvertSources(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	testutil.RequireTool(t, "umoci", "skopeo", "docker-registry")
	ctx := context.Background()
	work := t.TempDir()
	layout := filepath.Join(work, "oci")
	ref := layout + ":src"
	run(t, "umoci", "init", "--layout", layout)
	run(t, "umoci", "new", "--image", ref)
	for i, es := range [][]entry{
		{dir("etc", 0o755), reg("etc/hello", "hello\n", 0o644, 0, 0), reg("etc/gone", "x", 0o644, 0, 0)},
		{reg("etc/.wh.gone", "", 0o644, 0, 0), reg("etc/second", "2\n", 0o600, 5, 5)},
	} {
		p := filepath.Join(work, fmt.Sprint("l", i))
		os.WriteFile(p, layerTar(t, es...), 0o600)
		run(t, "umoci", "raw", "add-layer", "--image", ref, p)
	}
	run(t, "umoci", "config", "--image", ref, "--config.cmd", "cat", "--config.cmd", "/etc/hello", "--config.workingdir", "/etc")
	ociArchive := filepath.Join(work, "image.oci.tar")
	dockerArchive := filepath.Join(work, "image.docker.tar")
	run(t, "skopeo", "copy", "--quiet", "oci:"+ref, "oci-archive:"+ociArchive+":src")
	run(t, "skopeo", "copy", "--quiet", "oci:"+ref, "docker-archive:"+dockerArchive+":src:latest")
	reg, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: filepath.Join(work, "registry")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Stop() })
	remote := reg.Addr + "/test/src:v1"
	run(t, "skopeo", "copy", "--quiet", "--dest-tls-verify=false", "--dest-compress-format", "zstd", "oci:"+ref, "docker://"+remote)

	st, _ := names.Open(filepath.Join(work, "names"))
	var first *image.Descriptor
	for _, spec := range []string{"oci:" + ref, "oci-archive:" + ociArchive, ociArchive, "docker-archive:" + dockerArchive, dockerArchive, remote} {
		src, err := convert.Open(ctx, spec, convert.OpenOptions{})
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		desc, stats, err := convert.Convert(ctx, src, convert.Options{Node: d.Client, Chains: st})
		src.Close()
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		if first == nil {
			first = desc
			if stats.LayersReused != 0 {
				t.Fatalf("first conversion reused layers: %+v", stats)
			}
		} else if desc.Snapshot != first.Snapshot || stats.LayersReused != 2 {
			t.Fatalf("%s: snapshot %s, %d layers reused; want %s and 2 (same diff IDs)", spec, desc.Snapshot, stats.LayersReused, first.Snapshot)
		}
		if got := strings.Join(desc.Config.Cmd, " "); got != "cat /etc/hello" || desc.Config.WorkingDir != "/etc" {
			t.Fatalf("%s: config %+v", spec, desc.Config)
		}
	}
	for _, bad := range []string{filepath.Join(work, "l0"), filepath.Join(work, "nonexistent"), reg.Addr + "/test/missing:v1"} {
		if src, err := convert.Open(ctx, bad, convert.OpenOptions{}); err == nil {
			src.Close()
			t.Errorf("%s: opened as an image", bad)
		}
	}
}
