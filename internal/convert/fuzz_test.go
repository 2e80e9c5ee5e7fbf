package convert_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/convert"
	"github.com/slacker-dev/slacker/internal/errdefs"
)

var errRefused = errors.New("node refuses in the fuzz test")

// refusingNode is a node that refuses to make anything: conversion stops at its
// first call, after reading the image's metadata.
type refusingNode struct{}

func (refusingNode) Mkfs(context.Context, api.MkfsRequest) (api.Snapshot, error) {
	return api.Snapshot{}, errRefused
}
func (refusingNode) Snapshot(context.Context, digest.Digest) (api.Snapshot, error) {
	return api.Snapshot{}, errRefused
}
func (refusingNode) CreateVolume(context.Context, api.CreateVolumeRequest) (api.Volume, error) {
	return api.Volume{}, errRefused
}
func (refusingNode) UnmountVolume(context.Context, string) error { return errRefused }
func (refusingNode) SnapshotVolume(context.Context, string, api.SnapshotRequest) (api.Snapshot, error) {
	return api.Snapshot{}, errRefused
}
func (refusingNode) DeleteVolume(context.Context, string) error { return errRefused }

type noChains struct{}

func (noChains) Chain(digest.Digest) (digest.Digest, error)  { return "", errdefs.ErrNotFound }
func (noChains) PutChain(digest.Digest, digest.Digest) error { return errRefused }
func (noChains) ForgetChain(digest.Digest) error             { return nil }

// FuzzImageMetadata writes an OCI layout whose manifest and config are the fuzzer's
// bytes (stored under the digests the index and manifest name) and converts it:
// whatever they hold, conversion either refuses them with an error or reads them
// and goes on to ask the node for the base filesystem; it never panics.
func FuzzImageMetadata(f *testing.F) {
	cfg := []byte(`{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"],"Cmd":["sh"]},"rootfs":{"type":"layers","diff_ids":["sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"]}}`)
	manifest := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"` +
		digest.FromBytes(cfg).String() + `","size":` + itoa(len(cfg)) + `},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef","size":1024}]}`)
	f.Add(manifest, cfg)
	f.Add([]byte(`{"schemaVersion":2,"config":{"digest":"sha256:`+digest.FromString("x").Encoded()+`","size":99999999999},"layers":[]}`), []byte(`{"os":"windows"}`))
	f.Add([]byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`), []byte(`{}`))
	f.Add([]byte(`[]`), []byte(`null`))
	f.Fuzz(func(t *testing.T, manifest, cfg []byte) {
		dir := t.TempDir()
		write := func(d digest.Digest, b []byte) {
			if d.Validate() != nil || d.Algorithm() != digest.SHA256 {
				return
			}
			p := filepath.Join(dir, "blobs", "sha256", d.Encoded())
			os.MkdirAll(filepath.Dir(p), 0o700)
			os.WriteFile(p, b, 0o600)
		}
		md := digest.FromBytes(manifest)
		write(md, manifest)
		var m struct {
			Config struct {
				Digest digest.Digest `json:"digest"`
			} `json:"config"`
		}
		if json.Unmarshal(manifest, &m) == nil {
			write(m.Config.Digest, cfg)
		}
		os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o600)
		index := `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` +
			md.String() + `","size":` + itoa(len(manifest)) + `,"annotations":{"org.opencontainers.image.ref.name":"t"}}]}`
		os.WriteFile(filepath.Join(dir, "index.json"), []byte(index), 0o600)
		src, err := convert.Open(context.Background(), "oci:"+dir+":t", convert.OpenOptions{})
		if err != nil {
			return
		}
		defer src.Close()
		_, _, err = convert.Convert(context.Background(), src, convert.Options{Node: refusingNode{}, Chains: noChains{}})
		if err == nil {
			t.Fatal("conversion succeeded on a node that refuses everything")
		}
	})
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
