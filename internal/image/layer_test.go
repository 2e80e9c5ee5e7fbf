package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
)

func TestLayerRoundTrip(t *testing.T) {
	b, err := EncodeLayer(sample())
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := EncodeLayer(sample())
	if !bytes.Equal(b, b2) {
		t.Fatal("the layer is not reproducible")
	}
	if len(b) > 8<<10 {
		t.Fatalf("layer of %d bytes; want a few kilobytes", len(b))
	}
	d, err := DecodeLayer(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if d.Snapshot != sample().Snapshot || d.Config.Cmd[1] != "hello" {
		t.Fatalf("decoded %+v", d)
	}
	// Every entry is under .slacker/: unpacked by a stock runtime, it adds one directory.
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if !strings.HasPrefix(h.Name, ".slacker/") {
			t.Errorf("entry %q outside .slacker/", h.Name)
		}
	}
}

// mapped is sample() whose snapshot is the digest of a (stand-in) block map.
func mapped() (*Descriptor, []byte) {
	m := bytes.Repeat([]byte("SLKBMAP\x00 a block map "), 100)
	d := sample()
	d.Snapshot = digest.FromBytes(m)
	d.Layers[1].Snapshot = d.Snapshot
	return d, m
}

func TestLayerCarriesMap(t *testing.T) {
	d, m := mapped()
	b, err := EncodeLayerMap(d, m)
	if err != nil {
		t.Fatal(err)
	}
	got, gotMap, err := DecodeLayerMap(bytes.NewReader(b))
	if err != nil || got.Snapshot != d.Snapshot || !bytes.Equal(gotMap, m) {
		t.Fatalf("decoded %v, map of %d bytes, err %v", got, len(gotMap), err)
	}
	// A layer without one carries none; DecodeLayer reads either.
	plain, _ := EncodeLayer(d)
	if _, none, err := DecodeLayerMap(bytes.NewReader(plain)); err != nil || none != nil {
		t.Fatalf("a layer without a map: %d bytes, %v", len(none), err)
	}
	if got, err := DecodeLayer(bytes.NewReader(b)); err != nil || got.Snapshot != d.Snapshot {
		t.Fatalf("DecodeLayer of a layer with a map: %v", err)
	}
	// The map must be the snapshot's, and small enough to carry.
	if _, err := EncodeLayerMap(sample(), m); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a map of another snapshot: %v", err)
	}
	big := make([]byte, MaxCarriedMap+1)
	d2 := sample()
	d2.Snapshot = digest.FromBytes(big)
	if _, err := EncodeLayerMap(d2, big); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a map too large to carry: %v", err)
	}
	desc, _ := d.Encode()
	for _, tc := range []struct {
		name  string
		files map[string]string
	}{
		{"another snapshot's map", map[string]string{LayerDescriptorPath: string(desc), LayerMapPath: "not the map"}},
		{"an empty map", map[string]string{LayerDescriptorPath: string(desc), LayerMapPath: ""}},
		{"a map too large", map[string]string{LayerDescriptorPath: string(desc), LayerMapPath: string(big)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := DecodeLayerMap(bytes.NewReader(tarOf(t, tc.files))); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

func tarOf(t testing.TB, files map[string]string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, data := range files {
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))})
		tw.Write([]byte(data))
	}
	tw.Close()
	return buf.Bytes()
}

func TestDecodeLayerRejects(t *testing.T) {
	good, _ := sample().Encode()
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"ordinary layer", tarOf(t, map[string]string{"etc/passwd": "root"}), ErrNotSlackerLayer},
		{"not a tar", []byte("hello"), ErrNotSlackerLayer},
		{"bad descriptor", tarOf(t, map[string]string{LayerDescriptorPath: "{}"}), ErrMalformed},
		{"too big", append(tarOf(t, map[string]string{"big": strings.Repeat("x", MaxLayerSize)}), tarOf(t, map[string]string{LayerDescriptorPath: string(good)})...), ErrNotSlackerLayer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeLayer(bytes.NewReader(tc.in)); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	// "./" prefixed names, as some tar writers make, are accepted.
	if d, err := DecodeLayer(bytes.NewReader(tarOf(t, map[string]string{"./" + LayerDescriptorPath: string(good)}))); err != nil || d.Snapshot != sample().Snapshot {
		t.Fatalf("./ prefix: %v", err)
	}
}

func FuzzDecodeLayer(f *testing.F) {
	good, _ := EncodeLayer(sample())
	f.Add(good)
	f.Add(tarOf(f, map[string]string{"a": "b"}))
	f.Add([]byte{})
	d, m := mapped()
	withMap, _ := EncodeLayerMap(d, m)
	f.Add(withMap)
	f.Fuzz(func(t *testing.T, b []byte) {
		d, blockMap, err := DecodeLayerMap(bytes.NewReader(b))
		if err == nil {
			if _, err := d.Encode(); err != nil {
				t.Fatalf("decoded a descriptor that does not encode: %v", err)
			}
			if blockMap != nil && digest.FromBytes(blockMap) != d.Snapshot {
				t.Fatal("returned a map that is not the snapshot's")
			}
		}
	})
}
