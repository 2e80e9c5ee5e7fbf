// Package graphdriver is Slacker's Docker graph-driver plugin: the HTTP+JSON protocol
// dockerd 20.10 speaks to a graph-driver plugin on a unix socket (Plugin.Activate and
// GraphDriver.Init, Create, CreateReadWrite, Remove, Get, Put, Exists, Status,
// GetMetadata, Cleanup, Diff, Changes, ApplyDiff, DiffSize, Capabilities), served by
// slackerd on top of its node, in process.
//
// It owns Docker's layers as records that name a snapshot, and the Slacker layer
// format (layer.go, docs/format.md): a tiny tar carrying a snapshot ID, the FAST'16
// paper's backward-compatible trick. Create and CreateReadWrite are O(1): a layer
// starts as its parent's snapshot. A container's layers (its "-init" layer and its
// own, made by CreateReadWrite) are roots of the node's container root mode, or of
// the mode their storage option asks for (docker run --storage-opt
// root-mode=shared|block): shared roots (shared.go) are made at once, the init
// layer's over the image's snapshot (the node's one read-only mount of it, shared
// by all of its containers) and the container's on the init layer's, and stay
// until Remove; block layers get a volume (a clone) only when Docker calls Get.
// Snapshots are cached, so many containers of one image share one snapshot.
// ApplyDiff of an ordinary layer tar applies it into a clone of the parent (package
// archive) and snapshots the result; ApplyDiff of a Slacker layer only records the
// snapshot it names. Diff of a container makes a Slacker layer when the node's store
// is shared with the nodes that pull (Options.SharedStore), an ordinary tar of the
// changes otherwise. Changes and DiffSize of a shared root against its parent read
// its upper layer (the changes themselves); otherwise they compare two mounted trees
// by inode metadata. Neither reads file contents.
//
// It must never write outside the volumes it mounts (layers are applied by package
// archive, changed files are read with openat2 inside the layer's root), never
// write to a shared root's upper layer or to the layers under it other than through
// the root's mount (it only reads them, as the node names them), never hold
// a layer's lock while waiting for Docker, and never leave a volume mounted that
// Docker did not ask for. Errors are answered once (ErrorAnswer): status 500 with the
// message, whatever their errdefs kind, since dockerd reads only the message. The
// protocol is small and stable, so it is written here on net/http rather than
// through docker/go-plugins-helpers, which would pull the moby module in and whose
// Diff cannot report an error.
package graphdriver
