package ocistore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
)

func TestManifestRoundTrip(t *testing.T) {
	entries := []entry{rawEntry(digest.FromString("a"), 0, 10), rawEntry(digest.FromString("b"), 10, 0), rawEntry(digest.FromString("c"), 10, 5),
		{d: digest.FromString("d"), off: 15, size: 262144, stored: 7, enc: store.EncodingZstd}}
	blob := digest.FromString("blob")
	created := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	b, err := encodeManifest(blob, entries, created)
	if err != nil {
		t.Fatal(err)
	}
	p, err := decodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if p.blob != blob || p.size != 22 || len(p.entries) != 4 || !p.created.Equal(created) || p.manifest != digest.FromBytes(b) {
		t.Fatalf("decoded %+v", p)
	}
	for i, e := range p.entries {
		if e != entries[i] {
			t.Fatalf("entry %d: %+v, want %+v", i, e, entries[i])
		}
	}
	if _, err := encodeManifest(blob, []entry{rawEntry(digest.FromString("a"), 3, 1)}, created); err == nil {
		t.Fatal("encoded objects that do not start at 0")
	}
}

func TestDecodeManifestRefuses(t *testing.T) {
	good, _ := encodeManifest(digest.FromString("blob"), []entry{rawEntry(digest.FromString("a"), 0, 10)}, time.Now())
	hexA := digest.FromString("a").Encoded()
	for name, b := range map[string]string{
		"not json":        "{",
		"not a pack":      `{"schemaVersion":2,"artifactType":"application/other","layers":[]}`,
		"short objects":   strings.Replace(string(good), hexA+":10", hexA+":9", 1),
		"long objects":    strings.Replace(string(good), hexA+":10", hexA+":11", 1),
		"negative size":   strings.Replace(string(good), hexA+":10", hexA+":-10", 1),
		"bad digest":      strings.Replace(string(good), hexA, "zz", 1),
		"no objects":      strings.Replace(string(good), hexA+":10", "", 1),
		"padded size":     strings.Replace(string(good), hexA+":10", hexA+":010", 1),
		"three fields":    strings.Replace(string(good), hexA+":10", hexA+":100:zstd", 1),
		"unknown codec":   strings.Replace(string(good), hexA+":10", hexA+":100:lz4:10", 1),
		"long stored":     strings.Replace(string(good), hexA+":10", hexA+":100:zstd:11", 1),
		"huge plain size": strings.Replace(string(good), hexA+":10", hexA+":67108865:zstd:10", 1),
		"bad blob digest": strings.Replace(string(good), digest.FromString("blob").String(), "sha256:1234", 1),
		"too big":         string(good) + strings.Repeat(" ", MaxManifestSize),
	} {
		if _, err := decodeManifest([]byte(b)); !errors.Is(err, errdefs.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

// FuzzDecodeManifest: whatever the registry sends, a decoded pack's objects tile
// its blob exactly, and encoding them again gives the same objects.
func FuzzDecodeManifest(f *testing.F) {
	for _, es := range [][]entry{
		{rawEntry(digest.FromString("a"), 0, 10)},
		{rawEntry(digest.FromString("a"), 0, 10), rawEntry(digest.FromString("b"), 10, 262144)},
		{rawEntry(digest.FromString("a"), 0, 10), {d: digest.FromString("b"), off: 10, size: 262144, stored: 900, enc: store.EncodingZstd}},
	} {
		b, _ := encodeManifest(digest.FromString("blob"), es, time.Unix(0, 0))
		f.Add(b)
	}
	f.Add([]byte(`{"schemaVersion":2,"artifactType":"application/vnd.slacker.pack.v1","layers":[{"mediaType":"application/vnd.slacker.pack.v1","digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000","size":1}],"annotations":{"dev.slacker.pack.objects":","}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodeManifest(b)
		if err != nil {
			if !errors.Is(err, errdefs.ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		var off int64
		for _, e := range p.entries {
			if e.off != off || e.size < 0 || e.stored < 0 || store.CheckDigest(e.d) != nil ||
				(e.enc == store.EncodingRaw && e.stored != e.size) {
				t.Fatalf("entry %+v at %d", e, off)
			}
			off += e.stored
		}
		if off != p.size || len(p.entries) == 0 {
			t.Fatalf("entries cover %d of %d", off, p.size)
		}
		again, err := encodeManifest(p.blob, p.entries, p.created)
		if err != nil {
			t.Fatal(err)
		}
		q, err := decodeManifest(again)
		if err != nil || len(q.entries) != len(p.entries) {
			t.Fatalf("re-encoded: %v", err)
		}
	})
}

func FuzzDecodeCheckpoint(f *testing.F) {
	p := &pack{blob: digest.FromString("blob"), size: 15, created: time.Unix(1700000000, 0),
		entries: []entry{rawEntry(digest.FromString("a"), 0, 10), {d: digest.FromString("b"), off: 10, size: 5000, stored: 5, enc: store.EncodingZstd}}}
	f.Add(encodeCheckpoint([]*pack{p, p}))
	f.Add([]byte("x 1 2 y\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, err := decodeCheckpoint(b)
		if err != nil {
			if !errors.Is(err, errdefs.ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		for _, p := range ps {
			var off int64
			for _, e := range p.entries {
				if e.off != off || e.size < 0 || e.stored < 0 {
					t.Fatalf("entry %+v at %d", e, off)
				}
				off += e.stored
			}
			if off != p.size || len(p.entries) == 0 {
				t.Fatalf("entries cover %d of %d", off, p.size)
			}
		}
		again, err := decodeCheckpoint(encodeCheckpoint(ps))
		if err != nil || len(again) != len(ps) {
			t.Fatalf("round trip: %v", err)
		}
	})
}
