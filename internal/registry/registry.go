package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
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

	"github.com/slacker-dev/slacker/internal/distribution"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/labels"
)

// Errors. Besides these, no manifest at the reference is errdefs.ErrNotFound ("image
// not found in the registry"), a server error (5xx) after the retries
// errdefs.ErrUnavailable ("registry unavailable": it may succeed later), and a blob
// that does not match its digest errdefs.ErrCorrupt.
var (
	// ErrNotSlacker: the reference exists but is not a Slacker image (an ordinary
	// OCI image, which the CLI converts instead); errdefs.ErrUnsupported.
	ErrNotSlacker = errdefs.New(errdefs.ErrUnsupported, "not a Slacker image")
	// ErrUnreachable: the registry could not be reached; errdefs.ErrUnavailable.
	ErrUnreachable = errdefs.New(errdefs.ErrUnavailable, "registry unreachable")
)

// Options tune registry access.
type Options struct {
	// Insecure talks plain HTTP to any registry (loopback and private networks
	// always get HTTP).
	Insecure bool
	// Timeout bounds each call (30s).
	Timeout time.Duration
	// SnapshotNamed, if set, is called by Pull with the snapshot the manifest's
	// Slacker layer names, as soon as the manifest is read and before the layer
	// is: the caller may begin the snapshot's lookup (its block map's fetch) then,
	// beside the layer's. The name is the manifest's word, not yet checked
	// against the layer: a hint, never a result.
	SnapshotNamed func(digest.Digest)
	// BlockMap, for Push: the encoded block map of the descriptor's snapshot, to
	// be carried in the Slacker layer (image.EncodeLayerMap) if the layer with it
	// is embedded in the manifest (at most MaxInlineLayer bytes); nil carries none.
	BlockMap []byte
	// Store, for Push: where the snapshot is stored, as the pushing node names
	// its store; recorded in the manifest (labels.ManifestStore).
	Store string
	// NoEmbed, for Push: never embed the Slacker layer in the manifest (see
	// MaxInlineLayer), nor carry the map in it, for a registry mostly read by
	// clients that ignore embedded data (containerd) over links whose first TCP
	// window is small.
	NoEmbed bool
}

// MaxInlineLayer bounds a Slacker layer embedded in its manifest's descriptor
// (the OCI 1.1 descriptor's data field): a pull then reads the descriptor and
// the carried block map with the manifest, in one round trip. 60 KiB, 80 KB
// in base64: with the rest of the manifest, within the first window a new TCP
// connection is sent over a link with 9000-byte frames (ten segments). A layer
// that would be larger carries no map and is a blob of its own, read on the
// same connection after the manifest, beside the map's lookup in the store.
const MaxInlineLayer = 60 << 10

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

func (o Options) remote(ctx context.Context, reg name.Registry) []remote.Option {
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithUserAgent("slacker")}
	if o.Insecure {
		opts = append(opts, remote.WithTransport(plainHTTP{host: reg.RegistryStr(), next: remote.DefaultTransport}))
	}
	return opts
}

// plainHTTP carries requests to a registry set to plain HTTP, refusing at once the
// HTTPS requests to that registry's host. go-containerregistry tries HTTPS before
// HTTP even for a registry named insecure; over a link with a 20 ms round trip that
// attempt (a connection, a failed TLS handshake) is 40 ms of every pull and push.
// HTTPS to other hosts (a blob redirected to object storage) goes through.
type plainHTTP struct {
	host string
	next http.RoundTripper
}

func (t plainHTTP) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme == "https" && r.URL.Host == t.host {
		return nil, fmt.Errorf("%s: HTTPS not tried: the registry is set to plain HTTP (--insecure-registry)", t.host)
	}
	return t.next.RoundTrip(r)
}

func (o Options) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	t := o.Timeout
	if t <= 0 {
		t = 30 * time.Second
	}
	return context.WithTimeout(ctx, t)
}

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
	BytesMoved     int64         // manifest + image config + Slacker layer
	// BlockMap, from a pull: the snapshot's encoded block map, if the layer
	// carries it; checked to be the snapshot's (its digest), not decoded.
	BlockMap []byte `json:"-"`
	// Store, from a pull: the store the snapshot was pushed from, as the
	// manifest names it (labels.ManifestStore); a hint, "" if none.
	Store string `json:"-"`
	// Embedded says the Slacker layer came with the manifest (its descriptor's
	// data): the pull read the registry once.
	Embedded bool `json:"-"`
}

// Push publishes d at ref as an OCI image whose one layer is the Slacker layer
// (image.EncodeLayer), annotated with the snapshot ID so that containerd's Slacker
// snapshotter mounts the snapshot instead of unpacking the layer (docs/format.md).
func Push(ctx context.Context, ref string, d *image.Descriptor, o Options) (*Result, error) {
	r, err := o.ref(ref)
	if err != nil {
		return nil, err
	}
	ctx, cancel := o.withTimeout(ctx)
	defer cancel()
	// The map rides in the layer only if the layer then travels in the manifest:
	// a layer read apart would be read after the manifest, slower than the
	// store's lookup of the map beside it (the window of a new connection grows
	// a round trip at a time), and the pull waits for the layer.
	var layer []byte
	if o.BlockMap != nil && len(o.BlockMap) <= image.MaxCarriedMap && !o.NoEmbed {
		l, err := image.EncodeLayerMap(d, o.BlockMap)
		if err != nil {
			return nil, err
		}
		if len(l) <= MaxInlineLayer {
			layer = l
		}
	}
	if layer == nil {
		l, err := image.EncodeLayer(d)
		if err != nil {
			return nil, err
		}
		layer = l
	}
	layerDigest := digest.FromBytes(layer)
	arch := d.Platform.Architecture
	if arch == "" {
		arch = runtime.GOARCH
	}
	created := d.Created.UTC()
	cfg, err := json.Marshal(ocispec.Image{
		Created:  &created,
		Platform: ocispec.Platform{OS: "linux", Architecture: arch, Variant: d.Platform.Variant},
		Config:   d.Config,
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{layerDigest}},
		History: []ocispec.History{{Created: &created, CreatedBy: "slacker push",
			Comment: "Slacker image: the root filesystem is snapshot " + d.Snapshot.String() + "; run it with the Slacker snapshotter"}},
	})
	if err != nil {
		return nil, err
	}
	// One pusher for the blobs and the manifest: one ping of the registry (see
	// Pull) and one connection.
	p, err := remote.NewPusher(o.remote(ctx, r.Context().Registry)...)
	if err != nil {
		return nil, mapErr(ref, err)
	}
	for _, l := range []v1.Layer{
		static.NewLayer(cfg, types.MediaType(ocispec.MediaTypeImageConfig)),
		static.NewLayer(layer, types.MediaType(ocispec.MediaTypeImageLayer)),
	} {
		if err := p.Upload(ctx, r.Context(), l); err != nil {
			return nil, mapErr(ref, err)
		}
	}
	layerDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: layerDigest, Size: int64(len(layer)),
		Annotations: map[string]string{labels.LayerSnapshot: d.Snapshot.String()}}
	if len(layer) <= MaxInlineLayer && !o.NoEmbed {
		layerDesc.Data = layer
	}
	m := ocispec.Manifest{
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(cfg), Size: int64(len(cfg))},
		Layers:    []ocispec.Descriptor{layerDesc},
		Annotations: map[string]string{
			labels.ManifestSnapshot:   d.Snapshot.String(),
			ocispec.AnnotationCreated: created.Format(time.RFC3339),
		},
	}
	if o.Store != "" {
		m.Annotations[labels.ManifestStore] = o.Store
	}
	m.SchemaVersion = 2
	mb, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		err := p.Put(ctx, r, rawManifest{mb, types.OCIManifestSchema1})
		if err == nil {
			break
		}
		if !distribution.LinkRace(err) || attempt == 3 || ctx.Err() != nil {
			return nil, mapErr(ref, err)
		}
		select { // another push of the same blob is rewriting its link: a moment
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
	return &Result{Reference: r.Name(), ManifestDigest: digest.FromBytes(mb), BytesMoved: int64(len(mb) + len(cfg) + len(layer))}, nil
}

// Pull resolves ref to a Slacker image descriptor. It reads the manifest and the
// Slacker layer (or, for artifacts pushed before the Slacker layer existed, the
// descriptor as config blob): kilobytes, whatever the image's size.
func Pull(ctx context.Context, ref string, o Options) (*image.Descriptor, *Result, error) {
	r, err := o.ref(ref)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := o.withTimeout(ctx)
	defer cancel()
	p, desc, err := o.getManifest(ctx, r)
	if err != nil {
		return nil, nil, mapErr(ref, err)
	}
	blob, store, err := slackerBlob(ref, desc.Manifest, desc.MediaType)
	if err != nil {
		return nil, nil, err
	}
	res := &Result{Reference: r.Name(), ManifestDigest: digest.Digest(desc.Digest.String()), Store: store}
	b := blob.Data
	if b != nil {
		res.Embedded = true
	} else {
		if snap := digest.Digest(blob.Annotations[labels.LayerSnapshot]); o.SnapshotNamed != nil && snap.Validate() == nil {
			o.SnapshotNamed(snap)
		}
		if b, err = fetchBlob(ctx, p, r, blob); err != nil {
			return nil, nil, mapErr(ref, err)
		}
	}
	d, blockMap, err := decodeBlob(ref, blob, b)
	if err != nil {
		return nil, nil, err
	}
	res.BlockMap = blockMap
	res.BytesMoved = int64(len(desc.Manifest))
	if !res.Embedded {
		res.BytesMoved += int64(len(b))
	}
	return d, res, nil
}

// fetchBlob reads the Slacker blob from the registry, on the puller's connection.
func fetchBlob(ctx context.Context, p *remote.Puller, r name.Reference, blob ocispec.Descriptor) ([]byte, error) {
	l, err := p.Layer(ctx, r.Context().Digest(blob.Digest.String()))
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, image.MaxLayerSize+1))
}

// getManifest reads r's manifest and returns the puller that read it, for the
// blob that follows (on the same connection). A registry the options say is
// plain HTTP, for which no credentials are configured, is asked at once, without
// go-containerregistry's ping (GET /v2/ to learn how it authenticates): a round
// trip less, 20 ms of every pull over a link with a 20 ms round trip. If it asks
// for credentials after all, the manifest is read again the usual way (ping,
// then the challenge it answered): a round trip more than the usual way, for a
// plain-HTTP registry that wants credentials, which it would receive in clear.
func (o Options) getManifest(ctx context.Context, r name.Reference) (*remote.Puller, *remote.Descriptor, error) {
	reg := r.Context().Registry
	if o.Insecure {
		if auth, err := authn.DefaultKeychain.Resolve(reg); err == nil && auth == authn.Anonymous {
			p, desc, err := o.getManifestUnpinged(ctx, r)
			var terr *transport.Error
			if !errors.As(err, &terr) || (terr.StatusCode != http.StatusUnauthorized && terr.StatusCode != http.StatusForbidden) {
				return p, desc, err
			}
		}
	}
	// One puller for both requests: the registry is pinged once, and the
	// connection is reused.
	p, err := remote.NewPuller(o.remote(ctx, reg)...)
	if err != nil {
		return nil, nil, err
	}
	desc, err := p.Get(ctx, r)
	return p, desc, err
}

// getManifestUnpinged is getManifest's request without the ping: go-containerregistry
// skips the ping for a transport it is handed as a transport.Wrapper, here one
// that sends anonymous requests over plain HTTP.
func (o Options) getManifestUnpinged(ctx context.Context, r name.Reference) (*remote.Puller, *remote.Descriptor, error) {
	reg := r.Context().Registry
	plain := transport.NewUserAgent(plainHTTP{host: reg.RegistryStr(), next: remote.DefaultTransport}, "slacker")
	tr, err := transport.FromToken(reg, authn.Anonymous, transport.NewRetry(plain), &transport.Challenge{Insecure: true}, &transport.Token{})
	if err != nil {
		return nil, nil, err
	}
	p, err := remote.NewPuller(remote.WithContext(ctx), remote.WithTransport(tr))
	if err != nil {
		return nil, nil, err
	}
	desc, err := p.Get(ctx, r)
	return p, desc, err
}

// MaxManifestSize bounds a pulled manifest (go-containerregistry reads up to
// 100 MiB; a Slacker image's manifest is a few kilobytes).
const MaxManifestSize = 4 << 20

// slackerBlob checks a pulled manifest and returns the descriptor of the blob that
// carries the Slacker descriptor (the config, first format, or the one layer) and
// the store the manifest says the snapshot was pushed from ("" if it does not
// say). Data embedded in the blob's descriptor is the blob only if it is exactly
// the blob (OCI 1.1: its size and digest); anything else is refused.
func slackerBlob(ref string, raw []byte, mt types.MediaType) (ocispec.Descriptor, string, error) {
	var blob ocispec.Descriptor
	if len(raw) > MaxManifestSize {
		return blob, "", fmt.Errorf("%s: manifest of %d bytes is larger than %d: %w", ref, len(raw), MaxManifestSize, image.ErrMalformed)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return blob, "", fmt.Errorf("%s: manifest: %w: %v", ref, image.ErrMalformed, err)
	}
	switch {
	case m.Config.MediaType == image.MediaType: // descriptor as config (first format)
		blob = m.Config
	case len(m.Layers) == 1 && m.Layers[0].Annotations[labels.LayerSnapshot] != "":
		blob = m.Layers[0]
	default:
		kind := string(mt)
		if mt.IsIndex() {
			kind = "an image index (" + kind + ")"
		}
		return blob, "", fmt.Errorf("%s is %s with config %q and no Slacker layer: %w; convert it first with `slacker convert %s NAME` and push that",
			ref, kind, m.Config.MediaType, ErrNotSlacker, ref)
	}
	if blob.Size > image.MaxLayerSize || blob.Size < 0 {
		return blob, "", fmt.Errorf("%s: Slacker blob of %d bytes is larger than %d: %w", ref, blob.Size, image.MaxLayerSize, image.ErrMalformed)
	}
	if err := blob.Digest.Validate(); err != nil || blob.Digest.Algorithm() != digest.SHA256 {
		return blob, "", fmt.Errorf("%s: Slacker blob digest %q: %w", ref, blob.Digest, image.ErrMalformed)
	}
	if blob.Data != nil && (int64(len(blob.Data)) != blob.Size || digest.FromBytes(blob.Data) != blob.Digest) {
		return blob, "", errdefs.Errorf(errdefs.ErrCorrupt, "%s: the data embedded in the manifest is not its Slacker blob %s", ref, blob.Digest)
	}
	return blob, m.Annotations[labels.ManifestStore], nil
}

// decodeBlob verifies and decodes the blob slackerBlob named, and returns the
// block map the layer carries, if any (checked to be the snapshot's).
func decodeBlob(ref string, blob ocispec.Descriptor, b []byte) (*image.Descriptor, []byte, error) {
	if digest.FromBytes(b) != blob.Digest {
		return nil, nil, errdefs.Errorf(errdefs.ErrCorrupt, "%s: blob does not match its digest %s", ref, blob.Digest)
	}
	var d *image.Descriptor
	var blockMap []byte
	var err error
	if blob.MediaType == image.MediaType {
		d, err = image.Decode(b)
	} else {
		d, blockMap, err = image.DecodeLayerMap(bytes.NewReader(b))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", ref, err)
	}
	if want := blob.Annotations[labels.LayerSnapshot]; want != "" && want != d.Snapshot.String() {
		return nil, nil, fmt.Errorf("%s: the layer names snapshot %s but its annotation says %s: %w", ref, d.Snapshot, want, image.ErrMalformed)
	}
	return d, blockMap, nil
}

// mapErr turns transport failures into the package's errors, once.
func mapErr(ref string, err error) error {
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch terr.StatusCode {
		case http.StatusNotFound:
			return errdefs.Errorf(errdefs.ErrNotFound, "%s: image not found in the registry", ref)
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("%s: access denied by the registry (log in with `docker login`; credentials are read from the Docker config): %w", ref, err)
		}
		if terr.StatusCode >= 500 {
			return errdefs.Errorf(errdefs.ErrUnavailable, "%s: registry unavailable: it answered %d %s; try again later",
				ref, terr.StatusCode, http.StatusText(terr.StatusCode))
		}
		for _, d := range terr.Errors {
			if d.Code == transport.ManifestUnknownErrorCode || d.Code == transport.NameUnknownErrorCode {
				return errdefs.Errorf(errdefs.ErrNotFound, "%s: image not found in the registry", ref)
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
