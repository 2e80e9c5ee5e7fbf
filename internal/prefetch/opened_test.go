package prefetch

import (
	"context"
	"testing"
)

// LoadFile loads the chunks under an opened file's extents, in the file's order,
// up to FileAhead of the file and FilesAhead for the volume, skipping what the
// cache holds, and counts what it fetched as the volume's.
func TestLoadFileLoadsTheFileAhead(t *testing.T) {
	const chunk = 256 << 10
	m := chunkedMap(64, chunk)
	fc := newFakeCache()
	e := New(fc, Options{FileAhead: 1 << 20, FilesAhead: 2 << 20, StartupWindow: -1})
	r := e.Open("v", m)
	defer r.Close()
	fc.requested[m.Chunks[4].Digest] = true // the cache holds it already

	// Two extents: 600 KiB from inside chunk 3 (chunks 3-5), then chunk 10
	// onwards, of which the 424 KiB left of FileAhead reach into chunk 11.
	r.LoadFile([][2]int64{{3*chunk + 100<<10, 3*chunk + 700<<10}, {10 * chunk, 14 * chunk}})
	// A second file: what is left of FilesAhead (2 MiB: eight chunks, of which
	// four started above) takes its first four chunks.
	r.LoadFile([][2]int64{{20 * chunk, 30 * chunk}})
	e.loads.Wait()
	defer e.Close(context.Background())

	want := map[int]bool{3: true, 4: true, 5: true, 10: true, 11: true, 20: true, 21: true, 22: true, 23: true}
	for i, c := range m.Chunks {
		if fc.requested[c.Digest] != want[i] {
			t.Errorf("chunk %d: loaded %v, want %v", i, fc.requested[c.Digest], want[i])
		}
	}
	if got := e.Stats().OpenedChunks; got != 8 {
		t.Errorf("OpenedChunks = %d, want 8 (chunk 4 was cached)", got)
	}
	if got := r.Stats().FetchedBytes; got != 8*chunk {
		t.Errorf("the volume fetched %d bytes, want %d", got, 8*chunk)
	}
	// Nothing more for this volume once FilesAhead is spent; another volume has
	// its own.
	r.LoadFile([][2]int64{{40 * chunk, 41 * chunk}})
	r2 := e.Open("v2", m)
	defer r2.Close()
	r2.LoadFile([][2]int64{{50 * chunk, 51 * chunk}})
	e.loads.Wait()
	if fc.requested[m.Chunks[40].Digest] || !fc.requested[m.Chunks[50].Digest] {
		t.Errorf("past FilesAhead: chunk 40 loaded %v (want false), another volume's chunk 50 %v (want true)",
			fc.requested[m.Chunks[40].Digest], fc.requested[m.Chunks[50].Digest])
	}
}
