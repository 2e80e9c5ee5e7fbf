package node

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/fstree"
	"github.com/slacker-dev/slacker/internal/mount"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// The knobs of TestRandomFileOps, for reproducing a failure or running longer.
const (
	randomSeedEnv = "SLACKER_RANDOMFS_SEED" // the seed (default: from the clock)
	randomOpsEnv  = "SLACKER_RANDOMFS_OPS"  // operations per round (default 200)
)

const (
	randomRounds    = 2         // rounds of operations, each followed by a commit
	randomCheckFreq = 25        // the tree is checked against the model after this many operations
	randomMaxFile   = 6 << 20   // no operation makes a file larger
	randomMaxWrite  = 300 << 10 // the longest write
)

// TestRandomFileOps runs random file operations on a container root of each mode
// (writes at odd offsets and sizes across block boundaries, writes past the end,
// truncates, hole punches, zero ranges, mmap writes, fsyncs, new files, deletes and
// renames) and applies each to an in-memory model too; the root is checked against
// the model every randomCheckFreq operations. Each round of operations ends with a
// commit of the root, and a new root of the commit in each mode, read-only, must
// read as the model (the block one must also pass e2fsck). The seed is logged; set
// SLACKER_RANDOMFS_SEED to replay a run (both modes run the same operations).
func TestRandomFileOps(t *testing.T) {
	requirePrivileged(t)
	testutil.RequireOverlay(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(randomSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", randomSeedEnv, s, err)
		}
	}
	ops := 200
	if s := os.Getenv(randomOpsEnv); s != "" {
		var err error
		if ops, err = strconv.Atoi(s); err != nil || ops < 0 {
			t.Fatalf("%s=%q: want a number of operations", randomOpsEnv, s)
		}
	}
	t.Logf("seed %d (replay with %s=%d), %d rounds of %d operations", seed, randomSeedEnv, seed, randomRounds, ops)
	for _, mode := range []RootMode{RootShared, RootBlock} {
		t.Run(string(mode), func(t *testing.T) { randomFileOps(t, mode, seed, ops) })
	}
}

func randomFileOps(t *testing.T, mode RootMode, seed uint64, ops int) {
	ctx := context.Background()
	n, _ := newNode(t)
	m := &fsModel{t: t, rng: rand.New(rand.NewPCG(seed, 0x5eed)), files: map[string][]byte{}}
	img := m.image(n)

	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "c", Snapshot: img, Mode: mode, Startup: true}); err != nil {
		t.Fatal(err)
	}
	c, err := n.MountVolume(ctx, "c", false)
	if err != nil {
		t.Fatal(err)
	}
	if (c.Mode == RootShared) != (mode == RootShared) { // a block volume's is empty
		t.Fatalf("root mode %q, want a %s root", c.Mode, mode)
	}
	m.root = c.Mountpoint
	m.check(c.Mountpoint, "the new root")
	for round := 1; round <= randomRounds; round++ {
		for i := 1; i <= ops; i++ {
			m.step()
			if i%randomCheckFreq == 0 || i == ops {
				m.check(c.Mountpoint, fmt.Sprintf("the root after %d operations", len(m.log)))
			}
		}
		res, err := n.SnapshotVolume(ctx, "c", SnapshotOptions{})
		if err != nil {
			t.Fatalf("round %d: commit: %v", round, err)
		}
		m.check(c.Mountpoint, fmt.Sprintf("the root after its commit %d", round))
		for _, cm := range []RootMode{RootShared, RootBlock} {
			id := fmt.Sprintf("check-%d-%s", round, cm)
			if _, err := n.CreateVolume(ctx, CreateOptions{ID: id, Snapshot: res.ID, Mode: cm, Startup: true}); err != nil {
				t.Fatal(err)
			}
			v, err := n.MountVolume(ctx, id, true)
			if err != nil {
				t.Fatal(err)
			}
			m.check(v.Mountpoint, fmt.Sprintf("a %s root of the %s root's commit %d", cm, mode, round))
			// Beyond what the model knows: modes, owners, times, directories.
			diffs, err := fstree.Compare(ctx, c.Mountpoint, v.Mountpoint, fstree.Options{Mtimes: true, IgnoreRoot: true,
				Ignore: []string{"lost+found"}, LabelA: "root", LabelB: "commit"})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range diffs {
				t.Errorf("a %s root of the %s root's commit %d: %v", cm, mode, round, d)
			}
			if cm == RootBlock {
				if err := n.UnmountVolume(ctx, id); err != nil {
					t.Fatal(err)
				}
				if out, err := mount.Fsck(ctx, v.File); err != nil {
					t.Fatalf("commit %d of the %s root: %v\n%s", round, mode, err, out)
				}
			}
			if err := n.DeleteVolume(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := n.DeleteVolume(ctx, "c"); err != nil {
		t.Fatal(err)
	}
}

// fsModel is what the files of a root should hold: each regular file's path (slash
// separated, under the root) and content, its size included. It drives the random
// operations and logs each one.
type fsModel struct {
	t          *testing.T
	rng        *rand.Rand
	root       string // the mounted root the operations apply to
	files      map[string][]byte
	imageFiles []string // the image's files: half the operations pick one of these
	log        []string
	made       int // files created so far, for their names
}

// image makes the image snapshot the roots are made from (a 1 GiB filesystem:
// room for long runs), with files the model holds: two larger than 1 MiB, two
// sparse ones (one with holes at both ends) and small ones of sizes around a
// block, and an empty directory.
func (m *fsModel) image(n *Node) digest.Digest {
	t := m.t
	t.Helper()
	ctx := context.Background()
	blank, err := n.MakeFilesystem(ctx, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateVolume(ctx, CreateOptions{ID: "build", Snapshot: blank.ID}); err != nil {
		t.Fatal(err)
	}
	v, err := n.MountVolume(ctx, "build", false)
	if err != nil {
		t.Fatal(err)
	}
	type island struct{ off, n int }
	layout := map[string]struct {
		size    int
		islands []island // the data of a sparse file; nil: all data
	}{
		"big":          {size: 3<<20 + 1234},
		"data/medium":  {size: 1<<20 + 500_000},
		"sparse":       {size: 5 << 20, islands: []island{{0, 5000}, {1<<20 + 100, 70_000}, {3 << 20, 4096}, {5<<20 - 1, 1}}},
		"data/sparse2": {size: 2<<20 + 3, islands: []island{{1<<20 - 10, 20}}},
		"etc/motd":     {size: 8},
		"data/empty":   {size: 0},
		"data/one":     {size: 1},
		"data/small":   {size: 4095},
		"data/page":    {size: 4096},
		"data/page1":   {size: 4097},
		"dir/sub/x":    {size: 12_345},
	}
	for _, name := range slices.Sorted(maps.Keys(layout)) {
		l := layout[name]
		b := make([]byte, l.size)
		if l.islands == nil {
			m.fill(b)
		}
		p := filepath.Join(v.Mountpoint, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(int64(l.size)); err != nil {
			t.Fatal(err)
		}
		for _, is := range l.islands {
			m.fill(b[is.off : is.off+is.n])
		}
		if l.islands == nil {
			_, err = f.WriteAt(b, 0)
		}
		for _, is := range l.islands {
			if err == nil {
				_, err = f.WriteAt(b[is.off:is.off+is.n], int64(is.off))
			}
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		m.files[name] = b
		m.imageFiles = append(m.imageFiles, name)
	}
	if err := os.Mkdir(filepath.Join(v.Mountpoint, "empty-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := n.UnmountVolume(ctx, "build"); err != nil {
		t.Fatal(err)
	}
	res, err := n.SnapshotVolume(ctx, "build", SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.DeleteVolume(ctx, "build"); err != nil {
		t.Fatal(err)
	}
	return res.ID
}

// fill fills b with bytes of the model's generator.
func (m *fsModel) fill(b []byte) {
	for i := 0; i < len(b); i += 8 {
		v := m.rng.Uint64()
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}

// data returns n bytes to write: mostly random, sometimes zeros (blocks that a
// commit of a shared root punches out where the image had data) or one repeated
// byte.
func (m *fsModel) data(n int) ([]byte, string) {
	b := make([]byte, n)
	switch r := m.rng.IntN(10); {
	case r == 0:
		return b, "zeros"
	case r == 1:
		c := byte(m.rng.IntN(255) + 1)
		for i := range b {
			b[i] = c
		}
		return b, fmt.Sprintf("0x%02x", c)
	}
	m.fill(b)
	return b, "random"
}

// offset returns an offset in [0, size]: near a 4 KiB boundary, anywhere, or in
// the first two blocks.
func (m *fsModel) offset(size int) int {
	var off int
	switch r := m.rng.IntN(10); {
	case r < 4:
		off = m.rng.IntN(size/4096+1)*4096 + m.rng.IntN(7) - 3
	case r < 8:
		off = m.rng.IntN(size + 1)
	default:
		off = m.rng.IntN(8192)
	}
	return max(0, min(off, size))
}

// length returns the length of an operation: 1 to 16 bytes, a few blocks give or
// take a few bytes, or anything up to 300 KiB.
func (m *fsModel) length() int {
	switch r := m.rng.IntN(4); r {
	case 0:
		return 1 + m.rng.IntN(16)
	case 1:
		return max(1, (1+m.rng.IntN(4))*4096+m.rng.IntN(5)-2)
	}
	return 1 + m.rng.IntN(randomMaxWrite)
}

// names returns the model's files, sorted, so that choices depend on the seed only.
func (m *fsModel) names() []string { return slices.Sorted(maps.Keys(m.files)) }

// pick returns a file of the model to change: half the time one of the image's,
// if any is left, for a root treats those apart (a shared root copies them up, a
// commit rewrites them in place).
func (m *fsModel) pick() string {
	if m.rng.IntN(2) == 0 {
		var left []string
		for _, name := range m.imageFiles {
			if _, ok := m.files[name]; ok {
				left = append(left, name)
			}
		}
		if len(left) > 0 {
			return left[m.rng.IntN(len(left))]
		}
	}
	return m.pickAny()
}

// pickAny returns any file of the model.
func (m *fsModel) pickAny() string {
	names := m.names()
	return names[m.rng.IntN(len(names))]
}

func (m *fsModel) logf(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf("#%d ", len(m.log)+1)+fmt.Sprintf(format, args...))
}

// must fails the test if the last logged operation failed.
func (m *fsModel) must(err error) {
	if err != nil {
		m.t.Helper()
		m.t.Fatalf("%s: %v", m.log[len(m.log)-1], err)
	}
}

// step runs one random operation on the root and the model.
func (m *fsModel) step() {
	m.t.Helper()
	if len(m.files) < 3 {
		m.create()
		return
	}
	switch r := m.rng.IntN(100); {
	case r < 30:
		name := m.pick()
		m.write(name, m.offset(len(m.files[name])), "write")
	case r < 38:
		name := m.pick()
		size := len(m.files[name])
		var gap int
		switch m.rng.IntN(3) {
		case 1:
			gap = 1 + m.rng.IntN(4096)
		case 2:
			gap = 1 + m.rng.IntN(2<<20)
		}
		m.write(name, size+gap, "extend")
	case r < 46:
		m.truncate(m.pick())
	case r < 54:
		m.fallocate(m.pick(), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE)
	case r < 58:
		m.fallocate(m.pick(), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE)
	case r < 62:
		m.fallocate(m.pick(), unix.FALLOC_FL_ZERO_RANGE)
	case r < 72:
		m.mmapWrite(m.pick())
	case r < 77:
		m.fsync(m.pick())
	case r < 86:
		m.create()
	case r < 90:
		if len(m.files) > 4 {
			m.remove(m.pickAny())
		}
	case r < 99:
		m.rename(m.pickAny())
	default:
		m.replaceDir()
	}
}

func (m *fsModel) path(name string) string { return filepath.Join(m.root, filepath.FromSlash(name)) }

// resize sets the model's size of name, zero-filling what it grows by.
func (m *fsModel) resize(name string, size int) {
	b := m.files[name]
	if size <= len(b) {
		m.files[name] = b[:size:size]
		return
	}
	m.files[name] = append(b, make([]byte, size-len(b))...)
}

// write writes 1 byte to 300 KiB to name at off (past its end: the gap reads as
// zeros), through pwrite.
func (m *fsModel) write(name string, off int, what string) {
	m.t.Helper()
	off = min(off, randomMaxFile-1)
	n := min(m.length(), randomMaxFile-off)
	b, kind := m.data(n)
	size := len(m.files[name])
	m.logf("%s %s off=%d len=%d (%s) size %d->%d", what, name, off, n, kind, size, max(size, off+n))
	f, err := os.OpenFile(m.path(name), os.O_WRONLY, 0)
	m.must(err)
	defer f.Close()
	_, err = f.WriteAt(b, int64(off))
	m.must(err)
	m.must(f.Close())
	if off+n > size {
		m.resize(name, off+n)
	}
	copy(m.files[name][off:], b)
}

// truncate shrinks or grows name.
func (m *fsModel) truncate(name string) {
	m.t.Helper()
	size := len(m.files[name])
	var to int
	switch m.rng.IntN(3) {
	case 0:
		to = m.offset(size) // near a block boundary, often
	case 1:
		to = m.rng.IntN(size + 1)
	default:
		to = min(size+1+m.rng.IntN(2<<20), randomMaxFile)
	}
	m.logf("truncate %s size %d->%d", name, size, to)
	m.must(os.Truncate(m.path(name), int64(to)))
	m.resize(name, to)
}

// fallocate punches a hole in name or zeroes a range of it (mode), from an offset
// in the file, sometimes in whole blocks; a zero range without KEEP_SIZE may grow
// the file.
func (m *fsModel) fallocate(name string, mode uint32) {
	m.t.Helper()
	size := len(m.files[name])
	off := m.offset(size)
	n := m.length()
	if m.rng.IntN(4) == 0 { // whole blocks
		off, n = off/4096*4096, (n+4095)/4096*4096
	}
	n = max(1, min(n, randomMaxFile-off))
	what := "punch"
	if mode&unix.FALLOC_FL_ZERO_RANGE != 0 {
		what = "zero-range"
	}
	newSize := size
	if mode&unix.FALLOC_FL_KEEP_SIZE != 0 {
		what += "-keep-size"
	} else {
		newSize = max(size, off+n)
	}
	m.logf("%s %s off=%d len=%d size %d->%d", what, name, off, n, size, newSize)
	f, err := os.OpenFile(m.path(name), os.O_RDWR, 0)
	m.must(err)
	defer f.Close()
	m.must(unix.Fallocate(int(f.Fd()), mode, int64(off), int64(n)))
	m.resize(name, newSize)
	clear(m.files[name][min(off, size):min(off+n, size)])
}

// mmapWrite writes inside name through a shared mapping, then msyncs (mostly) and
// unmaps it.
func (m *fsModel) mmapWrite(name string) {
	m.t.Helper()
	size := len(m.files[name])
	if size == 0 {
		m.write(name, 0, "write")
		return
	}
	off := min(m.offset(size), size-1)
	n := min(m.length(), size-off)
	b, kind := m.data(n)
	at := off / os.Getpagesize() * os.Getpagesize()
	sync := m.rng.IntN(4) != 0
	m.logf("mmap-write %s off=%d len=%d (%s) msync=%v size %d", name, off, n, kind, sync, size)
	f, err := os.OpenFile(m.path(name), os.O_RDWR, 0)
	m.must(err)
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), int64(at), off+n-at, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	m.must(err)
	copy(mem[off-at:], b)
	if sync {
		err = unix.Msync(mem, unix.MS_SYNC)
	}
	if merr := unix.Munmap(mem); err == nil {
		err = merr
	}
	m.must(err)
	copy(m.files[name][off:], b)
}

// fsync fsyncs or fdatasyncs name: the model does not change.
func (m *fsModel) fsync(name string) {
	m.t.Helper()
	data := m.rng.IntN(2) == 0
	m.logf("fsync %s datasync=%v", name, data)
	f, err := os.Open(m.path(name))
	m.must(err)
	defer f.Close()
	if data {
		err = unix.Fdatasync(int(f.Fd()))
	} else {
		err = f.Sync()
	}
	m.must(err)
}

// randomDirs are where new files go: directories of the image, and new ones.
var randomDirs = []string{"", "data", "dir/sub", "empty-dir", "new/deeper"}

// newName returns a name no file has had, in one of randomDirs.
func (m *fsModel) newName() string {
	m.made++
	return path.Join(randomDirs[m.rng.IntN(len(randomDirs))], fmt.Sprintf("n%d", m.made))
}

// create makes a new file: at a new name, or at the name of an image file that
// was removed or renamed away.
func (m *fsModel) create() {
	m.t.Helper()
	name := m.newName()
	if m.rng.IntN(2) == 0 {
		var gone []string
		for _, g := range m.imageFiles {
			if _, ok := m.files[g]; !ok {
				gone = append(gone, g)
			}
		}
		if len(gone) > 0 {
			name = gone[m.rng.IntN(len(gone))]
		}
	}
	size := 0
	if m.rng.IntN(5) != 0 {
		size = 1 + m.rng.IntN(200<<10)
	}
	b, kind := m.data(size)
	m.logf("create %s size %d (%s)", name, size, kind)
	m.must(os.MkdirAll(filepath.Dir(m.path(name)), 0o755))
	f, err := os.OpenFile(m.path(name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	m.must(err)
	if _, err = f.Write(b); err == nil {
		err = f.Close()
	} else {
		f.Close()
	}
	m.must(err)
	m.files[name] = b
}

// remove removes name.
func (m *fsModel) remove(name string) {
	m.t.Helper()
	m.logf("remove %s", name)
	m.must(os.Remove(m.path(name)))
	delete(m.files, name)
}

// rename renames name over another file or to a new name.
func (m *fsModel) rename(name string) {
	m.t.Helper()
	to := m.pickAny()
	if to == name || m.rng.IntN(2) == 0 {
		to = m.newName()
	}
	_, over := m.files[to]
	m.logf("rename %s -> %s (over a file: %v)", name, to, over)
	m.must(os.MkdirAll(filepath.Dir(m.path(to)), 0o755))
	m.must(os.Rename(m.path(name), m.path(to)))
	m.files[to] = m.files[name]
	delete(m.files, name)
}

// replaceDir removes a directory with everything in it and makes it again, empty
// (in a shared root, an opaque directory over the image's).
func (m *fsModel) replaceDir() {
	m.t.Helper()
	dir := randomDirs[1+m.rng.IntN(len(randomDirs)-1)]
	var gone []string
	for _, name := range m.names() {
		if strings.HasPrefix(name, dir+"/") {
			gone = append(gone, name)
		}
	}
	m.logf("replace-dir %s (removes %d files: %s)", dir, len(gone), strings.Join(gone, " "))
	m.must(os.RemoveAll(m.path(dir)))
	m.must(os.MkdirAll(m.path(dir), 0o755))
	for _, name := range gone {
		delete(m.files, name)
	}
}

// check reads every regular file under root and fails the test if the set of
// files or any content differs from the model, with the operations that led there.
func (m *fsModel) check(root, what string) {
	t := m.t
	t.Helper()
	seen := map[string]bool{}
	var problems []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if rel == "lost+found" {
			return filepath.SkipDir
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			problems = append(problems, fmt.Sprintf("%s: a %v where the model has no such thing", rel, d.Type()))
			return nil
		}
		want, ok := m.files[rel]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: a file the model does not have", rel))
			return nil
		}
		seen[rel] = true
		got, err := os.ReadFile(p)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", rel, err))
			return nil
		}
		if bytes.Equal(got, want) {
			return nil
		}
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		j := i
		for j < min(len(got), len(want)) && got[j] != want[j] {
			j++
		}
		problems = append(problems, fmt.Sprintf("%s: %d bytes, want %d; first difference at %d (block %d, +%d), "+
			"the first run of differing bytes is %d long\n\tlast operations on it:\n\t\t%s",
			rel, len(got), len(want), i, i/4096, i%4096, j-i, strings.Join(m.opsOn(rel, 8), "\n\t\t")))
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for _, name := range m.names() {
		if !seen[name] {
			problems = append(problems, fmt.Sprintf("%s: missing", name))
		}
	}
	if len(problems) > 0 {
		tail := m.log[max(0, len(m.log)-20):]
		t.Fatalf("%s differs from the model:\n%s\nlast operations:\n\t%s", what, strings.Join(problems, "\n"),
			strings.Join(tail, "\n\t"))
	}
}

// opsOn returns the last k logged operations that mention the file name.
func (m *fsModel) opsOn(name string, k int) []string {
	var out []string
	for i := len(m.log) - 1; i >= 0 && len(out) < k; i-- {
		if strings.Contains(m.log[i]+" ", " "+name+" ") {
			out = append(out, m.log[i])
		}
	}
	slices.Reverse(out)
	return out
}
