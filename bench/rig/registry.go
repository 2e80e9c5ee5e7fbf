package rig

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/image"
)

// chainIDFromRegistry reads ref's config from its registry and returns the chain ID
// of its top layer (the parent a container snapshot is prepared from).
func chainIDFromRegistry(ctx context.Context, ref string) (string, error) {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return "", err
	}
	img, err := remote.Image(r, remote.WithContext(ctx))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", ref, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	var chain digest.Digest
	for _, d := range cfg.RootFS.DiffIDs {
		chain = image.ChainID(chain, digest.Digest(d.String()))
	}
	if chain == "" {
		return "", fmt.Errorf("%s has no layers", ref)
	}
	return chain.String(), nil
}

func digestOf(s string) digest.Digest { return digest.Digest(s) }
