// Package corpus builds the HelloBench image corpus: each workload of a
// workloads file becomes a multi-layer OCI image made from Debian packages, and
// a synthetic generator makes images of random files for scalability runs. Every
// benchmark builds its images here (the core benchmark's, HelloBench's, the
// evaluation's), so it imports none of them.
//
// An image is a base layer (a debootstrap variant, or nothing for scratch), one
// layer per package group in the definition's order, and an app layer with the
// definition's files when there is anything to put there. Each layer is built by
// mounting an overlay of the layers below it, installing the group with apt-get
// in a chroot of the overlay, and turning the overlay's upper directory into the
// layer tar (overlay whiteouts become OCI whiteouts), so a layer holds exactly the
// file-level diff. Layers are cached by a key that covers the base, the ordered
// groups below and including it, the Debian suite and mirror, and the recipe
// version: two images whose definitions share a base and their first k groups
// reference the very same k+1 layer blobs, and a changed definition rebuilds
// from its first changed layer only.
//
// Every mount and every process apt starts lives in a helper process that is PID
// 1 of its own mount and PID namespaces (see helper.go): when it ends, for any
// reason, the kernel kills what it started and drops what it mounted. Root is
// required for building; reading and pushing a built corpus is not.
//
// The package owns the corpus directory (layout, layer cache, records, work
// trees). It never runs a workload: that is the harness's job.
package corpus
