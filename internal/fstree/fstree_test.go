package fstree_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/internal/fstree"
	"github.com/slacker-dev/slacker/internal/testutil"
	"golang.org/x/sys/unix"
)

var (
	t1 = time.Date(2020, 1, 2, 3, 4, 5, 600, time.UTC)
	t2 = time.Date(2021, 1, 2, 3, 4, 5, 0, time.UTC)
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// makeTree builds the same tree at root every time it is called.
func makeTree(t *testing.T, root string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Join(root, "etc/sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "etc/sub/deep"), []byte("deep"), 0o600))
	must(t, os.WriteFile(filepath.Join(root, "su"), []byte("ELF"), 0o755))
	must(t, unix.Chmod(filepath.Join(root, "su"), 0o4755))
	must(t, os.WriteFile(filepath.Join(root, "a"), []byte("shared"), 0o644))
	must(t, os.Link(filepath.Join(root, "a"), filepath.Join(root, "b")))
	must(t, os.Symlink("/etc/passwd", filepath.Join(root, "abs")))
	must(t, os.Symlink("etc", filepath.Join(root, "rel")))
	must(t, unix.Mkfifo(filepath.Join(root, "fifo"), 0o600))
	must(t, unix.Mknod(filepath.Join(root, "full"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 7))))
	must(t, os.Chmod(filepath.Join(root, "full"), 0o666))
	must(t, os.WriteFile(filepath.Join(root, "owned"), []byte("o"), 0o640))
	must(t, os.Lchown(filepath.Join(root, "owned"), 1000, 1001))
	must(t, unix.Setxattr(filepath.Join(root, "owned"), "user.k", []byte("v"), 0))
	must(t, unix.Setxattr(filepath.Join(root, "owned"), "trusted.k", []byte("v"), 0))
	for _, p := range []string{"etc/passwd", "etc/sub/deep", "su", "a", "owned", "fifo", "full"} {
		must(t, os.Chtimes(filepath.Join(root, p), t1, t1))
	}
	ts := []unix.Timespec{unix.NsecToTimespec(t1.UnixNano()), unix.NsecToTimespec(t1.UnixNano())}
	for _, p := range []string{"abs", "rel", "etc/sub", "etc", "."} {
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(root, p), ts, unix.AT_SYMLINK_NOFOLLOW))
	}
}

func twoTrees(t *testing.T) (a, b string) {
	t.Helper()
	dir := t.TempDir()
	a, b = filepath.Join(dir, "a"), filepath.Join(dir, "b")
	must(t, os.Mkdir(a, 0o755))
	must(t, os.Mkdir(b, 0o755))
	makeTree(t, a)
	makeTree(t, b)
	return a, b
}

func TestCompare(t *testing.T) {
	testutil.RequireRoot(t)
	tests := []struct {
		name   string
		change func(t *testing.T, b string)
		opts   fstree.Options
		want   []string // Difference.String() of every difference
	}{
		{
			name: "equal trees",
			opts: fstree.Options{Mtimes: true, DirMtimes: true},
		},
		{
			name: "missing and extra entries",
			change: func(t *testing.T, b string) {
				must(t, os.Remove(filepath.Join(b, "su")))
				must(t, os.Mkdir(filepath.Join(b, "new"), 0o755))
			},
			want: []string{
				"new: presence differs: a=(missing) b=dir",
				`su: presence differs: a=file(3 bytes) b=(missing)`,
			},
		},
		{
			name: "type",
			change: func(t *testing.T, b string) {
				must(t, os.Remove(filepath.Join(b, "rel")))
				must(t, os.Mkdir(filepath.Join(b, "rel"), 0o755))
			},
			want: []string{`rel: type differs: a=symlink("etc") b=dir`},
		},
		{
			name:   "special mode bits",
			change: func(t *testing.T, b string) { must(t, os.Chmod(filepath.Join(b, "su"), 0o755)) },
			want:   []string{"su: mode differs: a=04755 b=0755"},
		},
		{
			name:   "owner",
			change: func(t *testing.T, b string) { must(t, os.Lchown(filepath.Join(b, "abs"), 5, 6)) },
			want:   []string{"abs: uid differs: a=0 b=5", "abs: gid differs: a=0 b=6"},
		},
		{
			name: "content of the same size",
			change: func(t *testing.T, b string) {
				must(t, os.WriteFile(filepath.Join(b, "etc/sub/deep"), []byte("DEEP"), 0o600))
			},
			want: []string{"etc/sub/deep: digest differs: a=" + sha("deep") + " b=" + sha("DEEP")},
		},
		{
			name: "size",
			change: func(t *testing.T, b string) {
				must(t, os.WriteFile(filepath.Join(b, "etc/passwd"), []byte("x"), 0o644))
			},
			want: []string{"etc/passwd: size differs: a=11 b=1"},
		},
		{
			name: "symlink target",
			change: func(t *testing.T, b string) {
				must(t, os.Remove(filepath.Join(b, "abs")))
				must(t, os.Symlink("/etc/shadow", filepath.Join(b, "abs")))
			},
			want: []string{`abs: target differs: a="/etc/passwd" b="/etc/shadow"`},
		},
		{
			name: "device number",
			change: func(t *testing.T, b string) {
				must(t, os.Remove(filepath.Join(b, "full")))
				must(t, unix.Mknod(filepath.Join(b, "full"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))))
				must(t, os.Chmod(filepath.Join(b, "full"), 0o666))
			},
			want: []string{"full: rdev differs: a=1:7 b=1:5"},
		},
		{
			name: "xattrs: a changed value, a missing one, an uncompared namespace",
			change: func(t *testing.T, b string) {
				must(t, unix.Setxattr(filepath.Join(b, "owned"), "user.k", []byte("w"), 0))
				must(t, unix.Setxattr(filepath.Join(b, "su"), "user.new", []byte("1"), 0))
				must(t, unix.Setxattr(filepath.Join(b, "owned"), "trusted.k", []byte("changed"), 0))
			},
			want: []string{`owned: xattr user.k differs: a="v" b="w"`, `su: xattr user.new differs: a=(missing) b="1"`},
		},
		{
			name: "xattrs: namespaces asked for",
			change: func(t *testing.T, b string) {
				must(t, unix.Setxattr(filepath.Join(b, "owned"), "trusted.k", []byte("changed"), 0))
				must(t, unix.Setxattr(filepath.Join(b, "owned"), "user.k", []byte("w"), 0))
			},
			opts: fstree.Options{Xattrs: []string{"trusted.k"}},
			want: []string{`owned: xattr trusted.k differs: a="v" b="changed"`},
		},
		{
			name: "hardlink groups",
			change: func(t *testing.T, b string) {
				must(t, os.Remove(filepath.Join(b, "b")))
				must(t, os.WriteFile(filepath.Join(b, "b"), []byte("shared"), 0o644))
				must(t, os.Chtimes(filepath.Join(b, "b"), t1, t1))
				must(t, os.Link(filepath.Join(b, "su"), filepath.Join(b, "etc/su2")))
			},
			want: []string{
				"a: hardlinks differs: a=[b] b=[]",
				"b: hardlinks differs: a=[a] b=[]",
				"etc/su2: presence differs: a=(missing) b=file(3 bytes)",
				"su: hardlinks differs: a=[] b=[etc/su2]",
			},
		},
		{
			name:   "mtimes are compared only when asked",
			change: func(t *testing.T, b string) { must(t, os.Chtimes(filepath.Join(b, "etc/passwd"), t2, t2)) },
		},
		{
			name:   "mtimes of files",
			change: func(t *testing.T, b string) { must(t, os.Chtimes(filepath.Join(b, "etc/passwd"), t2, t2)) },
			opts:   fstree.Options{Mtimes: true},
			want:   []string{"etc/passwd: mtime differs: a=2020-01-02T03:04:05.0000006Z b=2021-01-02T03:04:05Z"},
		},
		{
			name:   "mtimes of directories",
			change: func(t *testing.T, b string) { must(t, os.Chtimes(filepath.Join(b, "etc/sub"), t2, t2)) },
			opts:   fstree.Options{Mtimes: true, DirMtimes: true, LabelA: "mine", LabelB: "umoci"},
			want:   []string{"etc/sub: mtime differs: mine=2020-01-02T03:04:05.0000006Z umoci=2021-01-02T03:04:05Z"},
		},
		{
			name: "ignored paths and the root",
			change: func(t *testing.T, b string) {
				must(t, os.Chmod(b, 0o700))
				must(t, os.RemoveAll(filepath.Join(b, "etc")))
				must(t, os.Mkdir(filepath.Join(b, "lost+found"), 0o700))
			},
			opts: fstree.Options{IgnoreRoot: true, Ignore: []string{"etc", "lost+found/"}},
		},
		{
			name:   "the root's own metadata",
			change: func(t *testing.T, b string) { must(t, os.Chmod(b, 0o700)) },
			want:   []string{".: mode differs: a=0755 b=0700"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := twoTrees(t)
			if tc.change != nil {
				tc.change(t, b)
			}
			diffs, err := fstree.Compare(context.Background(), a, b, tc.opts)
			must(t, err)
			var got []string
			for _, d := range diffs {
				got = append(got, d.String())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("differences:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("difference %d:\n got %s\nwant %s", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestWalkIsSafe checks that Walk records but never follows symlinks, never opens
// fifos or devices, and records what it should of each.
func TestWalkIsSafe(t *testing.T) {
	testutil.RequireRoot(t)
	root := t.TempDir()
	makeTree(t, root)
	// A symlink to a directory outside: Walk must not descend into it.
	must(t, os.Symlink("/proc", filepath.Join(root, "proc")))
	// A block device: opening it for reading would read a disk.
	must(t, unix.Mknod(filepath.Join(root, "blk"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 200))))
	done := make(chan struct{})
	var tree *fstree.Tree
	var err error
	go func() {
		defer close(done)
		tree, err = fstree.Walk(context.Background(), root, fstree.Options{})
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Walk blocked (did it open the fifo?)")
	}
	must(t, err)
	want := []string{".", "a", "abs", "b", "blk", "etc", "etc/passwd", "etc/sub", "etc/sub/deep", "fifo", "full", "owned", "proc", "rel", "su"}
	if got := tree.Paths(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("paths = %v, want %v", got, want)
	}
	e := tree.Entries
	if e["full"].Digest != "" || e["full"].Rdev != unix.Mkdev(1, 7) || e["fifo"].Digest != "" || e["blk"].Digest != "" {
		t.Errorf("devices or fifo were read: full=%+v fifo=%+v blk=%+v", e["full"], e["fifo"], e["blk"])
	}
	if e["proc"].Target != "/proc" || e["abs"].Target != "/etc/passwd" || e["abs"].Digest != "" {
		t.Errorf("symlinks: proc=%+v abs=%+v", e["proc"], e["abs"])
	}
	if e["etc/passwd"].Digest != sha("root:x:0:0\n") || e["etc/passwd"].Size != 11 {
		t.Errorf("etc/passwd digest %q", e["etc/passwd"].Digest)
	}
	if e["owned"].UID != 1000 || e["owned"].GID != 1001 || string(e["owned"].Xattrs["user.k"]) != "v" || e["owned"].Xattrs["trusted.k"] != nil {
		t.Errorf("owned = %+v", e["owned"])
	}
	if strings.Join(e["a"].Links, ",") != "b" || strings.Join(e["b"].Links, ",") != "a" || len(e["su"].Links) != 0 {
		t.Errorf("links: a=%v b=%v su=%v", e["a"].Links, e["b"].Links, e["su"].Links)
	}
	if !e["etc/passwd"].Mtime.Equal(t1) {
		t.Errorf("mtime %v, want %v", e["etc/passwd"].Mtime, t1)
	}
}

func TestWalkCanceled(t *testing.T) {
	root := t.TempDir()
	must(t, os.WriteFile(filepath.Join(root, "f"), nil, 0o644))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := fstree.Walk(ctx, root, fstree.Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}
