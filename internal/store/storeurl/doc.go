// Package storeurl opens a store.Store from a location string, the one place that
// knows every backend: a plain path or local:PATH (the embedded local directory
// store), s3://HOST/BUCKET[/PREFIX] (package s3), registry://HOST/REPOSITORY (package
// ocistore: chunks packed into blobs of an OCI registry). Other schemes are refused with a
// message listing what is supported. The display form never shows a secret.
package storeurl
