package analysis

import (
	"archive/tar"
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/bench/eval"
	"github.com/slacker-dev/slacker/bench/eval/startup"
	"github.com/slacker-dev/slacker/internal/api"
)

// tarOf builds an uncompressed layer tar.
func tarOf(t *testing.T, entries map[string]string, dirs ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, d := range dirs {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755})
	}
	for name, content := range entries {
		if strings.HasPrefix(content, "->") {
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: content[2:]})
			continue
		}
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(content))})
		tw.Write([]byte(content))
	}
	tw.Close()
	return b.Bytes()
}

func TestLayerAndDedup(t *testing.T) {
	blockA := strings.Repeat("a", BlockSize)
	blockB := strings.Repeat("b", BlockSize)
	l1, err := ReadTar(bytes.NewReader(tarOf(t, map[string]string{
		"etc/x":     blockA + blockB,          // 2 blocks
		"etc/y":     blockA + blockB,          // same file: file dedup
		"etc/z":     blockB + blockA + "tail", // same blocks, another file, a 4-byte tail
		"etc/.wh.q": "",                       // whiteout: not counted
		"etc/link":  "->x",
	}, "etc")))
	if err != nil {
		t.Fatal(err)
	}
	if l1.Files != 4 || l1.Dirs != 1 || l1.FileBytes != 6*BlockSize+4 {
		t.Fatalf("layer counts: %+v", l1)
	}
	if len(l1.files) != 2 || len(l1.blocks) != 3 || l1.TarBytes == 0 {
		t.Fatalf("distinct files %d (want 2: x=y and z), blocks %d (want a, b and the tail)", len(l1.files), len(l1.blocks))
	}
	d := NewDedup()
	d.Add(l1)
	if d.Raw != 6*BlockSize+4 || d.FileBytes() != 4*BlockSize+4 || d.BlockBytes() != 2*BlockSize+4 {
		t.Fatalf("dedup raw %d files %d blocks %d", d.Raw, d.FileBytes(), d.BlockBytes())
	}
	// A second layer with one known and one new block.
	l2, err := ReadTar(bytes.NewReader(tarOf(t, map[string]string{"w": blockA + strings.Repeat("c", BlockSize)})))
	if err != nil {
		t.Fatal(err)
	}
	d.Add(l2)
	if d.Raw != 8*BlockSize+4 || d.BlockBytes() != 3*BlockSize+4 || d.FileBytes() != 6*BlockSize+4 {
		t.Fatalf("after a second layer: raw %d files %d blocks %d", d.Raw, d.FileBytes(), d.BlockBytes())
	}
}

func TestRuns(t *testing.T) {
	a := Runs{{10, 20}, {0, 5}, {5, 7}, {30, 30}, {15, 25}}.Normalize()
	if len(a) != 2 || a[0] != [2]int64{0, 7} || a[1] != [2]int64{10, 25} || a.Blocks() != 22 {
		t.Fatalf("normalize: %v", a)
	}
	b := Runs{{3, 12}, {20, 40}}.Normalize()
	if got := a.Intersect(b); got != 4+2+5 {
		t.Fatalf("intersect = %d, want 11", got)
	}
	if a.Intersect(nil) != 0 || (Runs{}).Intersect(b) != 0 {
		t.Fatal("intersect with empty")
	}
}

func TestShares(t *testing.T) {
	im := Image{FileBytes: 100, DepthBytes: []int64{0, 70, 30}}
	if im.TopShare() != 0 || im.BottomShare() != 0.3 || im.LargestShare() != 0.7 {
		t.Fatalf("shares %v %v %v", im.TopShare(), im.BottomShare(), im.LargestShare())
	}
	if !math.IsNaN((Image{}).TopShare()) {
		t.Fatal("empty image share")
	}
}

func TestSection(t *testing.T) {
	r := &Results{Meta: eval.NewMeta("analysis"), Corpus: Corpus{RawBytes: 300, UniqueFileBytes: 150, UniqueBlockBytes: 100, GzBytes: 50, TarBytes: 200, DistinctLayerBytes: 200}}
	r.Images = []Image{
		{Name: "debian", Category: "distro", Layers: 1, GzBytes: 50, TarBytes: 120, FileBytes: 100, UniqueFileBytes: 90, UniqueBlockBytes: 80,
			DepthFiles: []int{10}, DepthDirs: []int{2}, DepthBytes: []int64{100},
			Starts: []Start{{ReadBytes: 6, HitBytes: 5, MissBytes: 1, ReadBytes2: 6}, {ReadBytes: 8, HitBytes: 6, MissBytes: 2, ReadBytes2: 8}}},
		{Name: "redis", Category: "database", Layers: 2, GzBytes: 60, TarBytes: 140, FileBytes: 200, UniqueFileBytes: 150, UniqueBlockBytes: 140,
			DepthFiles: []int{1, 10}, DepthDirs: []int{1, 2}, DepthBytes: []int64{10, 190},
			Starts: []Start{{Error: "timeout"}}},
	}
	sec := r.Section()
	if len(sec.Figures) != 6 {
		t.Fatalf("%d figures", len(sec.Figures))
	}
	cat := sec.Tables[0]
	if cat.Rows[0][0] != "distro" || cat.Rows[0][4] != "7B" || cat.Rows[0][7] != "17.1x" {
		t.Fatalf("category row %v", cat.Rows[0])
	}
	if cat.Rows[1][4] != "-" {
		t.Fatalf("a workload without a successful start shows no read: %v", cat.Rows[1])
	}
	var repeat string
	for _, h := range sec.Headlines {
		if strings.HasPrefix(h.Name, "second-run") {
			repeat = h.Value
		}
	}
	if repeat != "78.6%" { // (5.5) / (5.5 + 1.5)
		t.Fatalf("repeat headline %q", repeat)
	}
	for _, f := range sec.Figures {
		if !strings.HasPrefix(f.SVG, "<svg") {
			t.Fatalf("figure %s", f.File)
		}
	}
}

func TestStartOf(t *testing.T) {
	var p startup.Pair
	p.First = startup.Result{Seconds: 1.5, HasStats: true, Stats: api.VolumeStats{BaseReadRuns: [][2]int64{{0, 10}, {20, 30}}, BaseReadBytes: 90000, FetchedBytes: 1 << 20, WrittenBytes: 4096}}
	p.Second = startup.Result{Seconds: 0.5, HasStats: true, Stats: api.VolumeStats{BaseReadRuns: [][2]int64{{5, 25}}, WrittenBytes: 8192, BaseReadRunsTruncated: true}}
	st := StartOf(p)
	if st.ReadBytes != 20*BlockSize || st.RawReadBytes != 90000 || st.FetchedBytes != 1<<20 || st.WrittenBytes != 4096 {
		t.Fatalf("first: %+v", st)
	}
	if st.ReadBytes2 != 20*BlockSize || st.HitBytes != 10*BlockSize || st.MissBytes != 10*BlockSize || st.WrittenBytes2 != 8192 || !st.Truncated {
		t.Fatalf("second: %+v", st)
	}
	if st.Seconds != 1.5 || st.Seconds2 != 0.5 {
		t.Fatalf("times: %+v", st)
	}
	if z := StartOf(startup.Pair{}); z.ReadBytes != 0 || z.HitBytes != 0 {
		t.Fatalf("no stats: %+v", z)
	}
}
