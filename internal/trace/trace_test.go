package trace

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/runs"
)

var snap = digest.FromString("snapshot")

func chunk(s string, size int64) blockmap.Chunk {
	return blockmap.Chunk{Digest: digest.FromString(s), Size: size}
}

func TestRoundTripKeepsFirstReadOrder(t *testing.T) {
	tr := New(snap, 30*time.Second, []blockmap.Chunk{chunk("c", 10), chunk("a", 20), chunk("c", 10), chunk("b", 30)})
	b, err := Encode(tr)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []blockmap.Chunk{chunk("c", 10), chunk("a", 20), chunk("b", 30)}
	cs := got.BlockmapChunks()
	if len(cs) != len(want) {
		t.Fatalf("chunks %v, want %v", cs, want)
	}
	for i := range want {
		if cs[i] != want[i] {
			t.Fatalf("chunk %d: %v, want %v", i, cs[i], want[i])
		}
	}
	if got.Snapshot != snap || got.Window != 30*time.Second || got.Bytes() != 60 {
		t.Fatalf("decoded %+v", got)
	}
}

func TestRunsRoundTrip(t *testing.T) {
	tr := New(snap, time.Second, []blockmap.Chunk{chunk("a", 4096)})
	tr.SetRuns([]runs.Run{{Start: 0, End: 3}, {Start: 10, End: 11}})
	b, err := Encode(tr)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != Version || len(got.Runs) != 2 || got.RunBlocks() != 4 || got.Runs[1] != [2]int64{10, 11} {
		t.Fatalf("decoded %+v", got)
	}
	// A version 1 trace (no runs) still reads.
	if _, err := Decode([]byte(`{"version":1,"snapshot":"` + snap.String() + `","chunks":[]}`)); err != nil {
		t.Fatal(err)
	}
}

func TestFilesRoundTrip(t *testing.T) {
	tr := New(snap, time.Second, []blockmap.Chunk{chunk("a", 4096)})
	tr.Files = []File{{Path: "/usr/lib/libc.so.6", Ranges: [][2]int64{{0, 8192}, {65536, 70000}}}, {Path: "/etc/hosts"}}
	b, err := Encode(tr)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 3 || len(got.Files) != 2 || got.Files[0].Path != "/usr/lib/libc.so.6" || got.Files[0].Ranges[1] != [2]int64{65536, 70000} ||
		got.Files[1].Ranges != nil {
		t.Fatalf("decoded %+v", got)
	}
	// Version 2 traces (no files) still read.
	if _, err := Decode([]byte(`{"version":2,"snapshot":"` + snap.String() + `","chunks":[],"runs":[[0,1]]}`)); err != nil {
		t.Fatal(err)
	}
}

func TestNewBoundsChunks(t *testing.T) {
	cs := make([]blockmap.Chunk, MaxChunks+5)
	for i := range cs {
		cs[i] = chunk(strings.Repeat("x", i+1), 1)
	}
	if n := len(New(snap, 0, cs).Chunks); n != MaxChunks {
		t.Fatalf("%d chunks, want %d", n, MaxChunks)
	}
}

func TestRefName(t *testing.T) {
	if got, want := RefName(snap), "traces/sha256-"+snap.Encoded(); got != want {
		t.Fatalf("%s, want %s", got, want)
	}
	if d, ok := SnapshotOf(RefName(snap)); !ok || d != snap {
		t.Fatalf("SnapshotOf(RefName) = %s %v", d, ok)
	}
	for _, bad := range []string{"leases/x", "traces/sha256", "traces/sha256-zz", "traces/md5-" + snap.Encoded()} {
		if _, ok := SnapshotOf(bad); ok {
			t.Errorf("SnapshotOf(%q) accepted", bad)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	d := digest.FromString("a").String()
	s := snap.String()
	for name, in := range map[string]string{
		"not json":        `{`,
		"future version":  `{"version":4,"snapshot":"` + s + `","chunks":[]}`,
		"files in v2":     `{"version":2,"snapshot":"` + s + `","chunks":[],"files":[{"path":"/a"}]}`,
		"relative path":   `{"version":3,"snapshot":"` + s + `","chunks":[],"files":[{"path":"a"}]}`,
		"dotdot path":     `{"version":3,"snapshot":"` + s + `","chunks":[],"files":[{"path":"/a/../../etc"}]}`,
		"root path":       `{"version":3,"snapshot":"` + s + `","chunks":[],"files":[{"path":"/"}]}`,
		"unclean path":    `{"version":3,"snapshot":"` + s + `","chunks":[],"files":[{"path":"/a//b"}]}`,
		"nul in path":     `{"version":3,"snapshot":"` + s + `","chunks":[],"files":[{"path":"/a\u0000b"}]}`,
		"file twice":      `{"version":3,"snapshot":"` + s + `","chunks":[],"files":[{"path":"/a"},{"path":"/a"}]}`,
		"ranges unsorted": `{"version":3,"snapshot":"` + s + `","chunks":[],"files":[{"path":"/a","ranges":[[5,6],[1,2]]}]}`,
		"empty range":     `{"version":3,"snapshot":"` + s + `","chunks":[],"files":[{"path":"/a","ranges":[[5,5]]}]}`,
		"negative range":  `{"version":3,"snapshot":"` + s + `","chunks":[],"files":[{"path":"/a","ranges":[[-4,5]]}]}`,
		"runs in v1":      `{"version":1,"snapshot":"` + s + `","chunks":[],"runs":[[0,1]]}`,
		"empty run":       `{"version":2,"snapshot":"` + s + `","chunks":[],"runs":[[5,5]]}`,
		"runs unsorted":   `{"version":2,"snapshot":"` + s + `","chunks":[],"runs":[[5,6],[1,2]]}`,
		"runs touching":   `{"version":2,"snapshot":"` + s + `","chunks":[],"runs":[[1,2],[2,3]]}`,
		"run too far":     `{"version":2,"snapshot":"` + s + `","chunks":[],"runs":[[0,1099511627777]]}`,
		"no version":      `{"snapshot":"` + s + `","chunks":[]}`,
		"bad snapshot":    `{"version":1,"snapshot":"sha256:zz","chunks":[]}`,
		"bad chunk":       `{"version":1,"snapshot":"` + s + `","chunks":[{"digest":"md5:1","size":1}]}`,
		"zero size":       `{"version":1,"snapshot":"` + s + `","chunks":[{"digest":"` + d + `","size":0}]}`,
		"huge size":       `{"version":1,"snapshot":"` + s + `","chunks":[{"digest":"` + d + `","size":1099511627776}]}`,
		"duplicate":       `{"version":1,"snapshot":"` + s + `","chunks":[{"digest":"` + d + `","size":1},{"digest":"` + d + `","size":1}]}`,
		"negative window": `{"version":1,"snapshot":"` + s + `","window":-1,"chunks":[]}`,
		"unknown field":   `{"version":1,"snapshot":"` + s + `","chunks":[],"extra":1}`,
		"trailing":        `{"version":1,"snapshot":"` + s + `","chunks":[]} {}`,
	} {
		if _, err := Decode([]byte(in)); !errors.Is(err, ErrMalformed) || !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := Encode(New(snap, time.Second, []blockmap.Chunk{chunk("a", 1), chunk("b", 2)}))
	f.Add(b)
	f.Add([]byte(`{"version":1,"snapshot":"` + snap.String() + `","chunks":[]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"version":2,"snapshot":"` + snap.String() + `","chunks":[],"runs":[[0,3],[7,9]]}`))
	f.Add([]byte(`{"version":3,"snapshot":"` + snap.String() + `","chunks":[],"files":[{"path":"/usr/bin/x","ranges":[[0,4096]]},{"path":"/etc/y"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := Decode(b)
		if err != nil {
			return
		}
		// What decodes encodes, and decodes to the same trace.
		again, err := Encode(tr)
		if err != nil {
			t.Fatalf("decoded trace does not encode: %v", err)
		}
		tr2, err := Decode(again)
		if err != nil || len(tr2.Chunks) != len(tr.Chunks) || tr2.Snapshot != tr.Snapshot || len(tr2.Runs) != len(tr.Runs) ||
			len(tr2.Files) != len(tr.Files) {
			t.Fatalf("round trip: %v", err)
		}
	})
}
