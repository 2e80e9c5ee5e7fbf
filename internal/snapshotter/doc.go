// Package snapshotter is Slacker's containerd snapshotter: the snapshots API
// (Prepare, View, Mounts, Commit, Remove, Stat, Update, Usage, Walk, Cleanup) on top
// of a node, served by slackerd as a containerd proxy plugin over gRPC.
//
// Every active or view snapshot is a node volume: a clone of its parent's Slacker
// snapshot (or of a blank ext4 filesystem), mounted as ext4 on a loop device and
// returned to containerd as a bind mount of that mountpoint. A container therefore
// gets its own ext4 with block-level copy-on-write, and containerd's unpacker applies
// an ordinary layer into the clone with its own archive code (OCI whiteouts, since
// the mount is not overlayfs). Commit snapshots the volume (a Slacker snapshot, O(data
// written)) and deletes it: a committed snapshot is only the ID of its block map.
//
// Slacker images take the remote-snapshot path: their one layer is annotated with
// the snapshot it stands for (labels.LayerSnapshot, passed to Prepare by containerd's
// unpacker because of its containerd.io/snapshot/ prefix). Prepare then records a
// committed snapshot under the chain ID given in containerd.io/snapshot.ref and
// returns ErrAlreadyExists, so containerd neither downloads nor unpacks the layer
// (log event "remote-snapshot-prepared"). An ordinary layer is unpacked as usual and
// logged as "snapshot-not-lazy": never a silent fallback.
//
// Metadata (keys, parents, kinds, labels, usage) lives in containerd's own bolt
// store (snapshots/storage) under the snapshotter's directory; the Slacker snapshot
// of each committed snapshot is a small file next to it, written before the
// commit's transaction ends. A volume whose snapshot is gone is removed by Cleanup.
//
// The node's errors reach containerd through MapError, this edge's one translation
// of errdefs kinds to containerd's errdefs (and so to gRPC codes).
//
// An ordinary image whose Slacker descriptor is attached to it (registry.Attach)
// is prepared the same way, layer by layer from the descriptor's lineage (each
// layer's chain ID names the snapshot the conversion made after it), when
// Options.Attached finds the descriptor for the image containerd names in the
// layers' labels (CRI, nerdctl): logged `remote-snapshot-prepared` `via=attached`.
//
// The package never talks to a registry (Options.Attached does, for it) or parses
// layers; it drives the node only through the small Node interface.
package snapshotter
