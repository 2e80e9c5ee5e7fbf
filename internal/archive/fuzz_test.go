package archive_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// fuzzSeeds are layers that aim at the outside through every route Apply knows of;
// the fuzzer mutates them.
func fuzzSeeds(t testing.TB) [][]byte {
	seeds := [][]ent{
		{dir("etc"), file("etc/passwd", "root"), symlink("lib", "/usr/lib"), file("lib/x", "x"), hardlink("h", "etc/passwd")},
		{file("abs/sentinel", "pwned"), whiteout("abs/.wh.sentinel"), whiteout("abs/dir/.wh..wh..opq"), hardlink("h", "abs/sentinel")},
		{file("rel/sentinel", "pwned"), whiteout("rel/.wh.dir"), dir("rel/dir"), file("up/top", "pwned"), whiteout("up/.wh.top")},
		{symlink("esc", "../outside"), file("esc/sentinel", "pwned")},
		{symlink("x", "/../outside"), file("x/sentinel", "pwned"), symlink("y", "x/../../outside"), fifo("y/p")},
		{file("../outside/sentinel", "pwned"), file("/outside/sentinel", "pwned")},
		{dir("o"), file("o/a", "a"), whiteout("o/.wh..wh..opq"), whiteout(".wh.o"), whiteout(".wh..wh..opq")},
		{dir("d"), file("d/f", "1"), symlink("d", "/"), file("d/f", "2"), hardlink("d/g", "d/f"), chardev("d/null", 1, 3)},
		{dir("./").withMode(0o700), file("f", "x").withXattr("user.a", "b").withMode(0o4755), dir("f")},
	}
	var out [][]byte
	for _, s := range seeds {
		out = append(out, layer(t, s...))
	}
	out = append(out, compress(t, "gzip", out[1]), compress(t, "zstd", out[2]))
	return out
}

// FuzzApply applies arbitrary bytes as a layer to a root that already holds symlinks
// to the outside, and requires that nothing outside root was created or changed.
func FuzzApply(f *testing.F) {
	testutil.RequireRoot(f)
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := newSandbox(t)
		must(t, os.Symlink(s.outside, filepath.Join(s.root, "abs")))
		must(t, os.Symlink("../outside", filepath.Join(s.root, "rel")))
		must(t, os.Symlink("../../../../..", filepath.Join(s.root, "up")))
		fds := openFds(t)
		rc, err := archive.Decompress(bytes.NewReader(data))
		if err == nil {
			// Errors are expected; what matters is where the writes went.
			_, _ = archive.Apply(context.Background(), s.root, rc, archive.Options{
				MaxBytes: 8 << 20, MaxEntries: 512, AllowDevices: len(data)%2 == 0,
			})
			rc.Close()
		}
		if n := openFds(t); n != fds {
			t.Errorf("open fds: %d before, %d after", fds, n)
		}
		after := s.outsideTree(t)
		for _, d := range fstreeDiff(s, after) {
			t.Errorf("outside root changed: %s", d)
		}
	})
}

func openFds(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	must(t, err)
	return len(es)
}
