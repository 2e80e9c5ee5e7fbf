// Package scale is the evaluation's push/pull scalability experiment (`slacker-bench
// eval scale`), after Slacker Fig 10 and Fig 23: N synthetic images (one file of
// random bytes each, 1 MB to 1 GB), pushed at once and then pulled at once, N from 1
// to 32; the time until all N complete, for containerd + overlayfs and Slacker side
// by side.
//
// Each (size, N) trial gets a fresh, empty registry, so every push uploads. The
// baseline pushes the images' gzip layers from their OCI layout (skopeo copy, what
// a containerd user's push uploads) and pulls with `ctr images pull` (download and
// unpack); Slacker pushes descriptors of images converted beforehand (`slacker
// push`; the conversion is timed apart) and pulls them (`slacker pull`). Pulls start
// on a cold node. It asserts nothing about the numbers.
package scale
