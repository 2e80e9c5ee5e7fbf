package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/labels"
)

// Attached descriptors. A Slacker descriptor can be published as an OCI artifact
// whose subject is the ordinary image it was converted from, instead of as an image
// of its own: the image keeps its one name, stock clients pull it as it always
// was, and Slacker finds the descriptor among the image's referrers (the registry's
// referrers API, or the referrers tag schema, "sha256-<digest>", where the
// registry has no such API, as Debian's distribution 2.8). docs/format.md, "The
// attached descriptor".

// ArtifactType is the artifactType of an attached descriptor.
const ArtifactType = "application/vnd.slacker.descriptor.v1"

// emptyJSON is the OCI empty descriptor's content, the artifact's config.
var emptyJSON = []byte("{}")

// MaxAttached bounds the referrers of one image that Attached reads.
const MaxAttached = 16

// Attach publishes d as an artifact attached to the ordinary image at ref: the
// image manifest d was converted from (for an index, the manifest of d's
// platform), which must still be what ref names: a tag that moved to another image
// since the conversion is refused (errdefs.ErrInvalid), so that a descriptor
// never stands for an image it was not made from. The image is not changed.
func Attach(ctx context.Context, ref string, d *image.Descriptor, o Options) (*Result, error) {
	r, err := o.ref(ref)
	if err != nil {
		return nil, err
	}
	if d.Source == nil || d.Source.ManifestDigest == "" {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "the image was not converted from a registry image (no source manifest): "+
			"it can only be pushed under a name of its own")
	}
	ctx, cancel := o.withTimeout(ctx)
	defer cancel()
	p, err := remote.NewPusher(o.remote(ctx, r.Context().Registry)...)
	if err != nil {
		return nil, mapErr(ref, err)
	}
	pl, err := remote.NewPuller(o.remote(ctx, r.Context().Registry)...)
	if err != nil {
		return nil, mapErr(ref, err)
	}
	subject, err := subjectOf(ctx, pl, r, platformOf(d))
	if err != nil {
		return nil, err
	}
	if digest.Digest(subject.Digest.String()) != d.Source.ManifestDigest {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "%s now names image %s, but this Slacker image was converted from %s: "+
			"convert %s again and attach that", ref, subject.Digest, d.Source.ManifestDigest, ref)
	}
	blob, err := d.Encode()
	if err != nil {
		return nil, err
	}
	for _, l := range []v1.Layer{
		static.NewLayer(emptyJSON, types.MediaType(ArtifactType)),
		static.NewLayer(blob, types.MediaType(image.MediaType)),
	} {
		if err := p.Upload(ctx, r.Context(), l); err != nil {
			return nil, mapErr(ref, err)
		}
	}
	created := d.Created.UTC().Format(time.RFC3339)
	m := ocispec.Manifest{
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: ArtifactType,
		// The config is empty, of the artifact's type too: a registry that reports
		// a referrer's type from its config's media type (OCI 1.0 artifacts, before
		// artifactType) lists it as ours all the same.
		Config: ocispec.Descriptor{MediaType: ArtifactType, Digest: digest.FromBytes(emptyJSON),
			Size: int64(len(emptyJSON)), Data: emptyJSON},
		Layers: []ocispec.Descriptor{{MediaType: image.MediaType, Digest: digest.FromBytes(blob), Size: int64(len(blob))}},
		Subject: &ocispec.Descriptor{MediaType: string(subject.MediaType), Digest: digest.Digest(subject.Digest.String()),
			Size: subject.Size},
		Annotations: map[string]string{labels.ManifestSnapshot: d.Snapshot.String(), ocispec.AnnotationCreated: created},
	}
	m.SchemaVersion = 2
	mb, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	md := digest.FromBytes(mb)
	// By digest, no tag: go-containerregistry adds it to the subject's referrers
	// tag where the registry has no referrers API.
	if err := p.Put(ctx, r.Context().Digest(md.String()), rawManifest{mb, types.OCIManifestSchema1}); err != nil {
		return nil, mapErr(ref, err)
	}
	return &Result{Reference: r.Context().Digest(md.String()).Name(), ManifestDigest: md,
		BytesMoved: int64(len(mb) + len(blob) + len(emptyJSON))}, nil
}

// AttachedDescriptor is a Slacker descriptor found attached to an image.
type AttachedDescriptor struct {
	Descriptor *image.Descriptor
	Artifact   digest.Digest // the artifact's manifest
}

// Rejected is an attached artifact that was not taken, and why.
type Rejected struct {
	Artifact digest.Digest
	Err      error
}

// Attached returns the Slacker descriptors attached to the ordinary image at ref
// (the manifest of this machine's platform, for an index), newest first, and the
// image's manifest digest. An artifact that is malformed, too large, or whose
// descriptor was converted from another image than the one it is attached to is
// left out and reported in rejected (never returned as a descriptor). No
// referrers is no descriptors, not an error.
func Attached(ctx context.Context, ref string, o Options) (found []AttachedDescriptor, subject digest.Digest, rejected []Rejected, err error) {
	r, err := o.ref(ref)
	if err != nil {
		return nil, "", nil, err
	}
	ctx, cancel := o.withTimeout(ctx)
	defer cancel()
	// One puller for the image, its referrers and their artifacts: one token
	// exchange and one ping of the registry, not one per request.
	p, err := remote.NewPuller(o.remote(ctx, r.Context().Registry)...)
	if err != nil {
		return nil, "", nil, mapErr(ref, err)
	}
	sub, err := subjectOf(ctx, p, r, ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH})
	if err != nil {
		return nil, "", nil, err
	}
	subject = digest.Digest(sub.Digest.String())
	idx, err := remote.Referrers(r.Context().Digest(subject.String()), remote.Reuse(p), remote.WithContext(ctx),
		remote.WithFilter("artifactType", ArtifactType))
	if err != nil {
		return nil, subject, nil, mapErr(ref, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, subject, nil, mapErr(ref, err)
	}
	ms := im.Manifests
	if len(ms) > MaxAttached {
		rejected = append(rejected, Rejected{Err: fmt.Errorf("%d artifacts attached to %s: read the first %d", len(ms), subject, MaxAttached)})
		ms = ms[:MaxAttached]
	}
	for _, m := range ms {
		if m.ArtifactType != ArtifactType {
			continue // the fallback tag's index is not filtered by the registry
		}
		ad, err := readAttached(ctx, p, r.Context(), m, subject)
		if err != nil {
			rejected = append(rejected, Rejected{Artifact: digest.Digest(m.Digest.String()), Err: err})
			continue
		}
		found = append(found, ad)
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].Descriptor.Created.After(found[j].Descriptor.Created) })
	return found, subject, rejected, nil
}

// readAttached reads and checks one attached artifact.
func readAttached(ctx context.Context, p *remote.Puller, repo name.Repository, m v1.Descriptor, subject digest.Digest) (AttachedDescriptor, error) {
	var none AttachedDescriptor
	at := repo.Digest(m.Digest.String())
	if m.Size > MaxManifestSize || m.Size < 0 {
		return none, fmt.Errorf("manifest of %d bytes: %w", m.Size, image.ErrMalformed)
	}
	desc, err := p.Get(ctx, at)
	if err != nil {
		return none, mapErr(at.String(), err)
	}
	if len(desc.Manifest) > MaxManifestSize {
		return none, fmt.Errorf("manifest of %d bytes: %w", len(desc.Manifest), image.ErrMalformed)
	}
	var am ocispec.Manifest
	if err := json.Unmarshal(desc.Manifest, &am); err != nil {
		return none, fmt.Errorf("manifest: %w: %v", image.ErrMalformed, err)
	}
	switch {
	case am.Subject == nil || am.Subject.Digest != subject:
		return none, fmt.Errorf("its subject is not %s: %w", subject, image.ErrMalformed)
	case am.ArtifactType != ArtifactType || len(am.Layers) != 1 || am.Layers[0].MediaType != image.MediaType:
		return none, fmt.Errorf("not one Slacker descriptor: %w", image.ErrMalformed)
	case am.Layers[0].Size > image.MaxSize || am.Layers[0].Size < 0:
		return none, fmt.Errorf("descriptor of %d bytes is larger than %d: %w", am.Layers[0].Size, image.MaxSize, image.ErrMalformed)
	}
	l, err := p.Layer(ctx, repo.Digest(am.Layers[0].Digest.String()))
	if err != nil {
		return none, mapErr(at.String(), err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return none, mapErr(at.String(), err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, image.MaxSize+1))
	if err != nil {
		return none, mapErr(at.String(), err)
	}
	d, _, err := decodeBlob(at.String(), am.Layers[0], b)
	if err != nil {
		return none, err
	}
	// The descriptor says which image it was converted from: it must be this one
	// (an artifact copied onto another image, or attached by hand, is not).
	if d.Source == nil || d.Source.ManifestDigest != subject {
		src := digest.Digest("")
		if d.Source != nil {
			src = d.Source.ManifestDigest
		}
		return none, fmt.Errorf("its descriptor was converted from %q, not from %s: %w", src, subject, image.ErrMalformed)
	}
	return AttachedDescriptor{Descriptor: d, Artifact: digest.Digest(m.Digest.String())}, nil
}

// subjectOf returns the descriptor of the image manifest ref names: the manifest
// itself, or, for an index, its manifest for platform.
func subjectOf(ctx context.Context, p *remote.Puller, r name.Reference, platform ocispec.Platform) (v1.Descriptor, error) {
	desc, err := p.Get(ctx, r)
	if err != nil {
		return v1.Descriptor{}, mapErr(r.String(), err)
	}
	if !desc.MediaType.IsIndex() {
		return desc.Descriptor, nil
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return v1.Descriptor{}, mapErr(r.String(), err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return v1.Descriptor{}, mapErr(r.String(), err)
	}
	for _, m := range im.Manifests {
		if m.Platform != nil && m.Platform.OS == platform.OS && m.Platform.Architecture == platform.Architecture &&
			(platform.Variant == "" || m.Platform.Variant == platform.Variant) {
			return m, nil
		}
	}
	return v1.Descriptor{}, errdefs.Errorf(errdefs.ErrNotFound, "%s: no image for %s/%s in its index", r, platform.OS, platform.Architecture)
}

// platformOf returns d's platform (this machine's architecture if it names none).
func platformOf(d *image.Descriptor) ocispec.Platform {
	p := ocispec.Platform{OS: "linux", Architecture: d.Platform.Architecture, Variant: d.Platform.Variant}
	if p.Architecture == "" {
		p.Architecture = runtime.GOARCH
	}
	return p
}

// ChooseAttached is the rule between several descriptors attached to one image
// (two conversions, two stores): of found, newest first as Attached returns them,
// the first that usable accepts (the node's store has its snapshot). The others it
// looked at are returned with usable's reason.
func ChooseAttached(found []AttachedDescriptor, usable func(d *image.Descriptor) error) (*AttachedDescriptor, []Rejected) {
	var passed []Rejected
	for i := range found {
		if err := usable(found[i].Descriptor); err != nil {
			passed = append(passed, Rejected{Artifact: found[i].Artifact, Err: err})
			continue
		}
		return &found[i], passed
	}
	return nil, passed
}
