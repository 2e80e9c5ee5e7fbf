package eval

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/slacker-dev/slacker/bench/corpus"
	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/internal/testenv/services"
)

// Pair is the two systems every item compares, Slacker and containerd + overlayfs,
// with the registry both publish to, all started under one directory.
type Pair struct {
	Registry *services.Registry
	Slacker  *rig.Slacker
	Overlay  *rig.Containerd
	refs     map[string]map[string]string // system -> image -> ref
}

// PairOptions configure StartPair.
type PairOptions struct {
	// Dir holds the registry's data, Slacker's store and nodes, and containerd's root
	// (keep it short: containerd's socket lives there). It is emptied first.
	Dir      string
	Binaries rig.Binaries
	// DaemonArgs are extra slackerd flags.
	DaemonArgs []string
}

// StartPair starts the registry and readies both systems (their daemons start on
// the first Cold).
func StartPair(ctx context.Context, o PairOptions) (*Pair, error) {
	if err := o.Binaries.Check(); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(o.Dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	reg, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: filepath.Join(o.Dir, "registry")})
	if err != nil {
		return nil, err
	}
	p := &Pair{Registry: reg, refs: map[string]map[string]string{}}
	if p.Slacker, err = rig.NewSlacker(rig.SlackerOptions{Dir: filepath.Join(o.Dir, "slacker"),
		Slacker: o.Binaries.Slacker, Slackerd: o.Binaries.Slackerd, DaemonArgs: o.DaemonArgs}); err != nil {
		reg.Stop()
		return nil, err
	}
	if p.Overlay, err = rig.NewContainerd(rig.ContainerdOptions{Dir: filepath.Join(o.Dir, "ctrd")}); err != nil {
		reg.Stop()
		return nil, err
	}
	return p, nil
}

// Systems are the two systems, baseline first.
func (p *Pair) Systems() []rig.System { return []rig.System{p.Overlay, p.Slacker} }

// Shuffled returns the systems in a random order (each sample draws its own, so
// neither system always runs on the other's leftovers).
func (p *Pair) Shuffled(rng *rand.Rand) []rig.System {
	s := p.Systems()
	rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	return s
}

// Publish makes img pullable by both systems (or only by those given).
func (p *Pair) Publish(ctx context.Context, img rig.Image, only ...rig.System) error {
	systems := p.Systems()
	if len(only) > 0 {
		systems = only
	}
	for _, s := range systems {
		ref, _, err := s.Publish(ctx, img, p.Registry.Addr)
		if err != nil {
			return fmt.Errorf("publish %s for %s: %w", img.Name, s.Name(), err)
		}
		if p.refs[s.Name()] == nil {
			p.refs[s.Name()] = map[string]string{}
		}
		p.refs[s.Name()][img.Name] = ref
	}
	return nil
}

// Ref is the reference s pulls img by (empty if not published).
func (p *Pair) Ref(s rig.System, img string) string { return p.refs[s.Name()][img] }

// Close stops everything the pair started.
func (p *Pair) Close() error {
	var errs []error
	for _, s := range p.Systems() {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	if p.Registry != nil {
		errs = append(errs, p.Registry.Stop())
	}
	return errors.Join(errs...)
}

// CorpusImage describes the image tagged name in the corpus at dir.
func CorpusImage(c *corpus.Corpus, name string) (rig.Image, error) {
	ims, err := corpus.List(c.Dir())
	if err != nil {
		return rig.Image{}, err
	}
	for _, im := range ims {
		if im.Name == name {
			return rig.Image{Name: name, Layout: c.Layout.Dir, Tag: name, DataBytes: im.USize, CompressedBytes: im.Size}, nil
		}
	}
	return rig.Image{}, fmt.Errorf("no image %q in the corpus %s", name, c.Dir())
}

// SizeTag renders n for image names: the largest binary unit that divides it
// ("16mib", "4kib", "1000").
func SizeTag(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"gib", 1 << 30}, {"mib", 1 << 20}, {"kib", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.name)
		}
	}
	return fmt.Sprint(n)
}

// HumanBytes renders n in binary units (as the corpus builder prints sizes).
func HumanBytes(n int64) string { return corpus.HumanBytes(n) }
