// Package convert turns an OCI image into Slacker snapshots by layer flattening:
// for each layer, clone the parent's snapshot, mount it read-write, apply the layer
// (package archive), unmount, snapshot. A child shares every chunk it did not touch
// with its parent, so layer sharing becomes chunk sharing. Each layer's snapshot is
// recorded under its OCI chain ID, and a later conversion that shares a prefix of
// layers reuses those snapshots without reading the layers again.
//
// Sources: an OCI layout directory, an OCI archive (tar), a docker-archive (tar, as
// written by `docker save` or skopeo), or a registry reference. Every layer's
// uncompressed digest is checked against the image config's diff ID.
//
// The package drives a node through the small Node interface (slackerd's API client
// implements it) and never mounts anything itself.
package convert
