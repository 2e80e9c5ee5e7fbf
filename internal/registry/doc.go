// Package registry uses any OCI distribution registry as Slacker's name server.
//
// Push publishes an image as a small OCI artifact: an image manifest whose
// artifactType and config media type are the Slacker descriptor's, whose config blob
// is the descriptor (snapshot ID and image configuration), and which has no layers
// (only the OCI empty blob, for registries that want one). Pull fetches the manifest
// and that one blob: kilobytes, whatever the image's size. Chunk data never goes
// through the registry.
//
// Pulling a reference that is an ordinary OCI image is refused with a message that
// says how to convert it: there is no silent fallback. Credentials come from the
// Docker config (~/.docker/config.json, credential helpers) and token auth, through
// go-containerregistry; loopback and private-network registries are spoken to over
// plain HTTP, as Docker does for them.
package registry
