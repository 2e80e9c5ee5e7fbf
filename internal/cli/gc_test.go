package cli

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/names"
	"github.com/slacker-dev/slacker/internal/registry"
	"github.com/slacker-dev/slacker/internal/testenv/services"
)

// TestGCRootsOfRegistryReferences: `slacker gc --registry REF` keeps what REF
// names: a Slacker image's snapshot and lineage, and for an ordinary image, the
// snapshot and lineage of every descriptor attached to it (a node that never
// pulled it keeps them all the same); what the node names is kept too.
func TestGCRootsOfRegistryReferences(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)), ggcrregistry.WithReferrersSupport(true)))
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()

	// An ordinary image, a descriptor of two layers attached to it.
	ordinary := addr + "/app/x:v1"
	subject := services.PushRandomImage(t, ordinary)
	desc := func(s string) *image.Descriptor {
		return &image.Descriptor{Snapshot: digest.FromString(s), Size: 1 << 30, DataSize: 1 << 20,
			Created: time.Now().UTC().Truncate(time.Second),
			Layers:  []image.Layer{{Snapshot: digest.FromString(s + " layer 1")}, {Snapshot: digest.FromString(s)}},
			Source:  &image.Source{Reference: ordinary, ManifestDigest: subject}}
	}
	attached := desc("attached")
	if _, err := registry.Attach(ctx, ordinary, attached, registry.Options{}); err != nil {
		t.Fatal(err)
	}
	// A Slacker image under a name of its own, and one the node names.
	dedicated := desc("dedicated")
	if _, err := registry.Push(ctx, addr+"/slacker/x:v1", dedicated, registry.Options{}); err != nil {
		t.Fatal(err)
	}
	ns, err := names.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	local := desc("local")
	if err := ns.Put("local:v1", local); err != nil {
		t.Fatal(err)
	}

	e := &env{names: ns}
	roots, err := e.roots(ctx, []string{ordinary, addr + "/slacker/x:v1"})
	if err != nil {
		t.Fatal(err)
	}
	from := map[digest.Digest]string{}
	for _, r := range roots {
		from[r.Snapshot] = r.From
	}
	for _, want := range []struct {
		s    digest.Digest
		from string
	}{
		{attached.Snapshot, "attached"}, {attached.Layers[0].Snapshot, "attached"},
		{dedicated.Snapshot, "registry " + addr + "/slacker/x:v1"}, {dedicated.Layers[0].Snapshot, "layer 1"},
		{local.Snapshot, "name local:v1"}, {local.Layers[0].Snapshot, "layer 1"},
	} {
		if got, ok := from[want.s]; !ok || !strings.Contains(got, want.from) {
			t.Errorf("root %s: from %q (kept: %v), want it kept, from %q", want.s, got, ok, want.from)
		}
	}
	if len(roots) != 9 { // three descriptors of a snapshot and two layers each
		t.Errorf("%d roots, want 9: %+v", len(roots), roots)
	}
}
