// Package distribution reads what OCI distribution registries (the Docker
// Registry HTTP API v2) answer, for Slacker's two clients of them: the name
// server push and pull (package registry) and the registry chunk store (package
// store/ocistore). It holds the knowledge of registry behaviour both need, so
// that it is written once; it sends no requests itself.
package distribution
