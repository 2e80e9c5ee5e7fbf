package eval

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"github.com/slacker-dev/slacker/bench/corpus"
	"github.com/slacker-dev/slacker/bench/eval/plot"
	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/internal/testenv/services"
)

// Pair is the systems every item compares, containerd + overlayfs and Slacker
// (named for those two; Slacker may be there in both container root modes), with
// the registry they publish to, all started under one directory.
type Pair struct {
	Registry *services.Registry
	// Slacker is "slacker": of root mode rig.RootShared when PairOptions.Modes has
	// it, of no mode of its own when Modes is empty, nil otherwise.
	Slacker *rig.Slacker
	// Block is "slacker-block" (rig.RootBlock) when Modes has it, else nil.
	Block   *rig.Slacker
	Overlay *rig.Containerd
	refs    map[string]map[string]string // system -> image -> ref
}

// PairOptions configure StartPair.
type PairOptions struct {
	// Dir holds the registry's data, each Slacker system's store and nodes, and
	// containerd's root (keep it short: containerd's socket lives there). It is
	// emptied first.
	Dir      string
	Binaries rig.Binaries
	// DaemonArgs are extra slackerd flags (for every Slacker system).
	DaemonArgs []string
	// Modes are the container root modes Slacker is measured in, one system each
	// (see SlackerModes): rig.RootShared is "slacker", the default mode, and
	// rig.RootBlock "slacker-block", the same slackerd with --container-root block,
	// with a node, store and registry repository of its own. Empty: one "slacker"
	// with no mode of its own (`slacker run` takes slackerd's default; mounted and
	// launched roots are block clones), as the items that read a block clone's own
	// statistics (analysis) or mount no root (scale, multimake) measure it.
	Modes []string
}

// SlackerModes are the Modes of the items that measure Slacker's default mode
// beside overlayfs: shared, and block too when block is set.
func SlackerModes(block bool) []string {
	if block {
		return []string{rig.RootShared, rig.RootBlock}
	}
	return []string{rig.RootShared}
}

// StartPair starts the registry and readies the systems (their daemons start on
// the first Cold).
func StartPair(ctx context.Context, o PairOptions) (*Pair, error) {
	if err := o.Binaries.Check(); err != nil {
		return nil, err
	}
	p := &Pair{refs: map[string]map[string]string{}}
	var err error
	if p.Slacker, p.Block, err = newSlackers(o); err != nil {
		return nil, err
	}
	if p.Overlay, err = rig.NewContainerd(rig.ContainerdOptions{Dir: filepath.Join(o.Dir, "ctrd")}); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(o.Dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	if p.Registry, err = services.StartRegistry(ctx, services.RegistryOptions{Dir: filepath.Join(o.Dir, "registry")}); err != nil {
		return nil, err
	}
	return p, nil
}

// newSlackers makes the Slacker systems of o.Modes (nothing runs yet), each in a
// directory of o.Dir named as it is: slacker/, slacker-block/.
func newSlackers(o PairOptions) (slacker, block *rig.Slacker, err error) {
	modes := o.Modes
	if len(modes) == 0 {
		modes = []string{""}
	}
	for i, m := range modes {
		if len(o.Modes) > 0 && m != rig.RootShared && m != rig.RootBlock {
			return nil, nil, fmt.Errorf("container root mode %q: want %q or %q", m, rig.RootShared, rig.RootBlock)
		}
		if slices.Contains(modes[:i], m) {
			return nil, nil, fmt.Errorf("container root mode %q given twice", m)
		}
		s, err := rig.NewSlacker(rig.SlackerOptions{Dir: filepath.Join(o.Dir, rig.SlackerNameOf(m)), Slacker: o.Binaries.Slacker,
			Slackerd: o.Binaries.Slackerd, DaemonArgs: o.DaemonArgs, RootMode: m})
		if err != nil {
			return nil, nil, err
		}
		if m == rig.RootBlock {
			block = s
		} else {
			slacker = s
		}
	}
	return slacker, block, nil
}

// Systems are the systems, baseline first: overlayfs, slacker, slacker-block
// (those started).
func (p *Pair) Systems() []rig.System {
	var out []rig.System
	if p.Overlay != nil {
		out = append(out, p.Overlay)
	}
	for _, s := range []*rig.Slacker{p.Slacker, p.Block} {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// RootModes are the container root modes of the Slacker systems that have one, by
// name, as an item's results record them (nil when none has).
func (p *Pair) RootModes() map[string]string {
	var out map[string]string
	for _, s := range []*rig.Slacker{p.Slacker, p.Block} {
		if s != nil && s.RootMode() != "" {
			if out == nil {
				out = map[string]string{}
			}
			out[s.Name()] = s.RootMode()
		}
	}
	return out
}

// Shuffled returns the systems in a random order (each sample draws its own, so
// no system always runs on another's leftovers).
func (p *Pair) Shuffled(rng *rand.Rand) []rig.System {
	s := p.Systems()
	rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	return s
}

// Publish makes img pullable by every system (or only by those given).
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
		errs = append(errs, s.Close())
	}
	if p.Registry != nil {
		errs = append(errs, p.Registry.Stop())
	}
	return errors.Join(errs...)
}

// ReportSystems are the systems an item's report shows, baseline first, given the
// systems its results have samples of: overlayfs and slacker always (the tables
// of older results, which had only these two, keep their columns), then
// slacker-block when there is any.
func ReportSystems(have []string) []string {
	out := []string{rig.OverlayfsName, rig.SlackerName}
	if slices.Contains(have, rig.SlackerBlockName) {
		out = append(out, rig.SlackerBlockName)
	}
	return out
}

// Slackers are ReportSystems(have) but the baseline.
func Slackers(have []string) []string { return ReportSystems(have)[1:] }

// Color is a system's colour in the figures.
func Color(system string) string {
	switch system {
	case rig.SlackerName:
		return plot.Slacker
	case rig.SlackerBlockName:
		return plot.SlackerBlock
	}
	return plot.Baseline
}

// Title is how a headline names a system: "overlayfs", "Slacker" (its default
// mode), "Slacker block mode".
func Title(system string) string {
	switch system {
	case rig.SlackerName:
		return "Slacker"
	case rig.SlackerBlockName:
		return "Slacker block mode"
	}
	return system
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
