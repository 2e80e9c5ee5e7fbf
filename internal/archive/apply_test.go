package archive_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/testutil"
	"golang.org/x/sys/unix"
)

// capNetBindService is a VFS_CAP_REVISION_2 security.capability value granting
// CAP_NET_BIND_SERVICE (effective).
const capNetBindService = "\x01\x00\x00\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"

// newRoot returns an empty 0755 root inside a fresh parent directory.
func newRoot(t *testing.T) (parent, root string) {
	t.Helper()
	parent = t.TempDir()
	root = filepath.Join(parent, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return parent, root
}

const rootLine = "dir 0755 0:0"

func TestApply(t *testing.T) {
	testutil.RequireRoot(t)
	tests := []struct {
		name  string
		setup func(t *testing.T, root string) // state no layer could make
		lower [][]ent
		layer []ent
		opts  archive.Options
		want  map[string]string // every path of the result, "." included
		stats func(t *testing.T, st archive.Stats)
	}{
		{
			name: "files, dirs, modes, owners, implicit parents",
			layer: []ent{
				dir("etc"),
				file("etc/passwd", "root:x:0:0"),
				file("usr/bin/su", "ELF").withMode(0o4755),
				file("bin/ping", "ping").withMode(0o4711).withOwner(1000, 1000),
				file("bin/wall", "wall").withMode(0o2755).withOwner(0, 5),
				dir("tmp").withMode(0o1777),
				dir("srv").withMode(0o2775).withOwner(1000, 1000),
				file("srv/data", "d").withMode(0o640).withOwner(1000, 1001),
				file("empty", ""),
			},
			want: map[string]string{
				".":          rootLine,
				"etc":        "dir 0755 0:0",
				"etc/passwd": `file 0644 0:0 "root:x:0:0"`,
				"usr":        "dir 0755 0:0",
				"usr/bin":    "dir 0755 0:0",
				"usr/bin/su": `file 4755 0:0 "ELF"`,
				"bin":        "dir 0755 0:0",
				"bin/ping":   `file 4711 1000:1000 "ping"`,
				"bin/wall":   `file 2755 0:5 "wall"`,
				"tmp":        "dir 1777 0:0",
				"srv":        "dir 2775 1000:1000",
				"srv/data":   `file 0640 1000:1001 "d"`,
				"empty":      `file 0644 0:0 ""`,
			},
			stats: func(t *testing.T, st archive.Stats) {
				want := archive.Stats{Entries: 9, Files: 6, Dirs: 3, Bytes: 22}
				if st != want {
					t.Errorf("stats = %+v, want %+v", st, want)
				}
			},
		},
		{
			name: "an entry replaces what is at its path without following it",
			lower: [][]ent{{
				dir("a"), file("a/x", "1"), file("b", "old"), dir("real"), file("real/k", "k"),
				symlink("c", "/real/k"), dir("d"), file("d/y", "2"), symlink("e", "real"), symlink("g", "real"),
				file("f", "1"),
			}},
			layer: []ent{
				file("a", "now a file"),
				dir("b"),
				file("c", "not through"),
				dir("d").withMode(0o700).withOwner(7, 8),
				file("e/z", "through a parent symlink"),
				dir("g").withMode(0o750),
				file("f", "first"), file("f", "second"),
			},
			want: map[string]string{
				".":      rootLine,
				"a":      `file 0644 0:0 "now a file"`,
				"b":      "dir 0755 0:0",
				"c":      `file 0644 0:0 "not through"`,
				"d":      "dir 0700 7:8",
				"d/y":    `file 0644 0:0 "2"`,
				"e":      "symlink real 0:0",
				"f":      `file 0644 0:0 "second"`,
				"g":      "dir 0750 0:0",
				"real":   "dir 0755 0:0",
				"real/k": `file 0644 0:0 "k"`,
				"real/z": `file 0644 0:0 "through a parent symlink"`,
			},
		},
		{
			name:  "whiteouts remove lower files and subtrees, missing is fine",
			lower: [][]ent{{file("f", "1"), dir("d"), dir("d/sub"), file("d/sub/x", "x"), file("keep", "k"), file("d2/y", "y")}},
			layer: []ent{
				whiteout(".wh.f"), whiteout(".wh.d"), whiteout(".wh.nothere"),
				whiteout("missingdir/.wh.x"), whiteout("d2/.wh.y"), whiteout("d2/.wh..wh.plnk"),
			},
			want: map[string]string{
				".":    rootLine,
				"keep": `file 0644 0:0 "k"`,
				"d2":   "dir 0755 0:0",
			},
			stats: func(t *testing.T, st archive.Stats) {
				if st.Whiteouts != 5 || st.Files != 0 || st.Entries != 6 {
					t.Errorf("stats = %+v, want 5 whiteouts, 0 files, 6 entries", st)
				}
			},
		},
		{
			name:  "a whiteout never removes what its own layer created",
			lower: [][]ent{{file("x", "lower"), dir("d"), file("d/old", "o")}},
			layer: []ent{file("x", "mine"), whiteout(".wh.x"), file("d/new", "n"), whiteout(".wh.d")},
			want: map[string]string{
				".":     rootLine,
				"x":     `file 0644 0:0 "mine"`,
				"d":     "dir 0755 0:0",
				"d/old": `file 0644 0:0 "o"`,
				"d/new": `file 0644 0:0 "n"`,
			},
		},
		{
			name:  "opaque marker before the layer's children",
			lower: [][]ent{{dir("o"), file("o/old", "1"), dir("o/sub"), file("o/sub/old", "2"), symlink("o/l", "x"), file("other", "3")}},
			layer: []ent{
				dir("o").withMode(0o711), whiteout("o/.wh..wh..opq"),
				file("o/new", "n"), dir("o/sub"), file("o/sub/new", "m"),
			},
			want: map[string]string{
				".":         rootLine,
				"o":         "dir 0711 0:0",
				"o/new":     `file 0644 0:0 "n"`,
				"o/sub":     "dir 0755 0:0",
				"o/sub/new": `file 0644 0:0 "m"`,
				"other":     `file 0644 0:0 "3"`,
			},
			stats: func(t *testing.T, st archive.Stats) {
				if st.Opaques != 1 {
					t.Errorf("stats = %+v, want 1 opaque", st)
				}
			},
		},
		{
			name:  "opaque marker after the layer's children",
			lower: [][]ent{{dir("o"), file("o/old", "1"), dir("o/sub"), file("o/sub/old", "2"), symlink("o/l", "x"), file("other", "3")}},
			layer: []ent{
				dir("o").withMode(0o711), file("o/new", "n"), dir("o/sub"), file("o/sub/new", "m"),
				whiteout("o/.wh..wh..opq"),
			},
			want: map[string]string{
				".":         rootLine,
				"o":         "dir 0711 0:0",
				"o/new":     `file 0644 0:0 "n"`,
				"o/sub":     "dir 0755 0:0",
				"o/sub/new": `file 0644 0:0 "m"`,
				"other":     `file 0644 0:0 "3"`,
			},
		},
		{
			name:  "opaque root and opaque of a missing directory",
			lower: [][]ent{{file("a", "1"), dir("b")}},
			layer: []ent{file("c", "3"), whiteout(".wh..wh..opq"), whiteout("nothere/.wh..wh..opq")},
			want: map[string]string{
				".": rootLine,
				"c": `file 0644 0:0 "3"`,
			},
		},
		{
			name: "symlinks: relative, absolute, dangling, inside root",
			layer: []ent{
				symlink("rel", "target/file"), symlink("abs", "/usr/lib"), symlink("dangling", "nowhere"),
				dir("a"), symlink("a/up", "../rel").withOwner(3, 4), symlink("self", "."),
				symlink("a/b/deep", "../../a"),
			},
			want: map[string]string{
				".":        rootLine,
				"rel":      "symlink target/file 0:0",
				"abs":      "symlink /usr/lib 0:0",
				"dangling": "symlink nowhere 0:0",
				"a":        "dir 0755 0:0",
				"a/up":     "symlink ../rel 3:4",
				"a/b":      "dir 0755 0:0",
				"a/b/deep": "symlink ../../a 0:0",
				"self":     "symlink . 0:0",
			},
		},
		{
			name:  "hardlinks: same layer, lower layer, to a symlink, to itself",
			lower: [][]ent{{file("lower", "L"), file("f2", "two"), hardlink("f2link", "f2")}},
			layer: []ent{
				file("f", "content"), hardlink("h", "f"), hardlink("./dot/h2", "./f"),
				hardlink("hl", "lower"), symlink("s", "f"), hardlink("hs", "s"),
				hardlink("f2link", "f2"),
			},
			want: map[string]string{
				".":      rootLine,
				"f":      `file 0644 0:0 "content" links=dot/h2,h`,
				"h":      `file 0644 0:0 "content" links=dot/h2,f`,
				"dot":    "dir 0755 0:0",
				"dot/h2": `file 0644 0:0 "content" links=f,h`,
				"lower":  `file 0644 0:0 "L" links=hl`,
				"hl":     `file 0644 0:0 "L" links=lower`,
				"s":      "symlink f 0:0 links=hs",
				"hs":     "symlink f 0:0 links=s",
				"f2":     `file 0644 0:0 "two" links=f2link`,
				"f2link": `file 0644 0:0 "two" links=f2`,
			},
			stats: func(t *testing.T, st archive.Stats) {
				if st.Hardlinks != 5 {
					t.Errorf("stats = %+v, want 5 hardlinks", st)
				}
			},
		},
		{
			name: "parent components resolve inside root (chroot semantics)",
			setup: func(t *testing.T, root string) {
				must(t, os.MkdirAll(filepath.Join(root, "usr/lib"), 0o755))
				must(t, os.Symlink("/usr/lib", filepath.Join(root, "lib")))
				must(t, os.Symlink("../../..", filepath.Join(root, "up"))) // no layer may carry this
			},
			layer: []ent{file("lib/x", "via abs"), file("up/y", "via up"), hardlink("lib/h", "up/y"), whiteout("up/usr/.wh.nothing")},
			want: map[string]string{
				".":         rootLine,
				"usr":       "dir 0755 0:0",
				"usr/lib":   "dir 0755 0:0",
				"usr/lib/x": `file 0644 0:0 "via abs"`,
				"usr/lib/h": `file 0644 0:0 "via up" links=y`,
				"y":         `file 0644 0:0 "via up" links=usr/lib/h`,
				"lib":       "symlink /usr/lib 0:0",
				"up":        "symlink ../../.. 0:0",
			},
		},
		{
			name:  "dangling symlinks in parents are followed inside root and their directories created",
			lower: [][]ent{{symlink("a", "/b/c"), dir("x"), symlink("x/l", "../y/z"), symlink("up", "/../../q")}},
			layer: []ent{file("a/d/e", "via abs"), file("x/l/f", "via rel"), file("up/r", "clamped")},
			want: map[string]string{
				".":       rootLine,
				"a":       "symlink /b/c 0:0",
				"b":       "dir 0755 0:0",
				"b/c":     "dir 0755 0:0",
				"b/c/d":   "dir 0755 0:0",
				"b/c/d/e": `file 0644 0:0 "via abs"`,
				"x":       "dir 0755 0:0",
				"x/l":     "symlink ../y/z 0:0",
				"y":       "dir 0755 0:0",
				"y/z":     "dir 0755 0:0",
				"y/z/f":   `file 0644 0:0 "via rel"`,
				"up":      "symlink /../../q 0:0",
				"q":       "dir 0755 0:0",
				"q/r":     `file 0644 0:0 "clamped"`,
			},
		},
		{
			name:  "the root entry updates the root's metadata only",
			layer: []ent{dir("./").withMode(0o750).withOwner(0, 10), file("./a", "a")},
			want: map[string]string{
				".": "dir 0750 0:10",
				"a": `file 0644 0:0 "a"`,
			},
		},
		{
			name:  "fifos and devices",
			opts:  archive.Options{AllowDevices: true},
			layer: []ent{fifo("p").withMode(0o640).withOwner(1, 2), chardev("dev/null", 1, 3), {name: "dev/loop0", typ: tar.TypeBlock, mode: 0o660, major: 7}},
			want: map[string]string{
				".":         rootLine,
				"p":         "fifo 0640 1:2",
				"dev":       "dir 0755 0:0",
				"dev/null":  "char 1:3 0666",
				"dev/loop0": "mode 060660",
			},
			stats: func(t *testing.T, st archive.Stats) {
				if st.Fifos != 1 || st.Devices != 2 {
					t.Errorf("stats = %+v, want 1 fifo, 2 devices", st)
				}
			},
		},
		{
			name: "xattrs: capability survives chown, unsupported ones are skipped",
			layer: []ent{
				file("cap", "bin").withMode(0o4755).withOwner(1000, 1000).
					withXattr("security.capability", capNetBindService).withXattr("user.note", "hi"),
				dir("xd").withXattr("user.d", "1").withXattr("trusted.t", "2"),
				symlink("xl", "cap").withXattr("user.l", "no").withXattr("trusted.l", "yes"),
				file("bogus", "b").withXattr("bogus.ns", "x"),
				fifo("xf").withXattr("trusted.f", "3"),
			},
			want: map[string]string{
				".":     rootLine,
				"cap":   `file 4755 1000:1000 "bin" security.capability=` + strconv.Quote(capNetBindService) + ` user.note="hi"`,
				"xd":    `dir 0755 0:0 trusted.t="2" user.d="1"`,
				"xl":    `symlink cap 0:0 trusted.l="yes"`,
				"bogus": `file 0644 0:0 "b"`,
				"xf":    `fifo 0600 0:0 trusted.f="3"`,
			},
			stats: func(t *testing.T, st archive.Stats) {
				if st.Xattrs != 6 || st.XattrsSkipped != 2 {
					t.Errorf("stats = %+v, want 6 xattrs set, 2 skipped", st)
				}
			},
		},
		{
			name:  "a kept directory gets exactly the entry's xattrs",
			lower: [][]ent{{dir("k").withXattr("user.old", "1").withXattr("user.same", "s")}},
			layer: []ent{dir("k").withXattr("user.same", "s2")},
			want: map[string]string{
				".": rootLine,
				"k": `dir 0755 0:0 user.same="s2"`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, root := newRoot(t)
			if tc.setup != nil {
				tc.setup(t, root)
			}
			for _, l := range tc.lower {
				apply(t, root, layer(t, l...), archive.Options{AllowDevices: true})
			}
			st := apply(t, root, layer(t, tc.layer...), tc.opts)
			if d := diffSummary(summary(t, root), tc.want); len(d) > 0 {
				t.Errorf("tree differs:\n%s", strings.Join(d, "\n"))
			}
			if tc.stats != nil {
				tc.stats(t, st)
			}
		})
	}
}

// TestApplySymlinkLoop checks that a parent that is a symlink loop fails cleanly.
func TestApplySymlinkLoop(t *testing.T) {
	testutil.RequireRoot(t)
	_, root := newRoot(t)
	apply(t, root, layer(t, symlink("loop", "loop"), symlink("p1", "p2"), symlink("p2", "p1")), archive.Options{})
	for _, name := range []string{"loop/x", "p1/x"} {
		_, err := archive.Apply(context.Background(), root, bytes.NewReader(layer(t, file(name, "x"))), archive.Options{})
		var ee *archive.EntryError
		if !errors.As(err, &ee) || ee.Name != name || !errors.Is(err, unix.ELOOP) {
			t.Errorf("%s: err = %v, want ELOOP naming the entry", name, err)
		}
	}
}

// TestApplyTimes checks that every object gets its header's times, symlinks without
// following, and directories only after their children were added.
func TestApplyTimes(t *testing.T) {
	testutil.RequireRoot(t)
	_, root := newRoot(t)
	t1 := time.Date(2001, 1, 1, 1, 1, 1, 123456789, time.UTC)
	t2 := time.Date(2002, 2, 2, 2, 2, 2, 0, time.UTC)
	t3 := time.Date(2003, 3, 3, 3, 3, 3, 5, time.UTC)
	apply(t, root, layer(t,
		dir("./").withMtime(t3),
		dir("d").withMtime(t1),
		file("d/f", "x").withMtime(t2),
		symlink("d/l", "f").withMtime(t3),
		fifo("d/p").withMtime(t1),
		dir("d/sub").withMtime(t2),
		file("d/sub/g", "y").withMtime(t3),
		file("d/later", "z"), // added after d's entry: must not leave d's mtime at now
	), archive.Options{})
	for p, want := range map[string]time.Time{".": t3, "d": t1, "d/f": t2, "d/l": t3, "d/p": t1, "d/sub": t2, "d/sub/g": t3, "d/later": testTime} {
		var st unix.Stat_t
		must(t, unix.Lstat(filepath.Join(root, p), &st))
		if got := time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(); !got.Equal(want) {
			t.Errorf("%s: mtime %v, want %v", p, got, want)
		}
		if got := time.Unix(st.Atim.Sec, st.Atim.Nsec).UTC(); !got.Equal(want) {
			t.Errorf("%s: atime %v, want %v", p, got, want)
		}
	}
}

// TestApplySparse checks that a file's zero blocks become holes with the same
// content: long runs, and 4 KiB blocks of zeros between blocks of data.
func TestApplySparse(t *testing.T) {
	testutil.RequireRoot(t)
	_, root := newRoot(t)
	body := string(make([]byte, 5<<20)) + "tail" + string(make([]byte, 3<<20))
	dotted := make([]byte, 4<<20+100) // a byte every 64 KiB, and a short zero tail
	for i := 0; i < 4<<20; i += 64 << 10 {
		dotted[i+10] = 'x'
	}
	files := map[string]string{"sparse": body, "zeros": string(make([]byte, 2<<20)), "dotted": string(dotted)}
	// at most this much allocated (the file system may add an indirect block or two)
	most := map[string]int64{"sparse": 2 << 20, "zeros": 2 << 20, "dotted": 64*4096 + 64<<10}
	st := apply(t, root, layer(t, file("sparse", body), file("zeros", files["zeros"]), file("dotted", files["dotted"])), archive.Options{})
	if st.Bytes != int64(len(body)+2<<20+len(dotted)) {
		t.Errorf("stats bytes = %d", st.Bytes)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(root, name))
		must(t, err)
		if string(got) != want {
			t.Errorf("%s: content differs (len %d, want %d)", name, len(got), len(want))
		}
		var s unix.Stat_t
		must(t, unix.Stat(filepath.Join(root, name), &s))
		if s.Blocks*512 > most[name] {
			t.Errorf("%s: %d bytes allocated, want at most %d: holes", name, s.Blocks*512, most[name])
		}
	}
}

// cancelReader cancels a context once n bytes were read through it.
type cancelReader struct {
	r      io.Reader
	n      int
	cancel context.CancelFunc
}

func (c *cancelReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n -= n
	if c.n <= 0 {
		c.cancel()
	}
	return n, err
}

func TestApplyCancel(t *testing.T) {
	testutil.RequireRoot(t)
	big := strings.Repeat("x", 8<<20)
	tarball := layer(t, file("a", "a"), file("big", big), file("c", "c"))
	t.Run("before", func(t *testing.T) {
		_, root := newRoot(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := archive.Apply(ctx, root, bytes.NewReader(tarball), archive.Options{})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	})
	t.Run("during a copy", func(t *testing.T) {
		_, root := newRoot(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st, err := archive.Apply(ctx, root, &cancelReader{r: bytes.NewReader(tarball), n: 3 << 20, cancel: cancel}, archive.Options{})
		var ee *archive.EntryError
		if !errors.Is(err, context.Canceled) || !errors.As(err, &ee) || ee.Name != "big" {
			t.Fatalf("err = %v, want context.Canceled naming entry big", err)
		}
		if errors.Is(err, archive.ErrUnsafe) {
			t.Errorf("cancellation reported as unsafe input: %v", err)
		}
		if st.Files != 1 {
			t.Errorf("stats = %+v, want 1 file done", st)
		}
		if _, err := os.Lstat(filepath.Join(root, "c")); !os.IsNotExist(err) {
			t.Errorf("entry after the cancel was applied: %v", err)
		}
	})
}

func TestApplyTruncated(t *testing.T) {
	testutil.RequireRoot(t)
	tarball := layer(t, file("first", "1"), file("second", strings.Repeat("y", 4096)), file("third", "3"))
	tests := []struct {
		name     string
		cut      int
		wantName string
	}{
		{name: "inside a file's content", wantName: "second"},
		{name: "inside a header", wantName: "first"},
	}
	// Cut points come from the real layout rather than from guessed PAX header sizes.
	offs := entryOffsets(t, tarball)
	tests[0].cut = int(offs["second"]) + 100
	tests[1].cut = int(offs["second"]) - 200
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, root := newRoot(t)
			_, err := archive.Apply(context.Background(), root, bytes.NewReader(tarball[:tc.cut]), archive.Options{})
			var ee *archive.EntryError
			if !errors.Is(err, io.ErrUnexpectedEOF) || !errors.As(err, &ee) || ee.Name != tc.wantName {
				t.Fatalf("err = %v, want unexpected EOF naming %q", err, tc.wantName)
			}
			if !strings.Contains(err.Error(), "truncated") {
				t.Errorf("error does not say truncated: %v", err)
			}
		})
	}
}

// entryOffsets returns the offset of each entry's content in an uncompressed tar.
func entryOffsets(t *testing.T, b []byte) map[string]int64 {
	t.Helper()
	cr := &countReader{r: bytes.NewReader(b)}
	tr := tar.NewReader(cr)
	out := map[string]int64{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		must(t, err)
		out[h.Name] = cr.n
	}
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

// TestApplyLogsSkippedXattr checks that an xattr the filesystem refuses is logged with
// the entry's name and counted, and does not fail the layer.
func TestApplyLogsSkippedXattr(t *testing.T) {
	testutil.RequireRoot(t)
	_, root := newRoot(t)
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	st := apply(t, root, layer(t, file("bogus", "b").withXattr("bogus.ns", "x")), archive.Options{Logger: log})
	if st.XattrsSkipped != 1 {
		t.Errorf("stats = %+v, want 1 skipped xattr", st)
	}
	out := buf.String()
	if !strings.Contains(out, `"msg":"xattr-skipped"`) || !strings.Contains(out, `"entry":"bogus"`) || !strings.Contains(out, `"xattr":"bogus.ns"`) {
		t.Errorf("log does not report the skipped xattr with its entry:\n%s", out)
	}
	if !strings.Contains(out, `"msg":"layer-applied"`) {
		t.Errorf("no layer-applied summary:\n%s", out)
	}
}
