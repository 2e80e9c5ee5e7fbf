package registry

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/testenv/services"
)

// lyingRegistry is go-containerregistry's in-process registry (lenient enough to
// store what a hostile pusher crafts, unlike distribution, which refuses manifests
// over 4 MiB), able to serve other bytes than it stored for chosen blobs.
type lyingRegistry struct {
	h    http.Handler
	mu   sync.Mutex
	lies map[string][]byte // blob digest -> what to serve instead
}

func (l *lyingRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	for d, b := range l.lies {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/blobs/"+d) {
			l.mu.Unlock()
			w.Header().Set("Docker-Content-Digest", d)
			w.Write(b)
			return
		}
	}
	l.mu.Unlock()
	l.h.ServeHTTP(w, r)
}

// TestPullHostileManifests pulls crafted manifests and blobs: each is refused with
// an error wrapping image.ErrMalformed or ErrNotSlacker, in one line, and never
// yields a descriptor.
func TestPullHostileManifests(t *testing.T) {
	ctx := context.Background()
	lr := &lyingRegistry{h: ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))), lies: map[string][]byte{}}
	srv := httptest.NewServer(lr)
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	good := &image.Descriptor{Snapshot: digest.FromString("snap"), Size: 1 << 30, DataSize: 1 << 20, Created: time.Now().UTC()}
	cfg, _ := good.Encode()
	layer, err := image.EncodeLayer(good)
	if err != nil {
		t.Fatal(err)
	}
	putBlob := func(ref string, b []byte) ocispec.Descriptor {
		t.Helper()
		r, _ := name.ParseReference(ref)
		l := static.NewLayer(b, types.MediaType("application/octet-stream"))
		if err := remote.WriteLayer(r.Context(), l); err != nil {
			t.Fatal(err)
		}
		return ocispec.Descriptor{MediaType: image.MediaType, Digest: digest.FromBytes(b), Size: int64(len(b))}
	}
	putManifest := func(ref string, m any) {
		t.Helper()
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := name.ParseReference(ref)
		if err := remote.Put(r, rawManifest{b, types.OCIManifestSchema1}); err != nil {
			t.Fatal(err)
		}
	}
	manifest := func(cfgDesc ocispec.Descriptor, layers []ocispec.Descriptor, ann map[string]string) ocispec.Manifest {
		m := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, Config: cfgDesc, Layers: layers, Annotations: ann}
		m.SchemaVersion = 2
		return m
	}
	tests := []struct {
		name  string
		setup func(ref string)
		want  error
		msg   string
	}{
		{"manifest over 4 MiB", func(ref string) {
			putManifest(ref, manifest(putBlob(ref, cfg), nil, map[string]string{"pad": strings.Repeat("x", 5<<20)}))
		}, image.ErrMalformed, "larger than"},
		{"blob size over the bound", func(ref string) {
			d := putBlob(ref, cfg)
			d.Size = image.MaxLayerSize + 1
			putManifest(ref, manifest(d, nil, nil))
		}, image.ErrMalformed, "larger than"},
		{"negative blob size", func(ref string) {
			d := putBlob(ref, cfg)
			d.Size = -5
			putManifest(ref, manifest(d, nil, nil))
		}, image.ErrMalformed, "bytes"},
		{"registry serves other bytes for the descriptor", func(ref string) {
			d := putBlob(ref, cfg)
			other := *good
			other.Snapshot = digest.FromString("evil")
			b, _ := other.Encode()
			lr.mu.Lock()
			lr.lies[d.Digest.String()] = b
			lr.mu.Unlock()
			putManifest(ref, manifest(d, nil, nil))
		}, nil, "checksum"},
		{"descriptor that is not JSON", func(ref string) {
			putManifest(ref, manifest(putBlob(ref, []byte("{not json")), nil, nil))
		}, image.ErrMalformed, "malformed image descriptor"},
		{"descriptor of a future schema", func(ref string) {
			b := []byte(strings.Replace(string(cfg), `"schemaVersion":1`, `"schemaVersion":2`, 1))
			putManifest(ref, manifest(putBlob(ref, b), nil, nil))
		}, image.ErrMalformed, "schema version 2"},
		{"descriptor naming a bad snapshot digest", func(ref string) {
			b := []byte(strings.Replace(string(cfg), good.Snapshot.String(), "sha256:zz", 1))
			putManifest(ref, manifest(putBlob(ref, b), nil, nil))
		}, image.ErrMalformed, "not a sha256 digest"},
		{"layer annotated with another snapshot", func(ref string) {
			d := putBlob(ref, layer)
			d.MediaType = ocispec.MediaTypeImageLayer
			d.Annotations = map[string]string{labels.LayerSnapshot: digest.FromString("other").String()}
			putManifest(ref, manifest(ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromString("{}"), Size: 2},
				[]ocispec.Descriptor{d}, nil))
		}, image.ErrMalformed, "annotation says"},
		{"an ordinary image", func(ref string) { services.PushRandomImage(t, ref) }, ErrNotSlacker, "slacker convert"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ref := host + "/hostile/m" + string(rune('a'+i)) + ":v1"
			tc.setup(ref)
			d, _, err := Pull(ctx, ref, Options{Timeout: 10 * time.Second})
			if err == nil || d != nil {
				t.Fatalf("pulled %+v", d)
			}
			if (tc.want != nil && !errors.Is(err, tc.want)) || !strings.Contains(err.Error(), tc.msg) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("pull: %v; want %v with %q, one line", err, tc.want, tc.msg)
			}
		})
	}
}
