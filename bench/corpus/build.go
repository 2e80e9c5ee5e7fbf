package corpus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/bench/workload"
)

// DefaultDir is the corpus directory when neither --dir nor $SLACKER_BENCH_CORPUS
// says otherwise.
const DefaultDir = "/var/lib/slacker-bench/corpus"

// DirEnv names the environment variable that overrides DefaultDir.
const DirEnv = "SLACKER_BENCH_CORPUS"

// DefaultMinFree is the free space a build needs on the corpus file system.
const DefaultMinFree = 8 << 30

// Options configures a Corpus.
type Options struct {
	// Dir is the corpus directory (see Paths). Required.
	Dir string
	// Source is where packages come from; zero means DefaultSource.
	Source Source
	// MinFree refuses to start, or to start another layer, when the corpus file
	// system has less free space. Zero means DefaultMinFree; negative disables.
	MinFree int64
	// Jobs is how many layers build at once (apt is I/O bound). Zero means 1.
	Jobs int
	// KeepAptCache keeps downloaded .debs and apt lists between builds (under
	// work/apt); by default the work directory is removed after a build.
	KeepAptCache bool
	// Force rebuilds images whose records are up to date (layers stay cached).
	Force bool
	// Recheck rebuilds every app layer, which re-runs the checks of each image's
	// cmd against the image (see AnalyzeCmd); package layers stay cached.
	Recheck bool
	// Logger gets structured events; nil discards.
	Logger *slog.Logger
	// Progress gets one human line per event (stderr in the CLI); nil discards.
	Progress io.Writer
}

// Corpus is an opened corpus directory:
//
//	DIR/oci/          OCI image layout: every image, tagged by workload name
//	DIR/layers/       layer cache: KEY.json per built layer (blob in oci/)
//	DIR/records/      NAME.json per image: layers, sizes, package versions
//	DIR/work/         rootfs trees and apt caches while building; removed after
//	DIR/registry/     data of the registry started by Push
type Corpus struct {
	opts   Options
	Layout *Layout
	log    *slog.Logger
	prog   io.Writer
	progMu sync.Mutex
	start  time.Time
}

// Open opens (creating if needed) the corpus directory.
func Open(opts Options) (*Corpus, error) {
	if opts.Dir == "" {
		return nil, errors.New("open corpus: no directory given")
	}
	if opts.Source.Suite == "" {
		opts.Source = DefaultSource
	}
	if opts.MinFree == 0 {
		opts.MinFree = DefaultMinFree
	}
	if opts.Jobs <= 0 {
		opts.Jobs = 1
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("open corpus: %w", err)
	}
	l, err := OpenLayout(filepath.Join(opts.Dir, "oci"))
	if err != nil {
		return nil, err
	}
	return &Corpus{opts: opts, Layout: l, log: opts.Logger, prog: opts.Progress, start: time.Now()}, nil
}

// Dir returns the corpus directory.
func (c *Corpus) Dir() string { return c.opts.Dir }

func (c *Corpus) path(parts ...string) string {
	return filepath.Join(append([]string{c.opts.Dir}, parts...)...)
}

func (c *Corpus) progressf(format string, args ...any) {
	c.progMu.Lock()
	defer c.progMu.Unlock()
	el := time.Since(c.start).Truncate(time.Second)
	fmt.Fprintf(c.prog, "[%7s] %s\n", el, fmt.Sprintf(format, args...))
}

// lock takes the corpus lock so two builders never share a corpus.
func (c *Corpus) lock() (func(), error) {
	f, err := os.OpenFile(c.path(".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("corpus %s is locked by another build (%w)", c.opts.Dir, err)
	}
	return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}

// FreeBytes returns the free space of the file system holding dir.
func FreeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// DiskUsage returns the bytes allocated under dir (hard links counted once).
func DiskUsage(dir string) (int64, error) {
	var total int64
	seen := map[uint64]bool{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			if isNotExist(err) {
				return nil
			}
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Nlink > 1 && !fi.IsDir() {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}

func (c *Corpus) checkFree() error {
	if c.opts.MinFree < 0 {
		return nil
	}
	free, err := FreeBytes(c.opts.Dir)
	if err != nil {
		return err
	}
	if free < c.opts.MinFree {
		return fmt.Errorf("only %s free under %s, below the minimum %s (free space or lower --min-free)",
			HumanBytes(free), c.opts.Dir, HumanBytes(c.opts.MinFree))
	}
	return nil
}

// Status of one workload after a build.
type Status string

const (
	StatusBuilt    Status = "built"
	StatusUpToDate Status = "up-to-date"
	StatusFailed   Status = "failed"
)

// Result is the outcome of one workload.
type Result struct {
	Name   string
	Status Status
	// Err says why a failed workload failed (the first failing layer).
	Err    error
	Record *ImageRecord
}

// Report is the outcome of a build.
type Report struct {
	Results []Result
	// LayersBuilt and LayersCached count distinct layers.
	LayersBuilt, LayersCached int
	Elapsed                   time.Duration
	// DiskUsage is the corpus directory's allocated size after the build.
	DiskUsage int64
}

// Failed returns the failed results.
func (r *Report) Failed() []Result {
	var out []Result
	for _, x := range r.Results {
		if x.Status == StatusFailed {
			out = append(out, x)
		}
	}
	return out
}

// build is the state of one Build call.
type build struct {
	c       *Corpus
	ctx     context.Context
	forest  *Forest
	apt     *hostApt
	work    string
	slots   chan int // worker ids; a layer builds while holding one
	helloMu sync.Mutex
	hello   string

	mu      sync.Mutex
	records map[string]*LayerRecord // key -> record (cached or built)
	failed  map[string]error        // key -> why it (or a parent) failed
	nBuilt  int
	nCached int
}

// Build builds the images of ws into the corpus. Images whose record matches
// their definition are left alone; others are rebuilt from their first layer
// that is not in the layer cache. A workload that fails is reported in the
// Report with its reason and does not stop the others; the returned error is
// only for failures of the build as a whole (lock, disk, apt update).
func (c *Corpus) Build(ctx context.Context, ws []*workload.Workload) (*Report, error) {
	c.start = time.Now()
	unlock, err := c.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := c.checkFree(); err != nil {
		return nil, err
	}
	rep := &Report{}
	var todo []*workload.Workload
	for _, w := range ws {
		if rec, ok := c.upToDate(w); ok && !c.opts.Force && !c.opts.Recheck {
			rep.Results = append(rep.Results, Result{Name: w.Name, Status: StatusUpToDate, Record: rec})
			c.progressf("%-16s up to date (%s)", w.Name, rec.Manifest[:19])
			continue
		}
		todo = append(todo, w)
	}
	if len(todo) > 0 {
		if err := c.buildAll(ctx, todo, rep); err != nil {
			return rep, err
		}
	}
	order := map[string]int{}
	for i, w := range ws {
		order[w.Name] = i
	}
	sort.Slice(rep.Results, func(i, j int) bool { return order[rep.Results[i].Name] < order[rep.Results[j].Name] })
	rep.Elapsed = time.Since(c.start)
	rep.DiskUsage, _ = DiskUsage(c.opts.Dir)
	c.log.Info("corpus-built", "images", len(ws), "failed", len(rep.Failed()),
		"layers_built", rep.LayersBuilt, "layers_cached", rep.LayersCached,
		"elapsed", rep.Elapsed.Round(time.Second), "disk", rep.DiskUsage)
	return rep, nil
}

// upToDate reports whether w's image is built from its current definition and
// every blob it needs is present.
func (c *Corpus) upToDate(w *workload.Workload) (*ImageRecord, bool) {
	var rec ImageRecord
	if err := readJSON(c.path("records", w.Name+".json"), &rec); err != nil {
		return nil, false
	}
	if rec.ImageHash != w.ImageHash() || rec.Source != c.opts.Source || rec.Recipe != RecipeVersion {
		return nil, false
	}
	tags, err := c.Layout.Tags()
	if err != nil || tags[w.Name].Digest.String() != rec.Manifest {
		return nil, false
	}
	if !c.Layout.HasBlob(rec.Manifest, -1) || !c.Layout.HasBlob(rec.Config, -1) {
		return nil, false
	}
	for _, l := range rec.Layers {
		if !c.Layout.HasBlob(l.Digest, l.Size) {
			return nil, false
		}
	}
	return &rec, true
}

func (c *Corpus) buildAll(ctx context.Context, ws []*workload.Workload, rep *Report) error {
	b := &build{
		c: c, ctx: ctx, forest: BuildForest(ws, c.opts.Source),
		work:    c.path("work"),
		slots:   make(chan int, c.opts.Jobs),
		records: map[string]*LayerRecord{},
		failed:  map[string]error{},
	}
	b.apt = newHostApt(filepath.Join(b.work, "apt"), c.opts.Source)
	for i := 0; i < c.opts.Jobs; i++ {
		b.slots <- i
	}
	defer func() {
		if c.opts.KeepAptCache {
			for _, d := range []string{"L", "W", "M", "debs", "hello", "results"} {
				os.RemoveAll(filepath.Join(b.work, d))
			}
		} else {
			os.RemoveAll(b.work)
		}
	}()
	for _, d := range []string{"L", "W", "M", "debs", "logs", "results"} {
		if err := os.MkdirAll(filepath.Join(b.work, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(c.path("logs"), 0o755); err != nil {
		return err
	}
	// Which layers are cached?
	for key := range b.forest.Nodes {
		var rec LayerRecord
		if err := readJSON(c.path("layers", key+".json"), &rec); err == nil &&
			(rec.Empty || c.Layout.HasBlob(rec.Digest, rec.Size)) && !(c.opts.Recheck && rec.Kind == StepApp) {
			b.records[key] = &rec
		}
	}
	distinct, refs := b.forest.Shared()
	missing := 0
	for key := range b.forest.Nodes {
		if b.records[key] == nil {
			missing++
		}
	}
	c.progressf("building %d images: %d distinct layers (%d layer references), %d cached, %d to build",
		len(ws), distinct, refs, distinct-missing, missing)
	if missing > 0 {
		needsApt := false
		for key := range b.forest.Nodes {
			n := b.forest.Nodes[key]
			if b.records[key] == nil && n.Kind == StepPackages {
				needsApt = true
			}
		}
		if needsApt {
			c.progressf("apt-get update (%s %s)", c.opts.Source.Mirror, c.opts.Source.Suite)
			if err := b.apt.update(ctx, c.path("logs", "apt-update.log")); err != nil {
				return err
			}
		}
	}
	var wg sync.WaitGroup
	for _, root := range b.forest.Roots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.visit(root, nil)
		}()
	}
	wg.Wait()
	rep.LayersBuilt, rep.LayersCached = b.nBuilt, b.nCached
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, w := range ws {
		res := Result{Name: w.Name}
		rec, err := b.assemble(w)
		if err != nil {
			res.Status, res.Err = StatusFailed, err
			c.progressf("%-16s FAILED: %v", w.Name, firstLine(err))
		} else {
			res.Status, res.Record = StatusBuilt, rec
			c.progressf("%-16s built: %d layers, %s compressed, %s uncompressed",
				w.Name, len(rec.Layers), HumanBytes(rec.Size), HumanBytes(rec.USize))
		}
		rep.Results = append(rep.Results, res)
	}
	return nil
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// needsWork reports whether n or any layer above it must be built.
func (b *build) needsWork(n *Node) bool {
	b.mu.Lock()
	rec := b.records[n.Key]
	b.mu.Unlock()
	if rec == nil {
		return true
	}
	for _, ch := range n.Children {
		if b.needsWork(ch) {
			return true
		}
	}
	return false
}

// visit makes n's directory available (building or extracting it), visits its
// children on top of it, then removes it. lowers are the ancestors' directories,
// topmost first.
func (b *build) visit(n *Node, lowers []string) {
	if !b.needsWork(n) {
		b.mu.Lock()
		b.nCached += countNodes(n)
		b.mu.Unlock()
		return
	}
	dir, err := b.makeLayer(n, lowers)
	if err != nil {
		b.failSubtree(n, err)
		return
	}
	defer removeTree(dir)
	sub := append([]string{dir}, lowers...)
	var wg sync.WaitGroup
	limit := make(chan struct{}, cap(b.slots))
	for _, ch := range n.Children {
		wg.Add(1)
		limit <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-limit }()
			b.visit(ch, sub)
		}()
	}
	wg.Wait()
}

func countNodes(n *Node) int {
	c := 1
	for _, ch := range n.Children {
		c += countNodes(ch)
	}
	return c
}

func (b *build) failSubtree(n *Node, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var mark func(*Node)
	mark = func(x *Node) {
		if _, ok := b.failed[x.Key]; !ok {
			b.failed[x.Key] = err
		}
		for _, ch := range x.Children {
			mark(ch)
		}
	}
	mark(n)
}

// removeTree deletes a work tree (overlay whiteouts and all).
func removeTree(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		// A read-only or immutable file would stop RemoveAll; make it writable.
		exec.Command("chmod", "-R", "u+w", dir).Run()
		os.RemoveAll(dir)
	}
}

// makeLayer builds n on lowers (or extracts its cached blob) into a directory
// usable as an overlay lower layer, and returns it.
func (b *build) makeLayer(n *Node, lowers []string) (string, error) {
	worker := <-b.slots
	defer func() { b.slots <- worker }()
	if err := b.ctx.Err(); err != nil {
		return "", err
	}
	dir := filepath.Join(b.work, "L", n.ShortKey())
	removeTree(dir)
	users := describeUsers(n.Users)
	b.mu.Lock()
	rec := b.records[n.Key]
	b.mu.Unlock()
	if rec != nil {
		if rec.Empty {
			return dir, os.MkdirAll(dir, 0o755)
		}
		t0 := time.Now()
		b.mu.Lock()
		b.nCached++
		b.mu.Unlock()
		if err := ExtractLayerToDir(b.ctx, b.c.Layout.BlobPath(rec.Digest), dir); err != nil {
			removeTree(dir)
			return "", fmt.Errorf("extract cached layer %s (%s): %w", n.ShortKey(), n.Describe(), err)
		}
		b.c.progressf("%s layer %d cached: %s (extracted in %s)", users, n.Depth+1, n.Describe(), since(t0))
		return dir, nil
	}
	if err := b.c.checkFree(); err != nil {
		return "", err
	}
	t0 := time.Now()
	b.c.progressf("%s layer %d: %s ...", users, n.Depth+1, n.Describe())
	stop := b.ticker(users, n, t0)
	rec, err := b.buildLayer(n, lowers, dir, worker)
	stop()
	if err != nil {
		removeTree(dir)
		b.c.progressf("%s layer %d FAILED after %s: %v", users, n.Depth+1, since(t0), firstLine(err))
		b.c.log.Error("layer-failed", "key", n.Key, "step", n.Describe(), "err", err)
		return "", err
	}
	rec.Built, rec.Seconds = time.Now().UTC(), time.Since(t0).Seconds()
	if err := writeJSON(b.c.path("layers", n.Key+".json"), rec); err != nil {
		removeTree(dir)
		return "", err
	}
	b.mu.Lock()
	b.records[n.Key] = rec
	b.nBuilt++
	b.mu.Unlock()
	if rec.Empty {
		b.c.progressf("%s layer %d done in %s: empty, left out of the image", users, n.Depth+1, since(t0))
	} else {
		b.c.progressf("%s layer %d done in %s: %s gz, %s tar, %d entries, +%d/-%d packages",
			users, n.Depth+1, since(t0), HumanBytes(rec.Size), HumanBytes(rec.USize), rec.Entries, len(rec.Added), len(rec.Removed))
	}
	b.c.log.Info("layer-built", "key", n.Key, "step", n.Describe(), "digest", rec.Digest, "size", rec.Size, "seconds", rec.Seconds)
	return dir, nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }

// ticker prints a line every 30 s while a long layer builds.
func (b *build) ticker(users string, n *Node, t0 time.Time) func() {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				b.c.progressf("%s layer %d: still running %s (%s)", users, n.Depth+1, n.Describe(), since(t0))
			}
		}
	}()
	return func() { close(done) }
}

func describeUsers(users []string) string {
	if len(users) == 1 {
		return users[0]
	}
	return fmt.Sprintf("%s(+%d)", users[0], len(users)-1)
}

func (b *build) buildLayer(n *Node, lowers []string, dir string, worker int) (*LayerRecord, error) {
	short := n.ShortKey()
	logFile := b.c.path("logs", short+".log")
	os.Remove(logFile)
	job := helperJob{
		Lowers: lowers,
		Upper:  dir,
		Work:   filepath.Join(b.work, "W", short),
		Merged: filepath.Join(b.work, "M", short),
		Result: filepath.Join(b.work, "results", short+".json"),
	}
	for _, d := range []string{dir, job.Work, job.Merged} {
		removeTree(d)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	defer removeTree(job.Work)
	defer os.Remove(job.Merged)
	var parent *LayerRecord
	if n.Parent != "" {
		b.mu.Lock()
		parent = b.records[n.Parent]
		b.mu.Unlock()
	}
	src := b.c.opts.Source
	rec := &LayerRecord{Key: n.Key, Parent: n.Parent, Kind: n.Kind, CreatedBy: n.Describe(), Source: src}
	var res *helperResult
	var err error
	switch {
	case n.Kind == StepBase:
		job.Op = opDebootstrap
		job.Suite, job.Mirror, job.Sources = src.Suite, src.Mirror, b.apt.sourcesList()
		if n.Base != workload.Standard {
			job.Variant = string(n.Base)
		}
		// One cache per variant: concurrent debootstraps must not share one.
		job.CacheDir = filepath.Join(b.work, "debootstrap-cache", string(n.Base))
		if err := os.MkdirAll(job.CacheDir, 0o755); err != nil {
			return nil, err
		}
		res, err = runHelper(b.ctx, job, logFile)
	case n.Kind == StepPackages && n.Scratch:
		debDir := filepath.Join(b.work, "debs", short)
		defer removeTree(debDir)
		debs, pkgs, derr := b.apt.download(b.ctx, n.Packages, debDir, logFile)
		if derr != nil {
			return nil, derr
		}
		job.Op, job.Debs = opUnpack, debs
		if res, err = runHelper(b.ctx, job, logFile); err == nil {
			if parent != nil {
				res.Installed = append(slices.Clone(parent.Installed), pkgs...)
			} else {
				res.Installed = pkgs
			}
		}
	case n.Kind == StepPackages:
		job.Op = opApt
		job.Packages = n.Packages
		job.Lists = b.apt.lists()
		job.Archives = b.apt.archives(worker)
		if err := os.MkdirAll(filepath.Join(job.Archives, "partial"), 0o755); err != nil {
			return nil, err
		}
		job.AptArgs = b.apt.chrootArgs()
		res, err = runHelper(b.ctx, job, logFile)
	default:
		job.Op = opApp
		job.Files, job.User, job.Cmd = n.App.Files, n.App.User, n.App.Cmd
		if n.App.Hello {
			if job.Hello, err = b.staticHello(); err != nil {
				return nil, err
			}
		}
		res, err = runHelper(b.ctx, job, logFile)
		if err == nil && n.Scratch && parent != nil {
			res.Installed = parent.Installed
		}
	}
	if err != nil {
		return nil, err
	}
	rec.Installed, rec.Notes, rec.Problems = res.Installed, res.Notes, res.Problems
	var before []Package
	if parent != nil {
		before = parent.Installed
	}
	rec.Added, rec.Removed = diffPackages(before, rec.Installed)
	if n.Kind == StepApp {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		if len(ents) == 0 {
			rec.Empty = true
			return rec, nil
		}
	}
	var clamp time.Time
	if n.Kind == StepApp {
		clamp = appTime
	}
	blob, err := writeLayerFromDir(b.ctx, dir, b.c.Layout.BlobsDir(), clamp)
	if err != nil {
		return nil, err
	}
	rec.Blob = blob
	return rec, nil
}

// staticHello compiles the paper's hello-world program once per build.
func (b *build) staticHello() (string, error) {
	b.helloMu.Lock()
	defer b.helloMu.Unlock()
	if b.hello != "" {
		return b.hello, nil
	}
	dir := filepath.Join(b.work, "hello")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	src := filepath.Join(dir, "hello.c")
	if err := os.WriteFile(src, []byte("#include <stdio.h>\nint main(void) { puts(\"hello\"); return 0; }\n"), 0o644); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "hello")
	cmd := exec.CommandContext(b.ctx, "gcc", "-static", "-Os", "-s", "-o", out, src)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("compile static /hello with gcc (apt-get install gcc libc6-dev): %w\n%s", err, msg)
	}
	b.hello = out
	return out, nil
}

// assemble writes w's config and manifest and tags the image, once all of its
// layers are in the cache.
func (b *build) assemble(w *workload.Workload) (*ImageRecord, error) {
	steps := b.forest.Images[w.Name]
	for _, s := range steps {
		if err, ok := b.failed[s.Key]; ok {
			return nil, fmt.Errorf("layer %d (%s): %w", s.Depth+1, s.Describe(), err)
		}
		if b.records[s.Key] == nil {
			return nil, fmt.Errorf("layer %d (%s) was not built", s.Depth+1, s.Describe())
		}
	}
	return b.c.writeImage(w, steps, b.records, b.forest)
}

func (c *Corpus) writeImage(w *workload.Workload, steps []Step, records map[string]*LayerRecord, forest *Forest) (*ImageRecord, error) {
	now := time.Now().UTC().Truncate(time.Second)
	rec := &ImageRecord{
		Name: w.Name, Category: string(w.Category), Base: string(w.Base), ImageHash: w.ImageHash(),
		Source: c.opts.Source, Recipe: RecipeVersion, Cmd: w.Cmd, User: w.User, Built: now,
	}
	cfg := v1.ConfigFile{
		Architecture: "amd64", OS: "linux",
		Config: v1.Config{
			Cmd: w.Cmd, User: w.User, WorkingDir: "/", Env: []string{"PATH=" + imagePath},
			Labels: map[string]string{
				"org.slacker.hellobench.workload": w.Name,
				"org.slacker.hellobench.category": string(w.Category),
				"org.slacker.hellobench.ready":    w.Ready.String(),
				"org.slacker.hellobench.hash":     w.ImageHash(),
			},
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	switch r := w.Ready.(type) {
	case *workload.TCP:
		cfg.Config.ExposedPorts = map[string]struct{}{fmt.Sprintf("%d/tcp", r.Port): {}}
	case *workload.HTTP:
		cfg.Config.ExposedPorts = map[string]struct{}{fmt.Sprintf("%d/tcp", r.Port): {}}
	}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1}
	// The image is as old as its newest package layer, so rebuilding only its
	// (reproducible) app layer gives the very same config and manifest.
	created := appTime
	for _, s := range steps {
		lr := records[s.Key]
		rec.Notes = append(rec.Notes, lr.Notes...)
		rec.Problems = append(rec.Problems, lr.Problems...)
		if lr.Empty {
			continue
		}
		d, err := v1.NewHash(lr.Digest)
		if err != nil {
			return nil, err
		}
		diff, err := v1.NewHash(lr.DiffID)
		if err != nil {
			return nil, err
		}
		if !c.Layout.HasBlob(lr.Digest, lr.Size) {
			return nil, fmt.Errorf("layer %s blob %s is missing from the layout", s.ShortKey(), lr.Digest)
		}
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: types.OCILayer, Size: lr.Size, Digest: d})
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, diff)
		built := lr.Built
		if s.Kind == StepApp {
			built = appTime
		} else if built.After(created) {
			created = built
		}
		cfg.History = append(cfg.History, v1.History{Created: v1.Time{Time: built}, CreatedBy: lr.CreatedBy,
			Comment: "slacker hellobench layer " + s.ShortKey()})
		var shared []string
		if forest != nil {
			for _, u := range forest.Nodes[s.Key].Users {
				if u != w.Name {
					shared = append(shared, u)
				}
			}
		}
		rec.Layers = append(rec.Layers, ImageLayer{Key: s.Key, Kind: s.Kind, CreatedBy: lr.CreatedBy,
			Digest: lr.Digest, DiffID: lr.DiffID, Size: lr.Size, USize: lr.USize,
			Added: lr.Added, Removed: lr.Removed, SharedWith: shared})
		rec.Size += lr.Size
		rec.USize += lr.USize
	}
	if len(m.Layers) == 0 {
		return nil, errors.New("image has no layers (empty scratch image)")
	}
	cfg.Created = v1.Time{Time: created.UTC().Truncate(time.Second)}
	cdesc, err := c.Layout.WriteJSONBlob(cfg, types.OCIConfigJSON)
	if err != nil {
		return nil, err
	}
	m.Config = cdesc
	mdesc, err := c.Layout.WriteJSONBlob(m, types.OCIManifestSchema1)
	if err != nil {
		return nil, err
	}
	rec.Config, rec.Manifest = cdesc.Digest.String(), mdesc.Digest.String()
	if err := c.Layout.Tag(w.Name, mdesc); err != nil {
		return nil, err
	}
	if err := writeJSON(c.path("records", w.Name+".json"), rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// HumanBytes renders n in binary units.
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for x := n / unit; x >= unit; x /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
