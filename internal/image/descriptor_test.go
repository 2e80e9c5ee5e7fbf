package image

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func sample() *Descriptor {
	s1, s2 := digest.FromString("s1"), digest.FromString("s2")
	d1 := digest.FromString("layer1")
	return &Descriptor{
		Snapshot: s2, Size: 10 << 30, DataSize: 200 << 20,
		Layers:  []Layer{{Snapshot: s1, DiffID: d1, ChainID: d1}, {Snapshot: s2, DiffID: digest.FromString("l2"), ChainID: ChainID(d1, digest.FromString("l2"))}},
		Config:  ocispec.ImageConfig{Cmd: []string{"echo", "hello"}, Env: []string{"PATH=/bin"}, WorkingDir: "/", User: "1000:1000"},
		Source:  &Source{Reference: "localhost/debian:bookworm", ManifestDigest: digest.FromString("m")},
		Created: time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC),
	}
}

func TestRoundTrip(t *testing.T) {
	b, err := sample().Encode()
	if err != nil {
		t.Fatal(err)
	}
	d, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if d.Snapshot != sample().Snapshot || d.Config.User != "1000:1000" || len(d.Layers) != 2 || d.Source.Reference == "" {
		t.Fatalf("decoded %+v", d)
	}
	b2, _ := d.Encode()
	if string(b) != string(b2) {
		t.Fatal("encode is not stable")
	}
}

func TestDecodeRejects(t *testing.T) {
	good, _ := sample().Encode()
	s := string(good)
	cases := map[string]string{
		"not json":       "{",
		"trailing":       s + "{}",
		"version":        strings.Replace(s, `"schemaVersion":1`, `"schemaVersion":2`, 1),
		"media type":     strings.Replace(s, MediaType, "application/json", 1),
		"bad snapshot":   strings.Replace(s, `"snapshot":"sha256:`, `"snapshot":"sha256:zz`, 1),
		"negative size":  strings.Replace(s, `"size":10737418240`, `"size":-1`, 1),
		"unaligned size": strings.Replace(s, `"size":10737418240`, `"size":10737418241`, 1),
		"too big":        s[:len(s)-1] + `,"x":"` + strings.Repeat("a", MaxSize) + `"}`,
	}
	for name, in := range cases {
		if _, err := Decode([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	d := sample()
	d.Layers[1].Snapshot = digest.FromString("other")
	if _, err := d.Encode(); !errors.Is(err, ErrMalformed) {
		t.Errorf("lineage not ending at the image's snapshot: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	good, _ := sample().Encode()
	f.Add(good)
	f.Add([]byte(`{"schemaVersion":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		enc, err := d.Encode()
		if err != nil {
			t.Fatalf("decoded descriptor does not encode: %v", err)
		}
		if _, err := Decode(enc); err != nil {
			t.Fatalf("re-encoded descriptor does not decode: %v", err)
		}
	})
}
