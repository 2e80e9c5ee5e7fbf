package archive_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/slacker-dev/slacker/internal/archive"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// BenchmarkApply applies a layer of 2,000 small files in 40 directories plus one
// 32 MiB file of random bytes (the mix of a typical distro layer, scaled down).
func BenchmarkApply(b *testing.B) {
	testutil.RequireRoot(b)
	rng := rand.New(rand.NewPCG(1, 2))
	big := make([]byte, 32<<20)
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	var es []ent
	for d := range 40 {
		dn := "usr/share/d" + strconv.Itoa(d)
		es = append(es, dir(dn))
		for f := range 50 {
			es = append(es, file(dn+"/f"+strconv.Itoa(f), string(big[f*1000:f*1000+2000])))
		}
	}
	es = append(es, file("usr/lib/big.so", string(big)))
	tarball := layer(b, es...)
	b.SetBytes(int64(len(tarball)))
	parent := b.TempDir()
	i := 0
	for b.Loop() {
		root := filepath.Join(parent, strconv.Itoa(i))
		i++
		if err := os.Mkdir(root, 0o755); err != nil {
			b.Fatal(err)
		}
		if _, err := archive.Apply(context.Background(), root, bytes.NewReader(tarball), archive.Options{}); err != nil {
			b.Fatal(err)
		}
		// Trees are removed only at the end: ext4 creates files slowly right after
		// mass deletions, which would measure the filesystem rather than Apply.
	}
}
