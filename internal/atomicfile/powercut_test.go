package atomicfile_test

import (
	"errors"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/slacker-dev/slacker/internal/atomicfile"
)

// cutFS is a file system in memory that models what a power cut keeps: a file's
// content survives only as of its last fsync, a directory's entries only as of its
// last fsync. Which unsynced directory changes a real file system keeps is up to it,
// so a cut is judged in two worlds: none kept, or all kept (with the files' synced
// content only, the case of metadata that reached the disk before the data).
// After limit calls the power is cut: no call does anything any more.
type cutFS struct {
	inodes map[int]*inode
	dirs   map[string]*memDir
	next   int
	calls  int
	limit  int
}

type inode struct{ data, synced []byte }

type memDir struct{ live, synced map[string]int }

var errCut = errors.New("power cut")

func newCutFS(limit int) *cutFS {
	return &cutFS{inodes: map[int]*inode{}, dirs: map[string]*memDir{}, limit: limit}
}

func (m *cutFS) dir(name string) *memDir {
	d := m.dirs[name]
	if d == nil {
		d = &memDir{live: map[string]int{}, synced: map[string]int{}}
		m.dirs[name] = d
	}
	return d
}

// put makes a file that is on the disk already.
func (m *cutFS) put(path, content string) {
	m.next++
	m.inodes[m.next] = &inode{data: []byte(content), synced: []byte(content)}
	d := m.dir(filepath.Dir(path))
	d.live[filepath.Base(path)] = m.next
	d.synced[filepath.Base(path)] = m.next
}

func (m *cutFS) call() error {
	m.calls++
	if m.calls > m.limit {
		return errCut
	}
	return nil
}

// afterCut returns path's content after the cut, in the world where the directory
// changes not synced were lost (kept false) or kept, and whether it exists.
func (m *cutFS) afterCut(path string, kept bool) (string, bool) {
	d := m.dir(filepath.Dir(path))
	ents := d.synced
	if kept {
		ents = d.live
	}
	id, ok := ents[filepath.Base(path)]
	if !ok {
		return "", false
	}
	return string(m.inodes[id].synced), true
}

func (m *cutFS) OpenFile(name string, flag int, perm fs.FileMode) (atomicfile.File, error) {
	if err := m.call(); err != nil {
		return nil, err
	}
	d := m.dir(filepath.Dir(name))
	if _, ok := d.live[filepath.Base(name)]; ok {
		return nil, fs.ErrExist
	}
	m.next++
	m.inodes[m.next] = &inode{}
	d.live[filepath.Base(name)] = m.next
	return &cutFile{m: m, ino: m.inodes[m.next]}, nil
}

func (m *cutFS) Rename(oldpath, newpath string) error {
	if err := m.call(); err != nil {
		return err
	}
	od, nd := m.dir(filepath.Dir(oldpath)), m.dir(filepath.Dir(newpath))
	id, ok := od.live[filepath.Base(oldpath)]
	if !ok {
		return fs.ErrNotExist
	}
	delete(od.live, filepath.Base(oldpath))
	nd.live[filepath.Base(newpath)] = id
	return nil
}

func (m *cutFS) Remove(name string) error {
	if err := m.call(); err != nil {
		return err
	}
	delete(m.dir(filepath.Dir(name)).live, filepath.Base(name))
	return nil
}

func (m *cutFS) SyncDir(dir string) error {
	if err := m.call(); err != nil {
		return err
	}
	d := m.dir(dir)
	d.synced = maps.Clone(d.live)
	return nil
}

type cutFile struct {
	m   *cutFS
	ino *inode
}

func (f *cutFile) Write(b []byte) (int, error) {
	if err := f.m.call(); err != nil {
		return 0, err
	}
	f.ino.data = append(f.ino.data, b...)
	return len(b), nil
}

func (f *cutFile) Sync() error {
	if err := f.m.call(); err != nil {
		return err
	}
	f.ino.synced = slices.Clone(f.ino.data)
	return nil
}

func (f *cutFile) Close() error { return f.m.call() }

// TestPowerCut: wherever the power is cut, the target holds the old content or the
// new, whichever unsynced directory changes the file system kept; and once the write
// has returned, the new content survives any cut. (Leave out the file's fsync and a
// cut after the rename finds an empty target; leave out the directory's and a cut
// after the write returned finds the old one.)
func TestPowerCut(t *testing.T) {
	const target = "/records/record.json"
	for _, old := range []string{"old", ""} {
		done := false
		for limit := 0; !done; limit++ {
			m := newCutFS(limit)
			if old != "" {
				m.put(target, old)
			}
			err := atomicfile.Writer{FS: m}.WriteFile(target, []byte("new"), 0o600)
			if err != nil && !errors.Is(err, errCut) {
				t.Fatalf("old=%q, cut after %d calls: %v", old, limit, err)
			}
			done = err == nil
			for _, kept := range []bool{false, true} {
				got, ok := m.afterCut(target, kept)
				switch {
				case done && got != "new":
					t.Errorf("old=%q, cut after the write returned (%d calls), changes kept=%v: target holds %q, exists %v",
						old, limit, kept, got, ok)
				case ok && got == "new", old == "" && !ok, old != "" && ok && got == old:
				default:
					t.Errorf("old=%q, cut after %d calls, changes kept=%v: target holds %q, exists %v", old, limit, kept, got, ok)
				}
			}
			if limit > 10 {
				t.Fatal("the write never finished")
			}
		}
	}
}
