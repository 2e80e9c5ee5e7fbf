package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"strings"
	"testing"
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
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeLayer(bytes.NewReader(b))
		if err == nil {
			if _, err := d.Encode(); err != nil {
				t.Fatalf("decoded a descriptor that does not encode: %v", err)
			}
		}
	})
}
