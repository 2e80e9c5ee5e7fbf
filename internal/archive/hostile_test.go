package archive_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/fstree"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// sandbox is a root with things already in it and a sibling directory outside it that
// no layer may touch.
type sandbox struct {
	parent, root, outside string
	before                *fstree.Tree
}

func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	parent, root := newRoot(t)
	s := &sandbox{parent: parent, root: root, outside: filepath.Join(parent, "outside")}
	must(t, os.MkdirAll(filepath.Join(s.outside, "dir"), 0o755))
	must(t, os.WriteFile(filepath.Join(s.outside, "sentinel"), []byte("precious"), 0o644))
	must(t, os.WriteFile(filepath.Join(s.outside, "dir", "inner"), []byte("inner"), 0o600))
	must(t, os.WriteFile(filepath.Join(parent, "top"), []byte("top"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "pre"), []byte("before"), 0o644))
	must(t, os.Mkdir(filepath.Join(root, "predir"), 0o755))
	s.before = s.outsideTree(t)
	return s
}

// outsideTree walks the parent without root, recording everything, times included.
func (s *sandbox) outsideTree(t *testing.T) *fstree.Tree {
	t.Helper()
	tr, err := fstree.Walk(context.Background(), s.parent, fstree.Options{Ignore: []string{"root"}, Xattrs: []string{"user.", "trusted.", "security."}})
	must(t, err)
	return tr
}

// fstreeDiff compares the outside of the sandbox with what it was at the start.
func fstreeDiff(s *sandbox, after *fstree.Tree) []fstree.Difference {
	return fstree.Diff(s.before, after, fstree.Options{Mtimes: true, DirMtimes: true, LabelA: "before", LabelB: "after"})
}

// check asserts nothing outside root changed and what root held before is still there.
func (s *sandbox) check(t *testing.T) {
	t.Helper()
	for _, d := range fstreeDiff(s, s.outsideTree(t)) {
		t.Errorf("outside root changed: %s", d)
	}
	if b, err := os.ReadFile(filepath.Join(s.root, "pre")); err != nil || string(b) != "before" {
		t.Errorf("file already in root: %q, %v", b, err)
	}
	if fi, err := os.Lstat(filepath.Join(s.root, "predir")); err != nil || !fi.IsDir() {
		t.Errorf("directory already in root: %v", err)
	}
}

func TestHostileLayers(t *testing.T) {
	testutil.RequireRoot(t)
	bigXattr := strings.Repeat("x", 3<<19)
	tests := []struct {
		name     string
		setup    func(t *testing.T, s *sandbox)
		layer    func(t *testing.T, s *sandbox) []byte // uncompressed unless decompress is set
		opts     archive.Options
		wantErr  error  // errors.Is target
		wantName string // EntryError.Name
	}{
		{
			name:     "dotdot name",
			layer:    entries(file("../outside/sentinel", "pwned")),
			wantErr:  archive.ErrUnsafe,
			wantName: "../outside/sentinel",
		},
		{
			name:     "name climbing through a directory",
			layer:    entries(dir("a"), file("a/../../outside/sentinel", "pwned")),
			wantErr:  archive.ErrUnsafe,
			wantName: "a/../../outside/sentinel",
		},
		{
			name:     "absolute name",
			layer:    entries(file("/etc/passwd", "root::0:0")),
			wantErr:  archive.ErrUnsafe,
			wantName: "/etc/passwd",
		},
		{
			name: "absolute name of the sentinel",
			layer: func(t *testing.T, s *sandbox) []byte {
				return layer(t, file(filepath.Join(s.outside, "sentinel"), "pwned"))
			},
			wantErr: archive.ErrUnsafe,
		},
		{
			name:     "absolute root directory",
			layer:    entries(dir("/")),
			wantErr:  archive.ErrUnsafe,
			wantName: "/",
		},
		{
			name:     "symlink named dot",
			layer:    entries(symlink(".", "/")),
			wantErr:  archive.ErrUnsafe,
			wantName: ".",
		},
		{
			name:     "symlink named slash",
			layer:    entries(symlink("/", "../outside")),
			wantErr:  archive.ErrUnsafe,
			wantName: "/",
		},
		{
			name: "regular file naming the root",
			layer: func(t *testing.T, _ *sandbox) []byte {
				return append(rawEntry("./", tar.TypeReg, []byte("x"), ""), endOfArchive...)
			},
			wantErr:  archive.ErrUnsafe,
			wantName: "./",
		},
		{
			name:     "symlink climbing out, then a file written through it",
			layer:    entries(symlink("esc", "../outside"), file("esc/sentinel", "pwned")),
			wantErr:  archive.ErrUnsafe,
			wantName: "esc",
		},
		{
			name:     "deep symlink climbing out",
			layer:    entries(symlink("a/b/esc", "../../../outside/sentinel")),
			wantErr:  archive.ErrUnsafe,
			wantName: "a/b/esc",
		},
		{
			name:     "hardlink climbing out",
			layer:    entries(hardlink("h", "../outside/sentinel")),
			wantErr:  archive.ErrUnsafe,
			wantName: "h",
		},
		{
			name: "hardlink with an absolute target",
			layer: func(t *testing.T, s *sandbox) []byte {
				return layer(t, hardlink("h", filepath.Join(s.outside, "sentinel")))
			},
			wantErr:  archive.ErrUnsafe,
			wantName: "h",
		},
		{
			name: "hardlink through a symlink to the outside",
			setup: func(t *testing.T, s *sandbox) {
				must(t, os.Symlink(s.outside, filepath.Join(s.root, "abs")))
			},
			layer:    entries(hardlink("h", "abs/sentinel")),
			wantErr:  archive.ErrUnsafe,
			wantName: "h",
		},
		{
			name:     "hardlink to a missing target",
			layer:    entries(hardlink("h", "nothere")),
			wantErr:  archive.ErrUnsafe,
			wantName: "h",
		},
		{
			name:     "hardlink to a directory",
			layer:    entries(dir("d"), hardlink("h", "d")),
			wantErr:  archive.ErrUnsafe,
			wantName: "h",
		},
		{
			name:     "hardlink to the root",
			layer:    entries(hardlink("h", "./")),
			wantErr:  archive.ErrUnsafe,
			wantName: "h",
		},
		{
			name:     "char device not allowed",
			layer:    entries(chardev("dev/mem", 1, 1)),
			wantErr:  archive.ErrUnsafe,
			wantName: "dev/mem",
		},
		{
			name:     "block device not allowed",
			layer:    entries(ent{name: "sda", typ: tar.TypeBlock, mode: 0o600, major: 8}),
			wantErr:  archive.ErrUnsafe,
			wantName: "sda",
		},
		{
			name:     "whiteout of dot",
			layer:    entries(whiteout(".wh..")),
			wantErr:  archive.ErrUnsafe,
			wantName: ".wh..",
		},
		{
			name:     "whiteout of dotdot",
			layer:    entries(whiteout("predir/.wh...")),
			wantErr:  archive.ErrUnsafe,
			wantName: "predir/.wh...",
		},
		{
			name:     "uid out of range",
			layer:    entries(file("f", "x").withOwner(1<<33, 0)),
			wantErr:  archive.ErrUnsafe,
			wantName: "f",
		},
		{
			name:     "unknown entry type",
			layer:    entries(ent{name: "v", typ: 'V'}),
			wantErr:  archive.ErrUnsafe,
			wantName: "v",
		},
		{
			name: "PAX header over 1 MiB",
			layer: func(t *testing.T, _ *sandbox) []byte {
				rec := "SCHILY.xattr.user.big=" + bigXattr + "\n"
				rec = strconv.Itoa(len(rec)+8) + " " + rec // the length counts itself (8 digits)
				out := layer(t, file("before", "b"))
				out = out[:len(out)-1024]
				out = append(out, rawEntry("PaxHeaders/big", tar.TypeXHeader, []byte(rec), "")...)
				out = append(out, rawEntry("big", tar.TypeReg, []byte("x"), "")...)
				return append(out, endOfArchive...)
			},
			wantErr:  archive.ErrLimit,
			wantName: "before",
		},
		{
			name:     "file over the entry size limit",
			layer:    entries(file("ok", "1234"), file("big", strings.Repeat("x", 2048))),
			opts:     archive.Options{MaxEntrySize: 1024},
			wantErr:  archive.ErrLimit,
			wantName: "big",
		},
		{
			name:     "too many entries",
			layer:    entries(file("a", ""), file("b", ""), file("c", "")),
			opts:     archive.Options{MaxEntries: 2},
			wantErr:  archive.ErrLimit,
			wantName: "c",
		},
		{
			name:     "gzip bomb: 1 GiB of zeros",
			layer:    compressed("gzip", bombEntries(1, 1<<30)),
			opts:     archive.Options{MaxBytes: 64 << 20},
			wantErr:  archive.ErrLimit,
			wantName: "bomb0",
		},
		{
			name:     "zstd bomb: 1 GiB of zeros",
			layer:    compressed("zstd", bombEntries(1, 1<<30)),
			opts:     archive.Options{MaxBytes: 64 << 20},
			wantErr:  archive.ErrLimit,
			wantName: "bomb0",
		},
		{
			name:     "gzip bomb: many 4 MiB files",
			layer:    compressed("gzip", bombEntries(256, 4<<20)),
			opts:     archive.Options{MaxBytes: 32 << 20},
			wantErr:  archive.ErrLimit,
			wantName: "bomb8",
		},
		{
			name:     "zstd bomb: many 4 MiB files",
			layer:    compressed("zstd", bombEntries(256, 4<<20)),
			opts:     archive.Options{MaxBytes: 32 << 20},
			wantErr:  archive.ErrLimit,
			wantName: "bomb8",
		},
		{
			name: "truncated archive",
			layer: func(t *testing.T, s *sandbox) []byte {
				b := layer(t, file("whole", "w"), file("cut", strings.Repeat("c", 10000)))
				return b[:len(b)-1024-4000]
			},
			wantErr:  io.ErrUnexpectedEOF,
			wantName: "cut",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSandbox(t)
			if tc.setup != nil {
				tc.setup(t, s)
			}
			rc, err := archive.Decompress(bytes.NewReader(tc.layer(t, s)))
			must(t, err)
			defer rc.Close()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err = archive.Apply(context.Background(), s.root, rc, tc.opts)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			var ee *archive.EntryError
			if !errors.As(err, &ee) {
				t.Fatalf("err = %v, not an *EntryError", err)
			}
			if tc.wantName != "" && ee.Name != tc.wantName {
				t.Errorf("error names %q, want %q: %v", ee.Name, tc.wantName, err)
			}
			if tc.wantErr == io.ErrUnexpectedEOF && errors.Is(err, archive.ErrUnsafe) {
				t.Errorf("truncation reported as unsafe input: %v", err)
			}
			// The decoders' windows and Apply's copy buffer, never the layer's size.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 48<<20 {
				t.Errorf("Apply allocated %d MiB", alloc>>20)
			}
			t.Logf("error: %v", err)
			s.check(t)
		})
	}
}

// TestContainedLayers applies layers that are allowed but aim at the outside through
// symlinks: everything must land inside root.
func TestContainedLayers(t *testing.T) {
	testutil.RequireRoot(t)
	tests := []struct {
		name  string
		setup func(t *testing.T, s *sandbox)
		layer func(t *testing.T, s *sandbox) []byte
		// inside lists root-relative paths (with {outside} for the sandbox's outside
		// path) that must exist afterwards.
		inside []string
	}{
		{
			name: "write through an absolute symlink to the outside",
			setup: func(t *testing.T, s *sandbox) {
				must(t, os.Symlink(s.outside, filepath.Join(s.root, "abs")))
			},
			layer: entries(file("abs/sentinel", "pwned"), file("abs/dir/inner", "pwned"), whiteout("abs/.wh.sentinel"),
				whiteout("abs/dir/.wh..wh..opq"), dir("abs/newdir"), symlink("abs/l", "x"), fifo("abs/p")),
			inside: []string{"{outside}/sentinel", "{outside}/dir/inner", "{outside}/newdir", "{outside}/l", "{outside}/p"},
		},
		{
			name: "write through a relative symlink that climbs",
			setup: func(t *testing.T, s *sandbox) {
				must(t, os.Symlink("../outside", filepath.Join(s.root, "rel")))
				must(t, os.Symlink("../../../../../../../..", filepath.Join(s.root, "deep")))
			},
			layer:  entries(file("rel/sentinel", "pwned"), file("deep/top", "pwned"), whiteout("deep/.wh.top"), whiteout("rel/.wh.dir")),
			inside: []string{"outside/sentinel", "top"},
		},
		{
			name: "a layer's own absolute symlink, then files through it",
			layer: func(t *testing.T, s *sandbox) []byte {
				return layer(t, symlink("lnk", s.outside), file("lnk/sentinel", "pwned"), hardlink("lnk/h", "pre"),
					symlink("up", "/.."), file("up/top", "pwned"), whiteout("lnk/.wh.dir"))
			},
			inside: []string{"{outside}/sentinel", "{outside}/h", "top"},
		},
		{
			name: "a directory replaced by a symlink, then written through",
			layer: func(t *testing.T, s *sandbox) []byte {
				return layer(t, dir("x"), file("x/a", "1"), symlink("x", s.outside), file("x/sentinel", "pwned"),
					dir("x/dir"), file("x/dir/inner", "pwned"))
			},
			inside: []string{"{outside}/sentinel", "{outside}/dir/inner"},
		},
		{
			name: "the root's parent reached by dotdot in a symlink chain",
			setup: func(t *testing.T, s *sandbox) {
				must(t, os.Symlink("b/..", filepath.Join(s.root, "a")))
				must(t, os.Symlink("/../..", filepath.Join(s.root, "b")))
			},
			layer:  entries(file("a/outside/sentinel", "pwned"), file("b/top", "pwned")),
			inside: []string{"outside/sentinel", "top"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSandbox(t)
			if tc.setup != nil {
				tc.setup(t, s)
			}
			if _, err := archive.Apply(context.Background(), s.root, bytes.NewReader(tc.layer(t, s)), archive.Options{}); err != nil {
				t.Fatalf("apply: %v", err)
			}
			for _, p := range tc.inside {
				p = strings.ReplaceAll(p, "{outside}", strings.TrimPrefix(s.outside, "/"))
				if _, err := os.Lstat(filepath.Join(s.root, p)); err != nil {
					t.Errorf("want %s inside root: %v", p, err)
				}
			}
			s.check(t)
		})
	}
}

func entries(es ...ent) func(*testing.T, *sandbox) []byte {
	return func(t *testing.T, _ *sandbox) []byte { return layer(t, es...) }
}

// bombEntries describes n files named bombI of size zero bytes each (size a multiple
// of 1 MiB).
type bombSpec struct {
	n    int
	size int64
}

func bombEntries(n int, size int64) bombSpec { return bombSpec{n, size} }

// compressed builds a compressed tar of a bomb without ever holding it uncompressed:
// gzip members and zstd frames concatenate, so one compressed MiB of zeros is repeated.
func compressed(kind string, b bombSpec) func(*testing.T, *sandbox) []byte {
	return func(t *testing.T, _ *sandbox) []byte { return bomb(t, kind, b) }
}

func bomb(t testing.TB, kind string, b bombSpec) []byte {
	t.Helper()
	zeroMiB := compress(t, kind, make([]byte, 1<<20))
	var out bytes.Buffer
	for i := range b.n {
		var hb bytes.Buffer
		tw := tar.NewWriter(&hb)
		must(t, tw.WriteHeader(&tar.Header{Name: "bomb" + strconv.Itoa(i), Typeflag: tar.TypeReg, Mode: 0o644, Size: b.size,
			ModTime: testTime, Format: tar.FormatGNU}))
		out.Write(compress(t, kind, hb.Bytes()))
		for range b.size >> 20 {
			out.Write(zeroMiB)
		}
	}
	out.Write(compress(t, kind, make([]byte, 1024)))
	return out.Bytes()
}

func compress(t testing.TB, kind string, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	switch kind {
	case "gzip":
		zw := gzip.NewWriter(&buf)
		_, err := zw.Write(data)
		must(t, err)
		must(t, zw.Close())
	case "zstd":
		zw, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1))
		must(t, err)
		_, err = zw.Write(data)
		must(t, err)
		must(t, zw.Close())
	case "none":
		buf.Write(data)
	default:
		t.Fatalf("unknown compression %s", kind)
	}
	return buf.Bytes()
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
