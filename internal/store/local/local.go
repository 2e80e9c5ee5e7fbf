package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/slacker-dev/slacker/internal/atomicfile"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
)

// Store is a store.Store backed by a local directory.
type Store struct {
	root  string
	files atomicfile.Writer // writes objects and records through <root>/tmp
}

var _ store.Store = (*Store)(nil)

// Open returns a store rooted at dir, creating the directory if needed.
func Open(dir string) (*Store, error) {
	for _, sub := range []string{"sha256", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("open local store %s: %w", dir, err)
		}
	}
	return &Store{root: dir, files: atomicfile.Writer{TempDir: filepath.Join(dir, "tmp")}}, nil
}

// Root returns the store's directory.
func (s *Store) Root() string { return s.root }

// Path returns the file that holds d (whether or not it exists).
func (s *Store) Path(d digest.Digest) string {
	hex := d.Encoded()
	return filepath.Join(s.root, "sha256", hex[:2], hex)
}

// ObjectFile returns the file that holds d's bytes exactly as stored, for a reader
// on this machine that checks what it reads itself (the node cache reads a few
// blocks of a chunk from there, checked against checksums it took when it last
// verified the chunk whole). Unlike Get, nothing read from it is verified; the file
// may be missing, and a Delete removes it (an open descriptor keeps reading the
// bytes it had).
func (s *Store) ObjectFile(d digest.Digest) string { return s.Path(d) }

// blockSumsXattr is the xattr of an object's file that holds its block checksums
// (store.BlockSums, encoded), taken as the file was written or last read whole,
// verified against the digest.
const blockSumsXattr = "user.slacker.blocksums"

// ObjectSums returns the block checksums kept with d's file: checksums of its 4
// KiB blocks taken from bytes that had just matched d, so that a reader of
// ObjectFile can check a few blocks without reading the object whole. None for a
// missing object, one larger than store.MaxSummedObject, one written before this
// store kept them and not read whole since, or on a filesystem without user
// xattrs; a damaged encoding counts as none.
func (s *Store) ObjectSums(d digest.Digest) (store.BlockSums, bool) {
	var buf [store.MaxSummedObject/store.SumBlock*8 + 64]byte
	n, err := unix.Getxattr(s.Path(d), blockSumsXattr, buf[:])
	if err != nil {
		return store.BlockSums{}, false
	}
	bs, err := store.UnmarshalBlockSums(buf[:n])
	return bs, err == nil
}

// keepSums stores sums with the file open as f, if the object is small enough to
// have them. Failing (no user xattrs here) costs only the block reads it would
// have saved.
func keepSums(f *os.File, sums store.BlockSums) {
	if sums.Size <= store.MaxSummedObject {
		unix.Fsetxattr(int(f.Fd()), blockSumsXattr, sums.Marshal(), 0)
	}
}

func (s *Store) Put(ctx context.Context, d digest.Digest, size int64, r io.Reader) error {
	if err := store.CheckDigest(d); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("put %s: negative size %d: %w", d, size, errdefs.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %s: %w", d, err)
	}
	final := s.Path(d)
	if _, err := os.Stat(final); err == nil {
		return nil
	}
	p, err := s.files.Create(final, 0o600)
	if err != nil {
		return fmt.Errorf("put %s: %w", d, err)
	}
	defer p.Abort() // unless committed
	summer := store.NewBlockSummer(rand.Uint64())
	vr := store.VerifyingReader(io.TeeReader(r, summer), d, size)
	if _, err := io.Copy(p, ctxReader{ctx, vr}); err != nil {
		return fmt.Errorf("put %s: %w", d, err)
	}
	if sums := summer.Sums(); sums.Size <= store.MaxSummedObject { // the bytes matched d: keep their checksums
		unix.Setxattr(p.TempPath(), blockSumsXattr, sums.Marshal(), 0)
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		return fmt.Errorf("put %s: %w", d, err)
	}
	if err := p.Commit(); err != nil {
		return fmt.Errorf("put %s: %w", d, err)
	}
	return nil
}

func (s *Store) Get(ctx context.Context, d digest.Digest) (io.ReadCloser, error) {
	if err := store.CheckDigest(d); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", d, err)
	}
	f, err := os.Open(s.Path(d))
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", d, mapErr(err))
	}
	var r io.Reader = store.VerifyingReader(f, d, -1)
	if fi, err := f.Stat(); err == nil && fi.Size() <= store.MaxSummedObject {
		if _, err := unix.Fgetxattr(int(f.Fd()), blockSumsXattr, nil); errors.Is(err, unix.ENODATA) {
			// An object stored before its checksums were kept gets them at its
			// first whole read that matches its digest.
			summer := store.NewBlockSummer(rand.Uint64())
			r = &summingReader{r: store.VerifyingReader(io.TeeReader(f, summer), d, -1), f: f, summer: summer}
		}
	}
	return readCloser{Reader: ctxReader{ctx, r}, Closer: f}, nil
}

// summingReader reads an object verified, and keeps its block checksums once all
// of it has been read and matched its digest.
type summingReader struct {
	r      io.Reader // verifying
	f      *os.File
	summer *store.BlockSummer
}

func (s *summingReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err == io.EOF && s.summer != nil { // io.EOF only once the digest matched
		keepSums(s.f, s.summer.Sums())
		s.summer = nil
	}
	return n, err
}

func (s *Store) GetRange(ctx context.Context, d digest.Digest, off, length int64) ([]byte, error) {
	// An object is the unit of verification: read it whole, check it, then cut.
	return store.ReadRange(ctx, s, d, off, length)
}

func (s *Store) Stat(ctx context.Context, d digest.Digest) (store.Info, error) {
	if err := store.CheckDigest(d); err != nil {
		return store.Info{}, err
	}
	fi, err := os.Stat(s.Path(d))
	if err != nil {
		return store.Info{}, fmt.Errorf("stat %s: %w", d, mapErr(err))
	}
	return store.Info{Digest: d, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

func (s *Store) List(ctx context.Context, fn func(store.Info) error) error {
	top := filepath.Join(s.root, "sha256")
	dirs, err := os.ReadDir(top)
	if err != nil {
		return fmt.Errorf("list %s: %w", top, err)
	}
	for _, dir := range dirs {
		if !dir.IsDir() {
			continue
		}
		ents, err := os.ReadDir(filepath.Join(top, dir.Name()))
		if err != nil {
			return fmt.Errorf("list %s: %w", dir.Name(), err)
		}
		for _, e := range ents {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("list: %w", err)
			}
			d := digest.NewDigestFromEncoded(digest.SHA256, e.Name())
			if d.Validate() != nil || !strings.HasPrefix(e.Name(), dir.Name()) {
				continue // not ours (a stray file); never report it as an object
			}
			fi, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted while listing
			}
			if err != nil {
				return fmt.Errorf("list %s: %w", d, err)
			}
			if err := fn(store.Info{Digest: d, Size: fi.Size(), ModTime: fi.ModTime()}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Store) Delete(ctx context.Context, d digest.Digest) error {
	if err := store.CheckDigest(d); err != nil {
		return err
	}
	if err := os.Remove(s.Path(d)); err != nil {
		return fmt.Errorf("delete %s: %w", d, mapErr(err))
	}
	return nil
}

func mapErr(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("object %w (%v)", errdefs.ErrNotFound, err)
	}
	return err
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

type readCloser struct {
	io.Reader
	io.Closer
}
