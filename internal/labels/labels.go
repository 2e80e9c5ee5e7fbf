package labels

// Volume labels: what a node volume is for.
const (
	// Kind says what made a volume: one of the Kind values below.
	Kind = "slacker.kind"
	// Container is the name of the container whose root a volume is (KindContainer).
	Container = "slacker.container"
	// Image is the image a container runs (KindContainer).
	Image = "slacker.image"
	// Layer is the diff ID of the layer a conversion volume applies (KindConvert).
	Layer = "slacker.layer"
	// ContainerdKey is the containerd snapshot key of a volume (KindContainerd).
	ContainerdKey = "containerd.key"
	// DockerLayer is the Docker layer ID of a volume (KindDocker).
	DockerLayer = "docker.layer"
)

// Values of Kind.
const (
	KindContainer      = "container"       // a root of `slacker run`
	KindConvert        = "convert"         // a layer being applied by a conversion
	KindMkfs           = "mkfs"            // a blank filesystem being made
	KindContainerd     = "containerd"      // an active or view snapshot of the containerd snapshotter
	KindContainerdBase = "containerd-base" // the snapshotter's blank base
	KindDocker         = "docker"          // a volume of the Docker graph driver
	KindImageRoot      = "image-root"      // the read-only mount of an image, under its containers' shared roots
	KindCommit         = "commit"          // a clone a shared root's changes are applied onto, to commit them
	KindLocalImage     = "local-image"     // a read-only clone of an image that its local image is copied from
)

// Image labels (the image configuration's Labels, as a Dockerfile's LABEL sets
// them).
const (
	// RootMode says how the roots of the image's containers are made, "shared" or
	// "block", unless a container says otherwise (slacker run --root-mode).
	RootMode = "dev.slacker.root-mode"
)

// Annotations in registries.
const (
	// ManifestSnapshot marks the manifest of a Slacker image with its snapshot ID.
	ManifestSnapshot = "dev.slacker.snapshot"
	// ManifestStore names, on the manifest of a Slacker image, the store its
	// snapshot was pushed from, as the pushing slackerd names it: a pull by a
	// node of that store may take the block map the layer carries without
	// asking the store for it.
	ManifestStore = "dev.slacker.store"
	// LayerSnapshot annotates the one layer of a Slacker image with its snapshot ID.
	// The containerd.io/snapshot/ prefix makes containerd's unpacker pass it to the
	// snapshotter's Prepare, whatever the client (ctr, nerdctl, CRI).
	LayerSnapshot = "containerd.io/snapshot/dev.slacker.snapshot"
	// RefName names the record a registry store keeps in a manifest.
	RefName = "dev.slacker.ref.name"
	// PackObjects lists the objects a registry store's pack holds.
	PackObjects = "dev.slacker.pack.objects"
)

// containerd snapshot labels the snapshotter reads.
const (
	// SnapshotRef is the chain ID containerd's unpacker gives Prepare: the name of
	// the committed snapshot it is about to make.
	SnapshotRef = "containerd.io/snapshot.ref"
	// CRIImageRef and CRILayerDigest are set by CRI (with
	// disable_snapshot_annotations = false) and nerdctl; they name the image in logs.
	CRIImageRef    = "containerd.io/snapshot/cri.image-ref"
	CRILayerDigest = "containerd.io/snapshot/cri.layer-digest"
)
