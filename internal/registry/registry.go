package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/internal/image"
)

// Errors.
var (
	// ErrNotSlacker: the reference exists but is not a Slacker image.
	ErrNotSlacker = errors.New("not a Slacker image")
	// ErrNotFound: no manifest at the reference.
	ErrNotFound = errors.New("image not found in the registry")
	// ErrUnreachable: the registry could not be reached.
	ErrUnreachable = errors.New("registry unreachable")
)

// Options tune registry access.
type Options struct {
	// Insecure talks plain HTTP to any registry (loopback and private networks
	// always get HTTP).
	Insecure bool
	// Timeout bounds each call (30s).
	Timeout time.Duration
}

func (o Options) ref(s string) (name.Reference, error) {
	var opts []name.Option
	if o.Insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(s, opts...)
	if err != nil {
		return nil, fmt.Errorf("registry reference %q: %w", s, err)
	}
	return r, nil
}

func (o Options) remote(ctx context.Context) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithUserAgent("slacker")}
}

func (o Options) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	t := o.Timeout
	if t <= 0 {
		t = 30 * time.Second
	}
	return context.WithTimeout(ctx, t)
}

// emptyJSON is the OCI empty descriptor's content, used as the one layer.
var emptyJSON = []byte("{}")

type rawManifest struct {
	b  []byte
	mt types.MediaType
}

func (r rawManifest) RawManifest() ([]byte, error)        { return r.b, nil }
func (r rawManifest) MediaType() (types.MediaType, error) { return r.mt, nil }

// Result tells what a push or pull moved.
type Result struct {
	Reference      string        // fully qualified
	ManifestDigest digest.Digest //
	BytesMoved     int64         // manifest + descriptor (+ empty blob)
}

// Push publishes d at ref.
func Push(ctx context.Context, ref string, d *image.Descriptor, o Options) (*Result, error) {
	r, err := o.ref(ref)
	if err != nil {
		return nil, err
	}
	ctx, cancel := o.withTimeout(ctx)
	defer cancel()
	cfg, err := d.Encode()
	if err != nil {
		return nil, err
	}
	cfgLayer := static.NewLayer(cfg, types.MediaType(image.MediaType))
	emptyLayer := static.NewLayer(emptyJSON, types.MediaType(ocispec.MediaTypeEmptyJSON))
	for _, l := range []v1.Layer{cfgLayer, emptyLayer} {
		if err := remote.WriteLayer(r.Context(), l, o.remote(ctx)...); err != nil {
			return nil, mapErr(ref, err)
		}
	}
	m := ocispec.Manifest{
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: image.MediaType,
		Config:       ocispec.Descriptor{MediaType: image.MediaType, Digest: digest.FromBytes(cfg), Size: int64(len(cfg))},
		Layers:       []ocispec.Descriptor{{MediaType: ocispec.MediaTypeEmptyJSON, Digest: digest.FromBytes(emptyJSON), Size: 2}},
		Annotations: map[string]string{
			"dev.slacker.snapshot":    d.Snapshot.String(),
			ocispec.AnnotationCreated: d.Created.UTC().Format(time.RFC3339),
		},
	}
	m.SchemaVersion = 2
	mb, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if err := remote.Put(r, rawManifest{mb, types.OCIManifestSchema1}, o.remote(ctx)...); err != nil {
		return nil, mapErr(ref, err)
	}
	return &Result{Reference: r.Name(), ManifestDigest: digest.FromBytes(mb), BytesMoved: int64(len(mb) + len(cfg) + 2)}, nil
}

// Pull resolves ref to a Slacker image descriptor.
func Pull(ctx context.Context, ref string, o Options) (*image.Descriptor, *Result, error) {
	r, err := o.ref(ref)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := o.withTimeout(ctx)
	defer cancel()
	desc, err := remote.Get(r, o.remote(ctx)...)
	if err != nil {
		return nil, nil, mapErr(ref, err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		return nil, nil, fmt.Errorf("%s: manifest: %w", ref, err)
	}
	if m.Config.MediaType != image.MediaType {
		kind := string(desc.MediaType)
		if desc.MediaType.IsIndex() {
			kind = "an image index (" + kind + ")"
		}
		return nil, nil, fmt.Errorf("%s is %s with config %q: %w; convert it first with `slacker convert %s NAME` and push that",
			ref, kind, m.Config.MediaType, ErrNotSlacker, ref)
	}
	if m.Config.Size > image.MaxSize {
		return nil, nil, fmt.Errorf("%s: descriptor of %d bytes is larger than %d: %w", ref, m.Config.Size, image.MaxSize, image.ErrMalformed)
	}
	l, err := remote.Layer(r.Context().Digest(m.Config.Digest.String()), o.remote(ctx)...)
	if err != nil {
		return nil, nil, mapErr(ref, err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, nil, mapErr(ref, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, image.MaxSize+1))
	if err != nil {
		return nil, nil, mapErr(ref, err)
	}
	if digest.FromBytes(b) != m.Config.Digest {
		return nil, nil, fmt.Errorf("%s: descriptor blob does not match its digest %s", ref, m.Config.Digest)
	}
	d, err := image.Decode(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", ref, err)
	}
	return d, &Result{Reference: r.Name(), ManifestDigest: digest.Digest(desc.Digest.String()),
		BytesMoved: int64(len(desc.Manifest) + len(b))}, nil
}

// mapErr turns transport failures into the package's errors, once.
func mapErr(ref string, err error) error {
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch terr.StatusCode {
		case http.StatusNotFound:
			return fmt.Errorf("%s: %w", ref, ErrNotFound)
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("%s: access denied by the registry (log in with `docker login`; credentials are read from the Docker config): %w", ref, err)
		}
		for _, d := range terr.Errors {
			if d.Code == transport.ManifestUnknownErrorCode || d.Code == transport.NameUnknownErrorCode {
				return fmt.Errorf("%s: %w", ref, ErrNotFound)
			}
		}
	}
	var nerr net.Error
	if errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &nerr) || errors.Is(err, context.DeadlineExceeded) ||
		strings.Contains(err.Error(), "connection refused") {
		return fmt.Errorf("%s: %w: %v", ref, ErrUnreachable, err)
	}
	return fmt.Errorf("%s: %w", ref, err)
}
