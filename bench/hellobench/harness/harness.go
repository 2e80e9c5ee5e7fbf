package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/bench/corpus"
	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/bench/workload"
	"github.com/slacker-dev/slacker/internal/mount"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/storeurl"
	"github.com/slacker-dev/slacker/internal/testenv/services"
)

// Timeouts of the steps that are not the workload's own.
const (
	pullTimeout   = 15 * time.Minute
	pushTimeout   = 15 * time.Minute
	removeTimeout = 2 * time.Minute
	// outputKeep is how much of an exit-rule workload's stdout a sample keeps.
	outputKeep = 1 << 10
)

type harness struct {
	o       Options
	res     *Results
	ws      []*workload.Workload
	imgs    map[string]rig.Image
	layers  map[string]corpus.ImageLayer // the measured images' layers, by digest
	systems []rig.System
	refs    map[string]map[string]string // system -> workload -> ref
	pubErr  map[string]map[string]string // system -> workload -> why publishing failed
	link    *rig.Link
	reg     *services.Registry
	minio   *services.MinIO // the S3 store behind a link
	started time.Time
	// progress prints o.Progress's lines.
	progress *rig.Progress
}

func (h *harness) printf(format string, args ...any) { h.progress.Printf(format, args...) }

// Run runs the harness. It returns the results gathered so far even on error or
// cancellation (Results.Interrupted is set then), and always stops everything it
// started: daemons, containers, the registry, the emulated link.
func Run(ctx context.Context, o Options) (*Results, error) {
	p, err := prepare(&o)
	if err != nil {
		return nil, err
	}
	// Options are checked first, so a mistake is reported as such by anyone.
	if os.Geteuid() != 0 {
		return nil, errors.New("slacker-bench hello must run as root (containers, mounts, network namespaces)")
	}
	profile, rate, specs, ws := p.profile, p.rate, p.specs, p.ws
	h := &harness{o: o, ws: ws, imgs: map[string]rig.Image{}, layers: map[string]corpus.ImageLayer{}, refs: map[string]map[string]string{},
		pubErr: map[string]map[string]string{}, started: time.Now(), progress: rig.NewProgress(o.Progress)}
	abs, _ := filepath.Abs(o.WorkloadsFile)
	rec := rig.NewRecord()
	h.res = &Results{Version: ResultsVersion, Date: rec.Date, Commit: rec.Commit, Machine: machineOf(rec.Machine),
		Command: o.Command, Runs: o.Runs, Seed: o.Seed, WorkloadsFile: abs,
		Profile: Profile{Name: profile, RateBits: rate}}
	if rate > 0 {
		h.res.Profile.RTTMillis = float64(o.RTT) / float64(time.Millisecond)
	}
	defer func() { h.res.Elapsed = time.Since(h.started).Seconds() }()

	if err := resetDir(o.Dir); err != nil {
		return nil, err
	}
	if err := h.build(ctx); err != nil {
		return h.res, err
	}
	defer h.teardown()
	if err := h.network(ctx, rate); err != nil {
		return h.res, err
	}
	if err := h.makeSystems(specs); err != nil {
		return h.res, err
	}
	h.unshaped(func() { h.publish(ctx) })
	h.footprint(ctx)
	h.save()
	if o.Warmup {
		h.warmup(ctx)
	}
	if o.Optimize {
		h.unshaped(func() { h.optimize(ctx) })
	}
	h.measure(ctx)
	if ctx.Err() != nil {
		h.res.Interrupted = true
	}
	h.res.Elapsed = time.Since(h.started).Seconds()
	h.save()
	return h.res, ctx.Err()
}

// plan is what prepare made of the options.
type plan struct {
	profile string
	rate    int64
	specs   []SystemSpec
	ws      []*workload.Workload
}

// prepare fills in o's defaults and checks it: profile, systems, cycles, the work
// directory (emptied by Run, so it must hold neither the corpus nor the workloads
// file) and the workloads selected. It changes nothing on disk.
func prepare(o *Options) (*plan, error) {
	if o.Runs <= 0 {
		o.Runs = 3
	}
	if len(o.Cycles) == 0 {
		o.Cycles = []string{Deployment, Development}
	}
	for i, c := range o.Cycles {
		if c != Deployment && c != Development {
			return nil, fmt.Errorf("unknown cycle %q (want %s or %s)", c, Deployment, Development)
		}
		if slices.Contains(o.Cycles[:i], c) {
			return nil, fmt.Errorf("cycle %q given twice", c)
		}
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	switch o.StoreServer {
	case "", "s3", "registry":
	default:
		return nil, fmt.Errorf("store server %q: want s3 or registry", o.StoreServer)
	}
	if o.Optimize && !o.Warmup {
		return nil, fmt.Errorf("--optimize lays images out from the traces the warm-up records: it needs the warm-up")
	}
	switch o.StoreCompress {
	case "", "zstd", "none":
	default:
		return nil, fmt.Errorf("store compress %q: want zstd or none", o.StoreCompress)
	}
	p := &plan{}
	var err error
	var rtt time.Duration
	if p.profile, p.rate, rtt, err = ParseProfile(o.Profile); err != nil {
		return nil, err
	}
	if o.PublishUnshaped && p.rate == 0 {
		return nil, fmt.Errorf("--publish-unshaped turns an emulated link's shaping off while publishing: profile %s has no link", p.profile)
	}
	switch {
	case rtt > 0 && o.RTT > 0 && o.RTT != time.Millisecond && o.RTT != rtt:
		return nil, fmt.Errorf("profile %s has a round trip of %s, and --rtt says %s: give one", p.profile, rtt, o.RTT)
	case rtt > 0:
		o.RTT = rtt
	case o.RTT <= 0:
		o.RTT = time.Millisecond
	}
	if p.specs, err = parseSystems(o.Systems); err != nil {
		return nil, err
	}
	if err := checkWorkDir(o.Dir, o.CorpusDir, o.WorkloadsFile); err != nil {
		return nil, err
	}
	set, err := workload.ParseFile(o.WorkloadsFile)
	if err != nil {
		return nil, err
	}
	names := o.Only
	if o.Quick && len(names) == 0 {
		for _, n := range QuickWorkloads {
			if set.Get(n) != nil {
				names = append(names, n)
			}
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("--quick: %s has none of the quick workloads (%s)", o.WorkloadsFile, strings.Join(QuickWorkloads, ", "))
		}
	}
	if p.ws, err = set.Select(names); err != nil {
		return nil, err
	}
	if len(p.ws) == 0 {
		return nil, errors.New("no workloads selected")
	}
	return p, nil
}

// checkWorkDir refuses a work directory that Run must not empty: none, the root,
// or one that is or holds the corpus or the workloads file.
func checkWorkDir(dir, corpusDir, workloadsFile string) error {
	if dir == "" {
		return errors.New("no work directory given")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if abs == "/" {
		return fmt.Errorf("refusing work directory %q", dir)
	}
	for _, p := range []struct{ what, path string }{{"the corpus", corpusDir}, {"the workloads file", workloadsFile}} {
		if p.path == "" {
			continue
		}
		pa, err := filepath.Abs(p.path)
		if err != nil {
			return err
		}
		if pa == abs || strings.HasPrefix(pa, abs+"/") {
			return fmt.Errorf("work directory %s holds %s (%s), and the harness empties it first: choose another --dir", dir, p.what, p.path)
		}
	}
	return nil
}

func parseSystems(in []string) ([]SystemSpec, error) {
	var out []SystemSpec
	seen := map[string]bool{}
	for _, s := range in {
		spec, err := ParseSystem(s)
		if err != nil {
			return nil, err
		}
		if seen[spec.Name] {
			return nil, fmt.Errorf("system %q given twice", spec.Name)
		}
		seen[spec.Name] = true
		out = append(out, spec)
	}
	if len(out) == 0 {
		return nil, errors.New("no systems given (e.g. --systems overlayfs,slacker)")
	}
	return out, nil
}

// build builds (or finds cached) every selected workload's image.
func (h *harness) build(ctx context.Context) error {
	c, err := corpus.Open(corpus.Options{Dir: h.o.CorpusDir, Progress: h.o.Progress})
	if err != nil {
		return err
	}
	h.printf("corpus: %d workloads in %s (built only if missing or changed)", len(h.ws), h.o.CorpusDir)
	rep, err := c.Build(ctx, h.ws)
	if err != nil {
		return fmt.Errorf("build corpus: %w", err)
	}
	if f := rep.Failed(); len(f) > 0 {
		var names []string
		for _, r := range f {
			names = append(names, fmt.Sprintf("%s (%v)", r.Name, r.Err))
		}
		return fmt.Errorf("corpus: %d images failed to build: %s", len(f), strings.Join(names, "; "))
	}
	byName := map[string]*corpus.ImageRecord{}
	for _, r := range rep.Results {
		byName[r.Name] = r.Record
	}
	for _, w := range h.ws {
		rec := byName[w.Name]
		if rec == nil {
			return fmt.Errorf("corpus: no image for %s", w.Name)
		}
		h.imgs[w.Name] = rig.Image{Name: w.Name, Layout: c.Layout.Dir, Tag: w.Name, DataBytes: rec.USize, CompressedBytes: rec.Size}
		for _, l := range rec.Layers {
			h.layers[l.Digest] = l
		}
		h.res.Workloads = append(h.res.Workloads, WorkloadInfo{Name: w.Name, Category: string(w.Category), Ready: w.Ready.String(),
			Timeout: w.Timeout.Seconds(), Layers: len(rec.Layers), CompressedBytes: rec.Size, DataBytes: rec.USize})
	}
	return nil
}

// network sets up the profile: a registry on loopback, or behind an emulated link.
func (h *harness) network(ctx context.Context, rate int64) error {
	regDir := filepath.Join(h.o.Dir, "registry")
	if rate == 0 {
		reg, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: regDir})
		if err != nil {
			return err
		}
		h.reg = reg
		h.res.Profile.Registry = reg.Addr
		h.printf("profile loopback: registry at %s", reg.Addr)
	} else {
		l, err := rig.NewLink(ctx, rig.LinkOptions{Rate: rate, RTT: h.o.RTT})
		if err != nil {
			return fmt.Errorf("emulated link: %w", err)
		}
		h.link = l
		err = rig.InNetns(l.NetnsPath, func() error {
			reg, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: regDir, Addr: l.FarIP + ":5000"})
			h.reg = reg
			return err
		})
		if err != nil {
			return fmt.Errorf("registry behind the link: %w", err)
		}
		h.res.Profile.Registry = h.reg.Addr
		h.printf("profile %s: %d bit/s, RTT %s, registry at %s in network namespace %s", h.res.Profile.Name, rate, h.o.RTT, h.reg.Addr, l.Netns)
	}
	storeShown := h.o.Store
	if h.link != nil && h.o.Store == "" {
		// Behind a link, Slacker's chunks must cross it as the baseline's layers do:
		// in a MinIO server beside the registry (the S3 store), or in the registry
		// itself, packed into blobs (the registry store).
		switch h.o.StoreServer {
		case "registry":
			h.o.Store = "registry://" + h.reg.Addr + "/slacker/chunks"
			if h.o.StoreCompress != "" {
				h.o.Store += "?compress=" + h.o.StoreCompress
			}
			storeShown = h.o.Store
		default:
			err := rig.InNetns(h.link.NetnsPath, func() error {
				m, err := services.StartMinIO(ctx, services.MinIOOptions{Dir: filepath.Join(h.o.Dir, "minio"), Addr: h.link.FarIP + ":9000"})
				h.minio = m
				return err
			})
			if err != nil {
				return fmt.Errorf("S3 store behind the link: %w", err)
			}
			h.o.Store = h.minio.Location("slacker", "")
			if h.o.StoreCompress != "" {
				h.o.Store += "&compress=" + h.o.StoreCompress
			}
			storeShown = "s3://" + h.minio.Addr + "/slacker (MinIO)"
		}
		h.printf("Slacker's chunk store behind the link: %s", storeShown)
	}
	h.res.Profile.Store = storeShown
	h.res.Profile.PublishUnshaped = h.o.PublishUnshaped && h.link != nil
	if h.o.Store == "" {
		h.res.Profile.Store = filepath.Join(h.o.Dir, "slacker", "store")
	}
	h.res.Profile.StoreRemote = h.link != nil && strings.Contains(storeShown, h.link.FarIP)
	if h.link != nil && !h.res.Profile.StoreRemote {
		note := "Slacker's chunk store was a directory on the node, not across the link: only the registry was behind it, so Slacker's data never crossed the emulated network"
		h.res.Notes = append(h.res.Notes, note)
		h.printf("note: %s", note)
	}
	return nil
}

func (h *harness) makeSystems(specs []SystemSpec) error {
	for _, sp := range specs {
		var s rig.System
		var err error
		detail := ""
		switch sp.Kind {
		case "slacker":
			// slacker-block has a node of its own and, when the store is a directory on
			// the node, a store of its own (Dir/slacker-block/store); a store behind
			// the link is the run's, shared.
			dir := filepath.Join(h.o.Dir, sp.Name)
			s, err = rig.NewSlacker(rig.SlackerOptions{Dir: dir, Slacker: h.o.Slacker, RootMode: sp.RootMode,
				Slackerd: h.o.Slackerd, DaemonArgs: h.o.SlackerdArgs, Store: h.o.Store})
			store := h.res.Profile.Store
			if h.o.Store == "" {
				store = filepath.Join(dir, "store")
			}
			detail = "slackerd + slacker CLI (pull, run), store " + store
			if sp.RootMode != "" {
				detail = "slackerd --container-root " + sp.RootMode + " + slacker CLI (pull, run --root-mode " + sp.RootMode + "), store " + store
			}
			if len(h.o.SlackerdArgs) > 0 {
				detail += ", slackerd " + strings.Join(h.o.SlackerdArgs, " ")
			}
		case rig.SlackerContainerdName:
			// slackerd (snapshotter on) under Dir/slacker-containerd, containerd under
			// Dir/ctrd-sc with it as the proxy snapshotter "slacker"; the store as for
			// slacker.
			dir := filepath.Join(h.o.Dir, sp.Name)
			s, err = rig.NewContainerdSlacker(rig.SlackerOptions{Dir: dir, Slacker: h.o.Slacker, Slackerd: h.o.Slackerd,
				DaemonArgs: h.o.SlackerdArgs, Store: h.o.Store}, filepath.Join(h.o.Dir, "ctrd-sc"), h.o.Stargz)
			store := h.res.Profile.Store
			if h.o.Store == "" {
				store = filepath.Join(dir, "store")
			}
			detail = "containerd 1.6 + runc, pulled through containerd's client with CRI's layer labels (slacker-stargz pull, as stargz is) and run by ctr, snapshotter slacker (slackerd's proxy plugin; layers prepared from the image's labels), store " + store
		case rig.StargzName:
			// slacker-stargz serve under Dir/stargz, containerd under Dir/ctrd-sz with
			// it as the proxy snapshotter "stargz"; the registry is the baseline's.
			s, err = rig.NewStargz(rig.StargzOptions{Dir: filepath.Join(h.o.Dir, sp.Name), CtrdDir: filepath.Join(h.o.Dir, "ctrd-sz"), Bin: h.o.Stargz})
			detail = "containerd 1.6 + runc via ctr, snapshotter stargz (stargz-snapshotter v0.19.1's service, default configuration, as a proxy plugin; pulled with its layer labels), eStargz images in the registry"
			if h.o.Optimize {
				detail += ", optimized with a recorded run of each workload (prioritized files)"
			}
		default:
			dir := filepath.Join(h.o.Dir, "ctrd")
			if sp.Name != "overlayfs" {
				dir = filepath.Join(h.o.Dir, "ctrd-"+sp.Name)
			}
			s, err = rig.NewContainerd(rig.ContainerdOptions{Dir: dir, Snapshotter: sp.Snapshotter, ProxySocket: sp.Socket, Name: sp.Name})
			detail = "containerd 1.6 + runc via ctr, snapshotter " + sp.Snapshotter
			if sp.Socket != "" {
				detail += " (proxy at " + sp.Socket + ", already running: its own state is not reset by Cold)"
			}
		}
		if err != nil {
			return err
		}
		h.systems = append(h.systems, s)
		h.res.Systems = append(h.res.Systems, SystemInfo{Name: sp.Name, Detail: detail})
	}
	return nil
}

// unshaped runs set-up with the link's rate and delay off, if the options say so
// (Options.PublishUnshaped), and shapes it again after.
func (h *harness) unshaped(setup func()) {
	if !h.o.PublishUnshaped || h.link == nil {
		setup()
		return
	}
	h.link.SetShaped(false)
	defer h.link.SetShaped(true)
	h.printf("the link's rate and delay are off for this set-up (--publish-unshaped)")
	setup()
}

// linkShaped says whether publishes now cross the link at its rate and delay
// (always true on loopback, where there is no link to unshape).
func (h *harness) linkShaped() bool { return h.link == nil || h.link.Shaped() }

// publish pushes every image whole with every system (the first push).
func (h *harness) publish(ctx context.Context) {
	for _, s := range h.systems {
		h.refs[s.Name()], h.pubErr[s.Name()] = map[string]string{}, map[string]string{}
		for _, w := range h.ws {
			if ctx.Err() != nil {
				return
			}
			start := time.Now()
			far0 := h.linkBytesAway()
			pctx, cancel := context.WithTimeout(ctx, pushTimeout)
			ref, took, err := s.Publish(pctx, h.imgs[w.Name], h.reg.Addr)
			cancel()
			p := PublishSample{Workload: w.Name, System: s.Name(), OK: err == nil, Push: took.Seconds(), Total: time.Since(start).Seconds(),
				LinkBytes: h.linkBytesAway() - far0, Unshaped: !h.linkShaped()}
			if err != nil {
				p.Failure = err.Error()
				h.pubErr[s.Name()][w.Name] = err.Error()
				h.printf("%s: publishing %s FAILED: %v", s.Name(), w.Name, err)
			} else {
				h.refs[s.Name()][w.Name] = ref
				h.printf("%s: published %s in %.2fs (push %.3fs)", s.Name(), w.Name, p.Total, p.Push)
			}
			h.res.Publish = append(h.res.Publish, p)
		}
		s.Close()
	}
}

// linkBytesAway is what has crossed the link away from the node so far (0 without one).
func (h *harness) linkBytesAway() int64 {
	if h.link == nil {
		return 0
	}
	toFar, _ := h.link.Bytes()
	return toFar
}

// footprint records what the published images take: the distinct layers the
// baseline pushed, and every Slacker store's objects (listed through the store's
// own backend, so a compressed object counts as the store keeps it). A store that
// cannot be listed is noted, not fatal.
func (h *harness) footprint(ctx context.Context) {
	f := &Footprint{}
	for _, l := range h.layers {
		f.Layers++
		f.GzipLayerBytes += l.Size
		f.TarLayerBytes += l.USize
	}
	byLocation := map[string]*StoreFootprint{}
	var order []string
	for _, s := range h.systems {
		sl, ok := s.(rig.SlackerSystem)
		if !ok {
			continue
		}
		loc := sl.Store()
		if sf := byLocation[loc]; sf != nil {
			sf.Systems = append(sf.Systems, s.Name())
			continue
		}
		st, shown, err := storeurl.Open(loc)
		if err != nil {
			h.res.Notes = append(h.res.Notes, fmt.Sprintf("footprint: store of %s: %v", s.Name(), err))
			continue
		}
		sf := &StoreFootprint{Systems: []string{s.Name()}, Store: shown}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		err = st.List(lctx, func(i store.Info) error {
			sf.Objects++
			sf.ContentBytes += i.Size
			sf.StoredBytes += i.StoredBytes()
			if i.StoredBytes() < i.Size {
				sf.Compressed++
			}
			return nil
		})
		cancel()
		if c, ok := st.(io.Closer); ok {
			c.Close()
		}
		if err != nil {
			h.res.Notes = append(h.res.Notes, fmt.Sprintf("footprint: list the store of %s: %v", s.Name(), err))
			continue
		}
		byLocation[loc] = sf
		order = append(order, loc)
	}
	for _, loc := range order {
		f.Stores = append(f.Stores, *byLocation[loc])
	}
	h.res.Footprint = f
	for _, sf := range f.Stores {
		h.printf("footprint: %s holds %d objects, %s of content kept in %s (%d compressed); the baseline's %d distinct layers: %s gzip, %s tar",
			strings.Join(sf.Systems, ","), sf.Objects, corpus.HumanBytes(sf.ContentBytes), corpus.HumanBytes(sf.StoredBytes), sf.Compressed,
			f.Layers, corpus.HumanBytes(f.GzipLayerBytes), corpus.HumanBytes(f.TarLayerBytes))
	}
}

// warmup deploys every workload once with each Slacker system, untimed, so that
// its store holds each image's start-up trace (recorded by the first container of
// an image that has none), as one earlier run of the image anywhere would leave
// it. The other containerd systems keep nothing between cold samples, so they get
// none.
func (h *harness) warmup(ctx context.Context) {
	for _, s := range h.systems {
		if _, ok := s.(rig.SlackerSystem); !ok {
			continue
		}
		for i, w := range h.ws {
			if ctx.Err() != nil {
				return
			}
			smp := h.sample(ctx, task{w, s, Deployment}, 0, i)
			h.res.Warmups = append(h.res.Warmups, smp)
			h.printf("warm-up: %s", progressLine(0, 0, i+1, len(h.ws), &smp))
		}
	}
	h.save()
}

// optimize lays every published Slacker image out for start-up from the trace the
// warm-up recorded, and converts every eStargz image again from a recorded run of
// its workload; each is published again under the same reference.
func (h *harness) optimize(ctx context.Context) {
	for _, s := range h.systems {
		var opt optimizer
		switch x := s.(type) {
		case *rig.Stargz:
			opt = h.optimizeStargz(x)
		case rig.SlackerSystem:
			opt = func(ctx context.Context, _ int, w *workload.Workload, p *PublishSample) (time.Duration, string, error) {
				lay, took, err := x.Optimize(ctx, h.imgs[w.Name], h.reg.Addr)
				if err != nil {
					return took, "", err
				}
				p.Layout = lay
				return took, fmt.Sprintf("start-up reads %s, fetched in chunks of %s (was %s)",
					corpus.HumanBytes(lay.ReadBytes), corpus.HumanBytes(lay.FetchAfter), corpus.HumanBytes(lay.FetchBefore)), nil
			}
		default:
			continue
		}
		h.optimizeAll(ctx, s, opt)
	}
	h.save()
}

// optimizer publishes one image of w again, laid out for start-up, and says in p
// what it did; it returns the push's time and a summary for the progress line.
type optimizer func(ctx context.Context, seq int, w *workload.Workload, p *PublishSample) (push time.Duration, summary string, err error)

// optimizeAll runs opt on every image s published, recording each as a publish
// entry marked optimize, then closes s.
func (h *harness) optimizeAll(ctx context.Context, s rig.System, opt optimizer) {
	defer s.Close()
	for i, w := range h.ws {
		if ctx.Err() != nil {
			return
		}
		if _, ok := h.refs[s.Name()][w.Name]; !ok {
			continue
		}
		p := PublishSample{Workload: w.Name, System: s.Name(), Optimize: true, Unshaped: !h.linkShaped()}
		start := time.Now()
		far0 := h.linkBytesAway()
		pctx, cancel := context.WithTimeout(ctx, pushTimeout)
		took, summary, err := opt(pctx, i, w, &p)
		cancel()
		p.OK, p.Push, p.Total, p.LinkBytes = err == nil, took.Seconds(), time.Since(start).Seconds(), h.linkBytesAway()-far0
		if err != nil {
			p.Failure = err.Error()
			h.printf("%s: optimizing %s FAILED: %v", s.Name(), w.Name, err)
		} else {
			h.printf("%s: optimized %s in %.2fs: %s", s.Name(), w.Name, p.Total, summary)
		}
		h.res.Publish = append(h.res.Publish, p)
	}
}

// optimizeStargz converts a published eStargz image again with the files a
// recorded run of its workload read placed first, and pushes it under the same
// reference: ctr-remote optimize. The run is the sample's (same command, input
// and readiness), on the image's original layers; it ends when the workload is
// ready. A run that is not ready is noted and its files used anyway, as
// ctr-remote optimize does with what its analyzer saw.
func (h *harness) optimizeStargz(s *rig.Stargz) optimizer {
	return func(ctx context.Context, seq int, w *workload.Workload, p *PublishSample) (time.Duration, string, error) {
		files, note, err := h.record(ctx, s, w, seq)
		p.RecordedFiles, p.RecordNote = len(files), note
		if err != nil {
			return 0, "", err
		}
		took, err := s.Optimize(ctx, h.imgs[w.Name], h.reg.Addr, files)
		return took, fmt.Sprintf("a recorded run read %d files%s", len(files), clipNote(note)), err
	}
}

func clipNote(note string) string {
	if note == "" {
		return ""
	}
	return " (" + clip(note, 200) + ")"
}

// record runs w once on stargz's recording node, until ready, and returns the
// files it read; note says why the run was not ready, if it was not.
func (h *harness) record(ctx context.Context, s *rig.Stargz, w *workload.Workload, seq int) (files []string, note string, err error) {
	spec, _, matcher, streams := runSpec(w, fmt.Sprintf("hb-rec-%d-%s", seq, w.Name))
	c, watch, release, err := s.StartRecording(ctx, h.imgs[w.Name], h.reg.Addr, spec)
	if err != nil {
		return nil, "", fmt.Errorf("recorded run: %w", err)
	}
	defer release()
	o := await(ctx, w, c, c.Started, matcher, streams, rig.DialInNetns)
	files, werr := watch.Stop()
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	c.Remove(rctx)
	rcancel()
	if werr != nil {
		return nil, "", fmt.Errorf("recorded run: %w", werr)
	}
	if !o.Ready {
		note = "recorded run not ready: " + o.Reason
		if tail := c.StderrTail(); tail != "" {
			note += "; stderr: " + clip(rig.LastLines(tail, 3), 300)
		}
	}
	if len(files) == 0 {
		return nil, note, errors.New("the recorded run read no file of the image")
	}
	return files, note, nil
}

// runSpec is the container w runs in: its command and input, its output kept in
// out (the head) and, for a workload ready at a log line, fed to the matcher.
func runSpec(w *workload.Workload, name string) (rig.RunSpec, *headBuffer, *workload.LineMatcher, []io.Writer) {
	out := &headBuffer{max: 64 << 10}
	var stdout, stderr io.Writer = out, nil
	var matcher *workload.LineMatcher
	var streams []io.Writer
	if r, ok := w.Ready.(*workload.Log); ok {
		matcher = workload.NewLineMatcher(r)
		streams = []io.Writer{matcher.Stream(), matcher.Stream()}
		stdout, stderr = io.MultiWriter(out, streams[0]), streams[1]
	}
	spec := rig.RunSpec{Name: name, Args: w.Cmd, Stdout: stdout, Stderr: stderr}
	if w.HasStdin {
		spec.Stdin = strings.NewReader(w.Stdin)
	}
	return spec, out, matcher, streams
}

type task struct {
	w     *workload.Workload
	sys   rig.System
	cycle string
}

// measure runs every (workload, system, cycle) once per run, shuffled.
func (h *harness) measure(ctx context.Context) {
	rng := rand.New(rand.NewPCG(h.o.Seed, 0x48656c6c6f))
	var tasks []task
	for _, w := range h.ws {
		for _, s := range h.systems {
			for _, c := range h.o.Cycles {
				tasks = append(tasks, task{w, s, c})
			}
		}
	}
	total := len(tasks) * h.o.Runs
	done := 0
	for run := 1; run <= h.o.Runs; run++ {
		order := slices.Clone(tasks)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for seq, t := range order {
			if ctx.Err() != nil {
				return
			}
			s := h.sample(ctx, t, run, seq)
			if ctx.Err() != nil {
				return // an interrupted sample is not a failure of the system
			}
			done++
			h.res.Samples = append(h.res.Samples, s)
			h.save()
			h.printf("%s", progressLine(run, h.o.Runs, done, total, &s))
		}
	}
}

func progressLine(run, runs, done, total int, s *Sample) string {
	var b strings.Builder
	fmt.Fprintf(&b, "run %d/%d [%d/%d] %-10s %-11s %-16s", run, runs, done, total, s.System, s.Cycle, s.Workload)
	if s.Cycle == Development {
		fmt.Fprintf(&b, " push %.3fs", s.Push)
	}
	fmt.Fprintf(&b, " pull %.3fs run %.3fs", s.Pull, s.RunTime)
	if s.OK {
		fmt.Fprintf(&b, " moved %s", corpus.HumanBytes(s.Fetched()))
		if s.ReadBytes >= 0 {
			fmt.Fprintf(&b, " read %s", corpus.HumanBytes(s.ReadBytes))
		}
		fmt.Fprintf(&b, " (%s)", s.Ready)
	} else {
		fmt.Fprintf(&b, " FAILED at %s: %s", s.Stage, clip(s.Failure, 300))
	}
	return b.String()
}

// change is the development cycle's change for a run: one deterministic file.
func change(w *workload.Workload, run int) rig.Change {
	return rig.Change{Tag: fmt.Sprintf("dev-%d", run), Path: "/hellobench/change",
		Content: []byte(fmt.Sprintf("hellobench development change %d of %s\n", run, w.Name))}
}

// sample measures one cycle from a cold node.
func (h *harness) sample(ctx context.Context, t task, run, seq int) (s Sample) {
	w, sys := t.w, t.sys
	s = Sample{Workload: w.Name, Category: string(w.Category), System: sys.Name(), Cycle: t.cycle, Run: run, Seq: seq,
		Start: time.Now().UTC(), ReadBytes: -1}
	fail := func(stage string, err error) Sample {
		s.OK, s.Stage, s.Failure = false, stage, err.Error()
		return s
	}
	defer sys.Close()
	ref, ok := h.refs[sys.Name()][w.Name]
	if !ok {
		return fail("publish", fmt.Errorf("the image was not published: %s", h.pubErr[sys.Name()][w.Name]))
	}
	if t.cycle == Development {
		dev, ok := sys.(rig.Developer)
		if !ok {
			return fail("push", fmt.Errorf("%s cannot push a change", sys.Name()))
		}
		var far0 int64
		if h.link != nil {
			far0, _ = h.link.Bytes()
		}
		pctx, cancel := context.WithTimeout(ctx, pushTimeout)
		pr, err := dev.PushChange(pctx, h.imgs[w.Name], ref, change(w, run))
		cancel()
		if err != nil {
			return fail("push", err)
		}
		s.Push, s.PushBytes, ref = pr.Took.Seconds(), pr.Bytes, pr.Ref
		if h.link != nil {
			far1, _ := h.link.Bytes()
			s.PushLinkBytes = far1 - far0
		}
		if len(pr.Parts) > 0 {
			s.PushParts = map[string]float64{}
			for k, v := range pr.Parts {
				s.PushParts[k] = v.Seconds()
			}
		}
	}
	if err := sys.Cold(ctx); err != nil {
		return fail("cold", err)
	}
	var near0, dropped0 int64
	if h.link != nil {
		_, near0 = h.link.Bytes()
		dropped0 = h.link.Dropped()
	}
	pctx, cancel := context.WithTimeout(ctx, pullTimeout)
	pull, err := sys.Pull(pctx, ref)
	cancel()
	s.Pull = pull.Seconds()
	if err != nil {
		return fail("pull", err)
	}
	starter, ok := sys.(rig.Starter)
	if !ok {
		return fail("start", fmt.Errorf("%s cannot start containers in the background", sys.Name()))
	}
	spec, out, matcher, streams := runSpec(w, fmt.Sprintf("hb-%d-%d-%s", run, seq, w.Name))
	c, err := starter.Start(ctx, ref, spec)
	if err != nil {
		return fail("start", err)
	}
	o := await(ctx, w, c, c.Started, matcher, streams, rig.DialInNetns)
	s.RunTime = o.At.Sub(c.Started).Seconds()
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	st, rerr := c.Remove(rctx)
	rcancel()
	s.ReadBytes, s.TracesReplayed = st.ReadBytes, st.TracesReplayed
	if tc, ok := sys.(rig.TrafficCounter); ok {
		if tr, err := tc.Traffic(context.WithoutCancel(ctx)); err == nil {
			s.RegistryBytes, s.StoreBytes = tr.RegistryBytes, tr.StoreBytes
		}
	}
	if h.link != nil {
		_, near1 := h.link.Bytes()
		s.LinkBytes, s.LinkDropped = near1-near0, h.link.Dropped()-dropped0
		if _, counts := sys.(rig.TrafficCounter); !counts {
			// The system cannot say what it moved (stargz): what crossed the link
			// towards the node is all it fetched (IP level, so a few % high).
			s.RegistryBytes = s.LinkBytes
		}
	}
	if o.Exited {
		code := o.Code
		s.ExitCode = &code
	}
	if _, isExit := w.Ready.(*workload.Exit); isExit {
		s.Output = clip(out.String(), outputKeep)
	}
	s.Total = s.Push + s.Pull + s.RunTime
	if !o.Ready {
		msg := o.Reason
		if tail := c.StderrTail(); tail != "" {
			msg += "; stderr: " + clip(rig.LastLines(tail, 5), 600)
		}
		return fail("ready", errors.New(msg))
	}
	s.OK, s.Ready = true, o.What
	if rerr != nil {
		// Ready, but the container could not be removed: the next cold start resets
		// the node anyway; keep the sample and say so.
		h.printf("warning: removing %s: %v", spec.Name, rerr)
	}
	return s
}

func (h *harness) save() {
	if h.o.Results == "" {
		return
	}
	h.res.Elapsed = time.Since(h.started).Seconds()
	if err := h.res.WriteJSON(h.o.Results); err != nil {
		h.printf("warning: write %s: %v", h.o.Results, err)
	}
}

// teardown stops what the harness started, in reverse order.
func (h *harness) teardown() {
	for _, s := range h.systems {
		s.Close()
	}
	if h.reg != nil {
		h.reg.Stop()
	}
	if h.minio != nil {
		h.minio.Stop()
	}
	if h.link != nil {
		if err := h.link.Close(); err != nil {
			h.printf("warning: %v", err)
		}
	}
	unmountUnder(h.o.Dir)
	if h.o.KeepDir {
		return
	}
	// The registry, the stores and containerd's state: tens of GB after a full run.
	dir, err := filepath.Abs(h.o.Dir)
	if err != nil {
		return
	}
	if res, err := filepath.Abs(h.o.Results); err == nil && h.o.Results != "" && strings.HasPrefix(res, dir+string(filepath.Separator)) {
		h.printf("work directory %s kept: the results are in it", dir)
		return
	}
	if ms, err := mount.Mounts(dir); err != nil || len(ms) > 0 {
		h.printf("warning: work directory %s kept: %d file systems still mounted under it (%v)", dir, len(ms), err)
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		h.printf("warning: remove work directory: %v", err)
	}
}

// headBuffer keeps the first max bytes written.
type headBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (b *headBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - len(b.b); room > 0 {
		b.b = append(b.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *headBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.b)
}

// resetDir empties dir, first detaching anything a killed run left mounted in it,
// so that removing it never walks into a mounted file system.
func resetDir(dir string) error {
	if dir == "" || dir == "/" {
		return fmt.Errorf("refusing work directory %q", dir)
	}
	unmountUnder(dir)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("empty work directory: %w", err)
	}
	return os.MkdirAll(dir, 0o755)
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return
	}
	ms, err := mount.Mounts(abs)
	if err != nil {
		return
	}
	for _, m := range ms {
		unix.Unmount(m.Target, unix.MNT_DETACH)
	}
}
