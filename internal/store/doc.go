// Package store is the contract for Slacker's content-addressed object store: the
// place where chunk data and block maps live, shared by every node.
//
// An object is an immutable byte string named by the sha256 digest of its content.
// The contract (Store) is small and exact; every backend maps its native errors to the
// errdefs kinds exactly once (store.go says which kind means what), and every backend
// runs the shared suite in package storetest. Backends live in sub-packages: local
// (the embedded default), s3 (S3-compatible object storage) and ocistore (blobs of an
// OCI registry); storeurl opens one from a location, and the remote two share
// the HTTP transport of package transport. Optional abilities (Refs,
// BatchGetter) are separate interfaces found by type assertion. A backend that
// reads an object whole before handing out its first byte (a compressed object,
// decoded and verified: EncodeObject, DecodeObject) returns it as an InMemory body,
// which ReadAllSized takes without a copy. docs/stores.md has the designs.
//
// This package must never know about block maps, volumes or caches: it moves opaque,
// verified bytes.
package store
