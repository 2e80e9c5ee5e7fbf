// Package registry uses any OCI distribution registry as Slacker's name server.
//
// Push publishes an image as a small, ordinary OCI image: an image config with the
// image's command, environment and platform, and one layer, the Slacker layer
// (image.EncodeLayer): a tar of a few kilobytes carrying the descriptor (snapshot ID
// and image configuration), annotated in the manifest with the snapshot ID so that
// containerd's Slacker snapshotter mounts the snapshot instead of unpacking it. When
// the layer with the snapshot's block map in it is at most MaxInlineLayer, the
// manifest embeds it (the descriptor's data, OCI 1.1) and names the pushing node's
// store: Pull then has the descriptor and the map with the manifest, in one request
// (Result.BlockMap), and a node of that store need not look the map up. Otherwise
// Pull fetches the manifest and the layer: kilobytes, whatever the image's size (it
// still reads the first format, whose config blob was the descriptor). Chunk data
// never goes through the registry.
//
// Pulling a reference that is an ordinary OCI image is refused with a message that
// says how to convert it: there is no silent fallback. Credentials come from the
// Docker config (~/.docker/config.json, credential helpers) and token auth, through
// go-containerregistry; loopback and private-network registries are spoken to over
// plain HTTP, as Docker does for them. A registry set to plain HTTP (Insecure) for
// which no credentials are configured is asked for the manifest without the ping
// that learns how it authenticates, as containerd's resolver asks; a 401 or 403
// falls back to the ping and its challenge. Pull tells its caller the snapshot the
// manifest names before it reads the layer (Options.SnapshotNamed), so that the
// snapshot's lookup can go beside the layer's fetch.
package registry
