package convert_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/convert"
	"github.com/slacker-dev/slacker/internal/names"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/local"
	"github.com/slacker-dev/slacker/internal/testenv"
)

// hostileImage writes an OCI layout holding one image of the given layers (blob and
// media type each) and returns its source spec.
func hostileImage(t *testing.T, dir string, edit func(v1.Image) v1.Image, layers ...v1.Layer) string {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range layers {
		var err error
		if img, err = mutate.Append(img, mutate.Addendum{Layer: l}); err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf.OS, cf.Architecture = "linux", "amd64"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		img = edit(img)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "t"})); err != nil {
		t.Fatal(err)
	}
	return "oci:" + dir + ":t"
}

func tarLayer(t *testing.T, es ...entry) v1.Layer {
	return static.NewLayer(layerTar(t, es...), types.OCIUncompressedLayer)
}

// zeroBomb is a layer of one file of n zero bytes, compressed.
func zeroBomb(t *testing.T, kind string, n int64) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	var w interface {
		Write([]byte) (int, error)
		Close() error
	}
	mt := types.OCILayer
	if kind == "gzip" {
		w = gzip.NewWriter(&buf)
	} else {
		zw, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w, mt = zw, types.OCILayerZStd
	}
	tw := tar.NewWriter(w)
	tw.WriteHeader(&tar.Header{Name: "bomb", Typeflag: tar.TypeReg, Mode: 0o644, Size: n})
	zeros := make([]byte, 1<<20)
	for left := n; left > 0; left -= int64(len(zeros)) {
		tw.Write(zeros[:min(left, int64(len(zeros)))])
	}
	tw.Close()
	w.Close()
	return static.NewLayer(buf.Bytes(), mt)
}

// TestConvertHostileImages is the conversion-level catalogue of hostile layers and
// metadata (the tar-level one is internal/archive's TestHostileLayers): each image
// is refused with a clear error (or, for writes through symlinks, contained), writes
// nothing outside its volume, leaves no volume and no conversion-cache entry behind,
// and loses nothing the store held.
func TestConvertHostileImages(t *testing.T) {
	d := testenv.StartDaemon(t, testenv.DaemonOptions{})
	ctx := context.Background()
	work := t.TempDir()
	chains, err := names.Open(filepath.Join(work, "names"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := local.Open(d.StoreDir)
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(os.TempDir(), fmt.Sprintf("slacker-escape-%d", os.Getpid()))
	t.Cleanup(func() { os.RemoveAll(outside) })
	good := tarLayer(t, dir("etc", 0o755), reg("etc/ok", "fine", 0o644, 0, 0))
	const size = 256 << 20
	big := strings.Repeat("x", 5<<20)

	tests := []struct {
		name      string
		layers    []v1.Layer
		edit      func(v1.Image) v1.Image
		noDevices bool
		want      error  // errors.Is
		msg       string // in the error
		contained string // converted: this file is inside the image
	}{
		{name: "dotdot name", layers: []v1.Layer{good, tarLayer(t, reg("../../../../../../.."+outside, "x", 0o644, 0, 0))},
			want: archive.ErrUnsafe, msg: `"../`},
		{name: "absolute name", layers: []v1.Layer{good, tarLayer(t, reg(outside+"/abs", "x", 0o644, 0, 0))},
			want: archive.ErrUnsafe},
		{name: "symlink named dot", layers: []v1.Layer{good, tarLayer(t, link(".", outside))}, want: archive.ErrUnsafe},
		{name: "symlink named slash", layers: []v1.Layer{good, tarLayer(t, link("/", outside))}, want: archive.ErrUnsafe},
		{name: "symlink climbing out, written through", layers: []v1.Layer{good,
			tarLayer(t, link("esc", "../../../../../../../../.."+outside), reg("esc/pwned", "x", 0o644, 0, 0))},
			want: archive.ErrUnsafe, msg: `"esc"`},
		{name: "absolute symlink, written through (contained)", layers: []v1.Layer{good,
			tarLayer(t, link("abs", outside), reg("abs/inside", "x", 0o644, 0, 0))}, contained: outside + "/inside"},
		{name: "hardlink escaping", layers: []v1.Layer{good, tarLayer(t, hard("h", "../../../../../../etc/hostname"))},
			want: archive.ErrUnsafe, msg: `"h"`},
		{name: "device node where none are allowed", noDevices: true, layers: []v1.Layer{good,
			tarLayer(t, entry{hdr: tar.Header{Name: "null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3}})},
			want: archive.ErrUnsafe, msg: `"null"`},
		{name: "PAX header over 1 MiB", layers: []v1.Layer{good, static.NewLayer(paxBomb(), types.OCIUncompressedLayer)},
			want: archive.ErrLimit},
		{name: "gzip bomb", layers: []v1.Layer{good, zeroBomb(t, "gzip", 1<<30)}, want: archive.ErrLimit, msg: `"bomb"`},
		{name: "zstd bomb", layers: []v1.Layer{good, zeroBomb(t, "zstd", 1<<30)}, want: archive.ErrLimit, msg: `"bomb"`},
		{name: "truncated gzip layer", layers: []v1.Layer{good, func() v1.Layer {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			zw.Write(layerTar(t, reg("whole", "w", 0o644, 0, 0), reg("cut", strings.Repeat("c", 100000), 0o644, 0, 0)))
			zw.Close()
			return static.NewLayer(buf.Bytes()[:buf.Len()/2], types.OCILayer)
		}()}, msg: "unexpected EOF"},
		{name: "tampered layer (content does not match its diff ID)", layers: []v1.Layer{good},
			edit: func(img v1.Image) v1.Image {
				cf, _ := img.ConfigFile()
				cf.RootFS.DiffIDs[0] = v1.Hash{Algorithm: "sha256", Hex: digest.FromString("other").Encoded()}
				img, _ = mutate.ConfigFile(img, cf)
				return img
			}, msg: "corrupt or tampered layer"},
		{name: "diff IDs and layers disagree", layers: []v1.Layer{good},
			edit: func(img v1.Image) v1.Image {
				cf, _ := img.ConfigFile()
				cf.RootFS.DiffIDs = append(cf.RootFS.DiffIDs, cf.RootFS.DiffIDs[0])
				img, _ = mutate.ConfigFile(img, cf)
				return img
			}, msg: "diff IDs"},
		{name: "manifest over 4 MiB", layers: []v1.Layer{good},
			edit: func(img v1.Image) v1.Image {
				return mutate.Annotations(img, map[string]string{"pad": big}).(v1.Image)
			}, msg: "image manifest has"},
		{name: "config over 4 MiB", layers: []v1.Layer{good},
			edit: func(img v1.Image) v1.Image {
				cf, _ := img.ConfigFile()
				cf.Config.Env = []string{"PAD=" + big}
				img, _ = mutate.ConfigFile(img, cf)
				return img
			}, msg: "image config has"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := map[digest.Digest]int64{}
			st.List(ctx, func(i store.Info) error { before[i.Digest] = i.Size; return nil })
			spec := hostileImage(t, filepath.Join(work, fmt.Sprint(i)), tc.edit, tc.layers...)
			src, err := convert.Open(ctx, spec, convert.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			desc, _, err := convert.Convert(ctx, src, convert.Options{Node: d.Client, Chains: chains, Size: size, NoDevices: tc.noDevices})
			switch {
			case tc.contained != "":
				if err != nil {
					t.Fatalf("contained layer: %v", err)
				}
				v, err := d.Client.CreateVolume(ctx, api.CreateVolumeRequest{ID: "look", Snapshot: desc.Snapshot, Mount: true, ReadOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				_, serr := os.Stat(filepath.Join(v.Mountpoint, tc.contained))
				if err := d.Client.DeleteVolume(ctx, "look"); err != nil {
					t.Fatal(err)
				}
				if serr != nil {
					t.Fatalf("the file written through the symlink is not inside the image: %v", serr)
				}
			case err == nil:
				t.Fatal("converted")
			case tc.want != nil && !errors.Is(err, tc.want), !strings.Contains(err.Error(), tc.msg):
				t.Fatalf("refused with %v; want %v mentioning %q", err, tc.want, tc.msg)
			}
			if err != nil && strings.Count(err.Error(), "\n") > 0 {
				t.Errorf("error of several lines: %q", err)
			}
			if _, err := os.Lstat(outside); err == nil {
				t.Fatalf("%s was created outside the volume", outside)
			}
			if vs, _ := d.Client.Volumes(ctx); len(vs) != 0 {
				t.Fatalf("volumes left: %+v", vs)
			}
			for dg, n := range before {
				b, err := store.ReadAllSized(ctx, st, dg, n)
				if err != nil || int64(len(b)) != n {
					t.Fatalf("object %s was lost: %v", dg, err)
				}
			}
		})
	}
}

// rawTarEntry is one ustar entry, written by hand: Go's tar writer refuses what a
// hostile layer holds.
func rawTarEntry(name string, typ byte, body []byte) []byte {
	h := make([]byte, 512)
	copy(h[0:100], name)
	copy(h[100:108], "0000644\x00")
	copy(h[108:116], "0000000\x00")
	copy(h[116:124], "0000000\x00")
	copy(h[124:136], fmt.Sprintf("%011o\x00", len(body)))
	copy(h[136:148], "00000000000\x00")
	h[156] = typ
	copy(h[257:263], "ustar\x00")
	copy(h[263:265], "00")
	copy(h[148:156], "        ")
	sum := 0
	for _, c := range h {
		sum += int(c)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	out := append(h, body...)
	if pad := len(body) % 512; pad != 0 {
		out = append(out, make([]byte, 512-pad)...)
	}
	return out
}

// paxBomb is a layer whose PAX extended header holds a 2 MiB record.
func paxBomb() []byte {
	rec := "SLACKER.pad=" + strings.Repeat("p", 2<<20) + "\n"
	rec = fmt.Sprintf("%d %s", len(rec)+8, rec) // the length counts itself (8 digits)
	out := rawTarEntry("PaxHeaders/big", tar.TypeXHeader, []byte(rec))
	out = append(out, rawTarEntry("big", tar.TypeReg, []byte("x"))...)
	return append(out, make([]byte, 1024)...)
}
