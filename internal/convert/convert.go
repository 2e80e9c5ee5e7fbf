package convert

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/progress"
	"github.com/slacker-dev/slacker/internal/units"
)

// Node is what conversion needs from slackerd (*api.Client has it).
type Node interface {
	Mkfs(ctx context.Context, r api.MkfsRequest) (api.Snapshot, error)
	Snapshot(ctx context.Context, id digest.Digest) (api.Snapshot, error)
	CreateVolume(ctx context.Context, r api.CreateVolumeRequest) (api.Volume, error)
	UnmountVolume(ctx context.Context, id string) error
	SnapshotVolume(ctx context.Context, id string, r api.SnapshotRequest) (api.Snapshot, error)
	DeleteVolume(ctx context.Context, id string) error
}

// Chains caches conversions by key (*names.Store has it).
type Chains interface {
	Chain(key digest.Digest) (digest.Digest, error)
	PutChain(key, snapshot digest.Digest) error
	ForgetChain(key digest.Digest) error
}

// Options configure Convert.
type Options struct {
	Node   Node
	Chains Chains
	// Size is the virtual size of the image's filesystem (0: slackerd's default).
	Size int64
	// NoDevices refuses layers with device nodes (they are allowed by default:
	// debootstrap-made images carry /dev entries).
	NoDevices bool
	// Progress is told of each step, and of each layer's bytes as they are read
	// (nil: nothing).
	Progress progress.Reporter
	Logger   *slog.Logger

	stored bool // layers are read as stored (docker-archive)
}

// Stats describe a conversion.
type Stats struct {
	Layers         int
	LayersReused   int
	BytesApplied   int64 // uncompressed layer bytes applied
	BytesUploaded  int64 // new chunk bytes uploaded
	CompressedSize int64 // the source's layer blobs
	Took           time.Duration
}

// keyVersion changes whenever conversion would produce different snapshots for the
// same input (filesystem parameters, applier rules), so stale cache entries are
// never reused.
const keyVersion = "slacker-convert-v1"

func baseKey(size int64) digest.Digest {
	return digest.FromString(fmt.Sprintf("%s mkfs size=%d", keyVersion, size))
}

func layerKey(size int64, chainID digest.Digest, noDevices bool) digest.Digest {
	return digest.FromString(fmt.Sprintf("%s layer size=%d devices=%v chain=%s", keyVersion, size, !noDevices, chainID))
}

func (o *Options) printf(format string, args ...any) { o.Progress.Step(format, args...) }

// Convert makes the snapshots of img and returns its descriptor.
func Convert(ctx context.Context, src *Source, o Options) (*image.Descriptor, *Stats, error) {
	start := time.Now()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Progress == nil {
		o.Progress = progress.Discard
	}
	img := src.Image
	o.stored = src.Kind == "docker-archive"
	if err := checkMetadataSize(img); err != nil {
		return nil, nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, nil, fmt.Errorf("read image config: %w", err)
	}
	if cfg.OS != "" && cfg.OS != "linux" {
		return nil, nil, fmt.Errorf("image is for %s; only linux images run here", cfg.OS)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, nil, fmt.Errorf("read image layers: %w", err)
	}
	if len(layers) != len(cfg.RootFS.DiffIDs) {
		return nil, nil, fmt.Errorf("image has %d layers but its config lists %d diff IDs", len(layers), len(cfg.RootFS.DiffIDs))
	}
	manifestDigest, _ := img.Digest()
	st := &Stats{Layers: len(layers)}

	// The blank filesystem every image starts from, shared by all of them.
	parent, err := o.cached(ctx, baseKey(o.Size))
	if err != nil {
		return nil, nil, err
	}
	if parent == "" {
		snap, err := o.Node.Mkfs(ctx, api.MkfsRequest{Size: o.Size})
		if err != nil {
			return nil, nil, fmt.Errorf("make the base filesystem: %w", err)
		}
		parent = snap.ID
		if err := o.Chains.PutChain(baseKey(o.Size), parent); err != nil {
			return nil, nil, err
		}
		o.printf("base filesystem: %s (%s virtual)", short(parent), units.Bytes(snap.Size))
	}

	var lineage []image.Layer
	var chain digest.Digest
	for i, l := range layers {
		diffID := digest.Digest(cfg.RootFS.DiffIDs[i].String())
		chain = image.ChainID(chain, diffID)
		size, _ := l.Size()
		st.CompressedSize += size
		key := layerKey(o.Size, chain, o.NoDevices)
		snap, err := o.cached(ctx, key)
		if err != nil {
			return nil, nil, err
		}
		if snap != "" {
			st.LayersReused++
			o.printf("layer %d/%d %s: reused snapshot %s", i+1, len(layers), short(diffID), short(snap))
		} else {
			t := time.Now()
			res, applied, err := o.applyLayer(ctx, parent, l, diffID, i, len(layers))
			if err != nil {
				return nil, nil, fmt.Errorf("layer %d/%d (%s): %w", i+1, len(layers), diffID, err)
			}
			snap = res.ID
			st.BytesApplied += applied.Bytes
			st.BytesUploaded += res.NewBytes
			if err := o.Chains.PutChain(key, snap); err != nil {
				return nil, nil, err
			}
			o.printf("layer %d/%d %s: %d files, %s applied; snapshot %s, %s new in %d chunks (%.1fs)",
				i+1, len(layers), short(diffID), applied.Files, units.Bytes(applied.Bytes), short(snap),
				units.Bytes(res.NewBytes), res.NewChunks, time.Since(t).Seconds())
		}
		lineage = append(lineage, image.Layer{Snapshot: snap, DiffID: diffID, ChainID: chain})
		parent = snap
	}
	top, err := o.Node.Snapshot(ctx, parent)
	if err != nil {
		return nil, nil, err
	}
	d := &image.Descriptor{
		Snapshot: parent, Size: top.Size, DataSize: top.DataSize, Layers: lineage,
		Config:   imageConfig(cfg.Config),
		Platform: ocispec.Platform{OS: "linux", Architecture: cfg.Architecture, Variant: cfg.Variant},
		Source: &image.Source{Reference: src.Reference, ManifestDigest: digest.Digest(manifestDigest.String()),
			CompressedSize: st.CompressedSize},
		Created: time.Now().UTC(),
	}
	st.Took = time.Since(start)
	return d, st, nil
}

// cached returns the snapshot recorded under key if the store still has it.
func (o *Options) cached(ctx context.Context, key digest.Digest) (digest.Digest, error) {
	snap, err := o.Chains.Chain(key)
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if _, err := o.Node.Snapshot(ctx, snap); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			o.Logger.Warn("conversion-cache-stale", "key", key, "snapshot", snap)
			o.Chains.ForgetChain(key)
			return "", nil
		}
		return "", err
	}
	return snap, nil
}

// applyLayer clones parent, applies l and snapshots the result.
func (o *Options) applyLayer(ctx context.Context, parent digest.Digest, l v1.Layer, diffID digest.Digest, i, n int) (api.Snapshot, archive.Stats, error) {
	var none api.Snapshot
	id := "convert-" + randomHex()
	vol, err := o.Node.CreateVolume(ctx, api.CreateVolumeRequest{ID: id, Snapshot: parent, Size: o.Size, Mount: true,
		Labels: map[string]string{labels.Kind: labels.KindConvert, labels.Layer: diffID.String()}})
	if err != nil {
		return none, archive.Stats{}, fmt.Errorf("clone the parent snapshot: %w", err)
	}
	defer func() {
		if err := o.Node.DeleteVolume(context.WithoutCancel(ctx), id); err != nil {
			o.Logger.Warn("convert-volume-delete-failed", "volume", id, "err", err)
		}
	}()
	size, _ := l.Size() // of the blob as stored
	task := o.Progress.Start(fmt.Sprintf("layer %d/%d %s", i+1, n, short(diffID)), size, progress.Bytes)
	defer task.Done()
	un, err := openLayer(l, o.stored, task)
	if err != nil {
		return none, archive.Stats{}, err
	}
	defer un.Close()
	dev, err := mountedFS(vol.Mountpoint)
	if err != nil {
		return none, archive.Stats{}, err
	}
	h := sha256.New()
	// A layer cannot hold more than its filesystem: bound what it may write (and so
	// decompression bombs) by the volume's size, its entries by one per 4 KiB.
	stats, err := archive.Apply(ctx, vol.Mountpoint, io.TeeReader(un, h), archive.Options{
		Logger: o.Logger, AllowDevices: !o.NoDevices,
		MaxBytes: vol.Size, MaxEntrySize: vol.Size, MaxEntries: int(vol.Size / 4096),
	})
	if err != nil {
		return none, stats, err
	}
	// Hash the rest of the stream (tar padding after the end marker).
	if _, err := io.Copy(h, un); err != nil {
		return none, stats, fmt.Errorf("read layer: %w", err)
	}
	if got := digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(h.Sum(nil))); got != diffID {
		return none, stats, fmt.Errorf("layer content hashes to %s, the image config says %s: corrupt or tampered layer", got, diffID)
	}
	if after, err := mountedFS(vol.Mountpoint); err != nil {
		return none, stats, fmt.Errorf("after applying the layer: %w", err)
	} else if after != dev {
		return none, stats, fmt.Errorf("after applying the layer, another filesystem is mounted at %s: the layer's files may have gone elsewhere", vol.Mountpoint)
	}
	if err := o.Node.UnmountVolume(ctx, id); err != nil {
		return none, stats, err
	}
	snap, err := o.Node.SnapshotVolume(ctx, id, api.SnapshotRequest{})
	if err != nil {
		return none, stats, err
	}
	return snap, stats, nil
}

// openLayer returns a layer's uncompressed stream. Blobs are decompressed by
// archive.Decompress (gzip, zstd or plain, with bounded decoder memory); layers of a
// docker-archive are read as stored, since asking for their compressed form would
// gzip them on the fly.
func openLayer(l v1.Layer, stored bool, task progress.Task) (io.ReadCloser, error) {
	mt, err := l.MediaType()
	if stored || (err == nil && (mt == types.DockerUncompressedLayer || mt == types.OCIUncompressedLayer)) {
		rc, err := l.Uncompressed()
		if err != nil {
			return nil, fmt.Errorf("open layer: %w", err)
		}
		return readCloser{progress.Reader(rc, task), rc.Close}, nil
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, fmt.Errorf("open layer: %w", err)
	}
	un, err := archive.Decompress(progress.Reader(rc, task)) // the blob's bytes, as the task counts them
	if err != nil {
		rc.Close()
		return nil, err
	}
	return readCloser{un, func() error { un.Close(); return rc.Close() }}, nil
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }

func imageConfig(c v1.Config) ocispec.ImageConfig {
	out := ocispec.ImageConfig{
		User: c.User, Env: c.Env, Entrypoint: c.Entrypoint, Cmd: c.Cmd, WorkingDir: c.WorkingDir,
		Labels: c.Labels, StopSignal: c.StopSignal,
	}
	if len(c.ExposedPorts) > 0 {
		out.ExposedPorts = map[string]struct{}{}
		for p := range c.ExposedPorts {
			out.ExposedPorts[p] = struct{}{}
		}
	}
	if len(c.Volumes) > 0 {
		out.Volumes = map[string]struct{}{}
		for p := range c.Volumes {
			out.Volumes[p] = struct{}{}
		}
	}
	return out
}

func short(d digest.Digest) string {
	e := d.Encoded()
	if len(e) > 12 {
		e = e[:12]
	}
	return e
}

func randomHex() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// MaxMetadataSize bounds an image's manifest and its config, as read from any
// source: larger ones are refused as hostile rather than held in memory.
const MaxMetadataSize = 4 << 20

func checkMetadataSize(img v1.Image) error {
	m, err := img.RawManifest()
	if err != nil {
		return fmt.Errorf("read the image manifest: %w", err)
	}
	if len(m) > MaxMetadataSize {
		return fmt.Errorf("the image manifest has %d bytes, more than %d: refused", len(m), MaxMetadataSize)
	}
	mf, err := img.Manifest()
	if err != nil {
		return fmt.Errorf("read the image manifest: %w", err)
	}
	if mf.Config.Size > MaxMetadataSize {
		return fmt.Errorf("the image config has %d bytes, more than %d: refused", mf.Config.Size, MaxMetadataSize)
	}
	return nil
}
