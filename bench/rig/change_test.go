package rig

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/testutil"
)

func TestRetag(t *testing.T) {
	tests := []struct{ ref, tag, want string }{
		{"127.0.0.1:5000/oci/redis:latest", "dev-1", "127.0.0.1:5000/oci/redis:dev-1"},
		{"127.0.0.1:5000/oci/redis", "dev-1", "127.0.0.1:5000/oci/redis:dev-1"},
		{"localhost:5000/slacker/a-b:v1.2", "dev-2", "localhost:5000/slacker/a-b:dev-2"},
		{"redis:7", "dev-3", "redis:dev-3"},
	}
	for _, tt := range tests {
		if got := retag(tt.ref, tt.tag); got != tt.want {
			t.Errorf("retag(%q, %q) = %q, want %q", tt.ref, tt.tag, got, tt.want)
		}
	}
}

func TestChangeTar(t *testing.T) {
	ch := Change{Tag: "dev-1", Path: "/hellobench/sub/change", Content: []byte("change 1\n")}
	b, err := changeTar(ch)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := changeTar(ch)
	if !bytes.Equal(b, again) {
		t.Error("the same change made two different tars")
	}
	tr := tar.NewReader(bytes.NewReader(b))
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, h.Name)
		if !h.ModTime.Equal(ChangeTime) {
			t.Errorf("%s: mtime %v", h.Name, h.ModTime)
		}
		if h.Typeflag == tar.TypeReg {
			data, _ := io.ReadAll(tr)
			if string(data) != "change 1\n" || h.Mode != 0o644 {
				t.Errorf("%s: %q mode %o", h.Name, data, h.Mode)
			}
		} else if h.Typeflag != tar.TypeDir || h.Mode != 0o755 {
			t.Errorf("%s: type %c mode %o", h.Name, h.Typeflag, h.Mode)
		}
	}
	if want := []string{"hellobench/", "hellobench/sub/", "hellobench/sub/change"}; !reflect.DeepEqual(got, want) {
		t.Errorf("entries %q, want %q", got, want)
	}
	for _, bad := range []string{"", "/", "relative/x", "/a/../b", "/a//b", "/a/"} {
		if _, err := changeTar(Change{Path: bad}); err == nil {
			t.Errorf("changeTar accepted path %q", bad)
		}
	}
}

type tarEntry struct {
	name     string
	typ      byte
	mode     int64
	link     string
	data     string
	uid, gid int
}

func layerTar(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.data)), Uid: e.uid, Gid: e.gid}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.data))
		}
	}
	tw.Close()
	return b.Bytes()
}

func dir(name string, mode int64) tarEntry { return tarEntry{name: name, typ: tar.TypeDir, mode: mode} }
func file(name, data string) tarEntry {
	return tarEntry{name: name, typ: tar.TypeReg, mode: 0o644, data: data}
}
func wh(name string) tarEntry { return tarEntry{name: name, typ: tar.TypeReg, mode: 0o600} }

// TestRunTree applies layers the way an unpacker does, and checks which /run
// entries are left: whiteouts, opaque directories, replacement, hard links.
func TestRunTree(t *testing.T) {
	tests := []struct {
		name    string
		layers  [][]tarEntry
		present bool
		want    []string // entry paths, sorted
	}{
		{"no /run", [][]tarEntry{{dir("etc/", 0o755), file("etc/motd", "x")}}, false, []string{}},
		{"a /run", [][]tarEntry{{dir("run/", 0o755), dir("run/lock/", 0o1777), file("run/utmp", ""), dir("etc/", 0o755)}},
			true, []string{"", "lock", "utmp"}},
		{"leading ./ and /", [][]tarEntry{{dir("./run/", 0o755), file("/run/a", "a")}}, true, []string{"", "a"}},
		{"file whited out", [][]tarEntry{{dir("run/", 0o755), file("run/a", "a"), file("run/b", "b")}, {wh("run/.wh.a")}},
			true, []string{"", "b"}},
		{"directory whited out", [][]tarEntry{{dir("run/", 0o755), dir("run/d/", 0o755), file("run/d/x", "x"), file("run/dx", "y")}, {wh("run/.wh.d")}},
			true, []string{"", "dx"}},
		{"opaque /run", [][]tarEntry{{dir("run/", 0o755), file("run/a", "a")}, {dir("run/", 0o755), wh("run/.wh..wh..opq"), file("run/b", "b")}},
			true, []string{"", "b"}},
		{"opaque subdirectory", [][]tarEntry{{dir("run/", 0o755), dir("run/d/", 0o755), file("run/d/a", "a")}, {wh("run/d/.wh..wh..opq"), file("run/d/b", "b")}},
			true, []string{"", "d", "d/b"}},
		{"/run whited out", [][]tarEntry{{dir("run/", 0o755), file("run/a", "a")}, {wh(".wh.run")}}, false, []string{}},
		{"directory replaced by a file", [][]tarEntry{{dir("run/", 0o755), dir("run/d/", 0o755), file("run/d/a", "a")}, {file("run/d", "now a file")}},
			true, []string{"", "d"}},
		{"hard link inside /run", [][]tarEntry{{dir("run/", 0o755), file("run/a", "data"), {name: "run/b", typ: tar.TypeLink, link: "run/a"}}},
			true, []string{"", "a", "b"}},
		{"hard link to outside /run dropped", [][]tarEntry{{file("etc/x", "x"), dir("run/", 0o755), {name: "run/b", typ: tar.TypeLink, link: "etc/x"}}},
			true, []string{""}},
		{"devices and fifos dropped", [][]tarEntry{{dir("run/", 0o755), {name: "run/fifo", typ: tar.TypeFifo, mode: 0o600}, {name: "run/l", typ: tar.TypeSymlink, link: "/tmp"}}},
			true, []string{"", "l"}},
		{"/running is not /run", [][]tarEntry{{dir("running/", 0o755), file("running/a", "a")}}, false, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree := &runTree{Entries: map[string]*runEntry{}}
			for _, l := range tt.layers {
				if err := tree.applyLayer(bytes.NewReader(layerTar(t, l...))); err != nil {
					t.Fatal(err)
				}
			}
			got := []string{}
			for p := range tree.Entries {
				got = append(got, p)
			}
			sort.Strings(got)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("entries %q, want %q", got, tt.want)
			}
			if root := tree.Entries[""]; (root != nil && root.Type == tar.TypeDir) != tt.present {
				t.Errorf("present %v, want %v", !tt.present, tt.present)
			}
		})
	}
	if e := (&runTree{Entries: map[string]*runEntry{}}).applyLayer(bytes.NewReader(layerTar(t, dir("run/", 0o755), file("run/big", string(make([]byte, maxRunFile+1)))))); e == nil {
		t.Error("a /run file over the bound was accepted")
	}
}

// TestMaterialize writes a /run tree with its owners, modes (sticky included) and
// symbolic links, also when the layer left out a parent directory.
func TestMaterialize(t *testing.T) {
	testutil.RequireRoot(t)
	tree := &runTree{Entries: map[string]*runEntry{}}
	err := tree.applyLayer(bytes.NewReader(layerTar(t,
		dir("run/", 0o755),
		dir("run/lock/", 0o1777),
		tarEntry{name: "run/mysqld/", typ: tar.TypeDir, mode: 0o2750, uid: 101, gid: 102},
		tarEntry{name: "run/mysqld/pid", typ: tar.TypeReg, mode: 0o640, data: "42\n", uid: 101, gid: 102},
		tarEntry{name: "run/shm", typ: tar.TypeSymlink, link: "/dev/shm"},
		file("run/implied/parent/file", "x"), // no header for run/implied/ or its child
	)))
	if err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(t.TempDir(), "run")
	if err := tree.materialize(d); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		path     string
		mode     os.FileMode
		uid, gid int
		data     string
	}{
		{"", os.ModeDir | 0o755, 0, 0, ""},
		{"lock", os.ModeDir | os.ModeSticky | 0o777, 0, 0, ""},
		{"mysqld", os.ModeDir | os.ModeSetgid | 0o750, 101, 102, ""},
		{"mysqld/pid", 0o640, 101, 102, "42\n"},
		{"implied/parent/file", 0o644, 0, 0, "x"},
	}
	for _, c := range checks {
		p := filepath.Join(d, c.path)
		fi, err := os.Lstat(p)
		if err != nil {
			t.Errorf("%s: %v", c.path, err)
			continue
		}
		var st unix.Stat_t
		unix.Lstat(p, &st)
		if fi.Mode() != c.mode || int(st.Uid) != c.uid || int(st.Gid) != c.gid {
			t.Errorf("%s: mode %v owner %d:%d, want %v %d:%d", c.path, fi.Mode(), st.Uid, st.Gid, c.mode, c.uid, c.gid)
		}
		if c.data != "" {
			if b, _ := os.ReadFile(p); string(b) != c.data {
				t.Errorf("%s: %q", c.path, b)
			}
		}
	}
	if l, err := os.Readlink(filepath.Join(d, "shm")); err != nil || l != "/dev/shm" {
		t.Errorf("shm -> %q, %v", l, err)
	}
	if err := tree.materialize(d); err == nil {
		t.Error("materialize into an existing directory succeeded")
	}

	// A symbolic link of the image never leads a write out of the copy.
	outside := t.TempDir()
	for _, link := range []string{outside, "../../" + filepath.Base(outside)} {
		evil := &runTree{Entries: map[string]*runEntry{}}
		if err := evil.applyLayer(bytes.NewReader(layerTar(t, dir("run/", 0o755),
			tarEntry{name: "run/l", typ: tar.TypeSymlink, link: link}, file("run/l/escaped", "x")))); err != nil {
			t.Fatal(err)
		}
		if err := evil.materialize(filepath.Join(t.TempDir(), "run")); err == nil {
			t.Errorf("link to %s: materialize wrote through it", link)
		}
		if _, err := os.Lstat(filepath.Join(outside, "escaped")); !os.IsNotExist(err) {
			t.Fatalf("link to %s: a file was written outside the copy: %v", link, err)
		}
	}
}

func TestTarMode(t *testing.T) {
	tests := []struct {
		in   int64
		want os.FileMode
	}{
		{0o644, 0o644},
		{0o1777, os.ModeSticky | 0o777},
		{0o2750, os.ModeSetgid | 0o750},
		{0o4755, os.ModeSetuid | 0o755},
		{0o7777, os.ModeSetuid | os.ModeSetgid | os.ModeSticky | 0o777},
	}
	for _, tt := range tests {
		if got := tarMode(tt.in); got != tt.want {
			t.Errorf("tarMode(%o) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestWriteChangedLayout builds a two-layer image in an OCI layout, puts a change
// on top, and reads the new layout back: the old layers are links to the corpus's
// blobs, the new layer holds the file, and the sizes add up.
func TestWriteChangedLayout(t *testing.T) {
	tmp := t.TempDir()
	base := empty.Image
	for _, l := range [][]tarEntry{{dir("run/", 0o755), file("run/a", "a")}, {file("etc/motd", "hello\n")}} {
		raw := layerTar(t, l...)
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
			tarball.WithMediaType(types.OCILayer))
		if err != nil {
			t.Fatal(err)
		}
		if base, err = mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: types.OCILayer}); err != nil {
			t.Fatal(err)
		}
	}
	base = mutate.MediaType(base, types.OCIManifestSchema1)
	corpusLayout := filepath.Join(tmp, "oci")
	p, err := layout.Write(corpusLayout, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(base, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "w"})); err != nil {
		t.Fatal(err)
	}
	img := Image{Name: "w", Layout: corpusLayout, Tag: "w"}
	loaded, err := loadImage(corpusLayout, "w")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadImage(corpusLayout, "nope"); err == nil {
		t.Error("loadImage found a missing tag")
	}
	tree, err := readRunTree(loaded)
	if err != nil || !tree.Present || len(tree.Entries) != 2 {
		t.Fatalf("run tree %+v, %v", tree, err)
	}
	baseSize, err := pullSize(loaded)
	if err != nil {
		t.Fatal(err)
	}

	ch := Change{Tag: "dev-1", Path: "/hellobench/change", Content: []byte("change 1\n")}
	out := filepath.Join(tmp, "changed")
	sz, err := writeChangedLayout(img, ch, out)
	if err != nil {
		t.Fatal(err)
	}
	changed, err := loadImage(out, "dev-1")
	if err != nil {
		t.Fatal(err)
	}
	layers, err := changed.Layers()
	if err != nil || len(layers) != 3 {
		t.Fatalf("%d layers, %v", len(layers), err)
	}
	for i, l := range layers[:2] {
		d, _ := l.Digest()
		fi, err := os.Lstat(filepath.Join(out, "blobs", "sha256", d.Hex))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("layer %d is not a link to the corpus's blob: %v", i, err)
		}
	}
	rc, err := layers[2].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
		if h.Name == "hellobench/change" {
			if b, _ := io.ReadAll(tr); string(b) != "change 1\n" {
				t.Errorf("changed file holds %q", b)
			}
		}
	}
	rc.Close()
	if !reflect.DeepEqual(names, []string{"hellobench/", "hellobench/change"}) {
		t.Errorf("new layer entries %q", names)
	}
	newSize, err := pullSize(changed)
	if err != nil {
		t.Fatal(err)
	}
	if got := baseSize + sz.layer + sz.config + sz.manifest - sz.oldConfig - sz.oldManifest; got != newSize {
		t.Errorf("size of the changed image's pull: %d from the parts, %d from its manifest", got, newSize)
	}
	cfg, _ := changed.ConfigFile()
	if h := cfg.History; len(h) == 0 || h[len(h)-1].CreatedBy != "hellobench change dev-1: /hellobench/change" ||
		!h[len(h)-1].Created.Time.Equal(ChangeTime) {
		t.Errorf("history %+v", h)
	}
	// The same change again makes the same image.
	sz2, err := writeChangedLayout(img, ch, filepath.Join(tmp, "again"))
	if err != nil {
		t.Fatal(err)
	}
	again, _ := loadImage(filepath.Join(tmp, "again"), "dev-1")
	d1, _ := changed.Digest()
	d2, _ := again.Digest()
	if d1 != d2 || sz != sz2 {
		t.Errorf("the same change made %s and %s", d1, d2)
	}
	var _ v1.Image = again
}
