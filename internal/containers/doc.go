// Package containers is the container lifecycle behind `slacker run`, `ps`, `rm` and
// `commit`: a container is a root made by slackerd from an image's snapshot (O(1),
// nothing copied: a shared root, an overlay over the node's one read-only mount of the
// image, or a block-level clone, by --root-mode, the image's label or slackerd's
// default), a runc bundle pointing at that mount, and a small record under the state
// directory (StateRoot/containers/<id>/container.json). A commit of a running
// container with a shared root pauses it for the moment its changes are read.
//
// It talks to slackerd through the Node interface and to runc through package runc; it
// never touches FUSE, loop devices or the store directly.
package containers
