// Package containers is the container lifecycle behind `slacker run`, `ps`, `rm` and
// `commit`: a container is a volume cloned from an image's snapshot (O(1), nothing
// copied) and mounted by slackerd, a runc bundle pointing at that mount, and a small
// record under the state directory (StateRoot/containers/<id>/container.json).
//
// It talks to slackerd through the Node interface and to runc through package runc; it
// never touches FUSE, loop devices or the store directly.
package containers
