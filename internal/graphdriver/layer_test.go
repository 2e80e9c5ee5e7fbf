package graphdriver

import (
	"archive/tar"
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
)

var (
	snapA = digest.FromString("a")
	snapB = digest.FromString("b")
)

func TestLayerRoundTrip(t *testing.T) {
	m := Marker{Version: 1, Snapshot: snapA, Parent: snapB, Store: "local:/srv/chunks", Size: 4096}
	b, err := EncodeLayer(m)
	if err != nil {
		t.Fatal(err)
	}
	if b2, _ := EncodeLayer(m); !bytes.Equal(b, b2) {
		t.Fatal("the same marker made two different layers")
	}
	if len(b) > 4096 {
		t.Fatalf("a Slacker layer of %d bytes", len(b))
	}
	if !IsSlackerLayer(b) || !IsSlackerLayer(b[:len(b)-1024]) {
		t.Fatal("IsSlackerLayer does not recognize the layer (or the layer without its end marker)")
	}
	got, err := DecodeLayer(b)
	if err != nil || got != m {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, m)
	}
	// The one entry is a hard link to Explanation, so that stock unpackers fail
	// quoting it; the name has to be a valid file name for that.
	hdr, err := tar.NewReader(bytes.NewReader(b)).Next()
	if err != nil || hdr.Typeflag != tar.TypeLink || hdr.Linkname != Explanation || hdr.Size != 0 {
		t.Fatalf("entry %+v, %v", hdr, err)
	}
	if len(Explanation) >= 255 || strings.ContainsAny(Explanation, "/\x00") {
		t.Fatalf("Explanation is not a valid file name (%d bytes)", len(Explanation))
	}
}

func rawLayer(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	tw.Close()
	return buf.Bytes()
}

func TestDecodeLayerRefuses(t *testing.T) {
	good := `{"version":1,"snapshot":"` + snapA.String() + `","size":1}`
	marker := func(js string) map[string]string { return map[string]string{MarkerKey: js} }
	link := func(js string) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeLink, Name: LayerEntryName, Linkname: Explanation, PAXRecords: marker(js)}
	}
	tests := []struct {
		name  string
		layer []byte
		want  error
	}{
		{"ordinary layer", rawLayer(t, &tar.Header{Typeflag: tar.TypeReg, Name: "etc/motd", Size: 3, Mode: 0o644}), ErrNotSlackerLayer},
		{"empty", nil, ErrNotSlackerLayer},
		{"not a tar", []byte("hello"), ErrNotSlackerLayer},
		{"version 2", rawLayer(t, link(`{"version":2,"snapshot":"`+snapA.String()+`","size":1}`)), ErrMalformedLayer},
		{"bad snapshot", rawLayer(t, link(`{"version":1,"snapshot":"sha256:zz","size":1}`)), ErrMalformedLayer},
		{"md5 snapshot", rawLayer(t, link(`{"version":1,"snapshot":"md5:d41d8cd98f00b204e9800998ecf8427e","size":1}`)), ErrMalformedLayer},
		{"negative size", rawLayer(t, link(`{"version":1,"snapshot":"`+snapA.String()+`","size":-1}`)), ErrMalformedLayer},
		{"unknown field", rawLayer(t, link(`{"version":1,"snapshot":"`+snapA.String()+`","size":1,"x":1}`)), ErrMalformedLayer},
		{"trailing data", rawLayer(t, link(good+`{}`)), ErrMalformedLayer},
		{"not json", rawLayer(t, link(`nope`)), ErrMalformedLayer},
		{"regular file", rawLayer(t, &tar.Header{Typeflag: tar.TypeReg, Name: LayerEntryName, PAXRecords: marker(good)}), ErrMalformedLayer},
		{"with content", rawLayer(t, &tar.Header{Typeflag: tar.TypeReg, Name: LayerEntryName, Size: 10, PAXRecords: marker(good)}), ErrMalformedLayer},
		{"second entry", rawLayer(t, link(good), &tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd", Size: 5}), ErrMalformedLayer},
		{"too large", append(rawLayer(t, link(good)), make([]byte, maxLayerPeek)...), ErrMalformedLayer},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeLayer(tc.layer)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := DecodeLayer(rawLayer(t, link(good))); err != nil {
		t.Fatalf("the valid layer of the table: %v", err)
	}
	if _, err := EncodeLayer(Marker{Version: 1, Snapshot: "sha256:nope"}); !errors.Is(err, ErrMalformedLayer) {
		t.Fatalf("EncodeLayer of a bad marker: %v", err)
	}
}

func FuzzDecodeLayer(f *testing.F) {
	b, _ := EncodeLayer(Marker{Version: 1, Snapshot: snapA, Parent: snapB, Store: "local:/x", Size: 1})
	f.Add(b)
	f.Add([]byte{})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "a", Typeflag: tar.TypeReg, Size: 1})
	tw.Write([]byte("x"))
	tw.Close()
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeLayer(b)
		if err != nil {
			return
		}
		// What decodes is valid and encodes back to a layer that decodes the same.
		b2, err := EncodeLayer(m)
		if err != nil {
			t.Fatalf("decoded an invalid marker %+v: %v", m, err)
		}
		if m2, err := DecodeLayer(b2); err != nil || m2 != m {
			t.Fatalf("re-encoded marker decodes to %+v, %v", m2, err)
		}
	})
}
