package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
)

var _ store.Refs = (*Store)(nil)

// Records live in <dir>/refs/<name>, written like objects (temp file, fsync,
// rename, fsync of the directory).

func (s *Store) refPath(name string) string {
	return filepath.Join(s.root, "refs", filepath.FromSlash(name))
}

func (s *Store) PutRef(ctx context.Context, name string, b []byte) error {
	if err := store.CheckRefName(name); err != nil {
		return err
	}
	if len(b) > store.MaxRefSize {
		return fmt.Errorf("put record %s: %d bytes, more than %d: %w", name, len(b), store.MaxRefSize, errdefs.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put record %s: %w", name, err)
	}
	final := s.refPath(name)
	dir := filepath.Dir(final)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("put record %s: %w", name, err)
	}
	if err := s.files.WriteFile(final, b, 0o600); err != nil {
		return fmt.Errorf("put record %s: %w", name, err)
	}
	return nil
}

func (s *Store) GetRef(ctx context.Context, name string) ([]byte, error) {
	if err := store.CheckRefName(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get record %s: %w", name, err)
	}
	f, err := os.Open(s.refPath(name))
	if err != nil {
		return nil, fmt.Errorf("get record %s: %w", name, mapErr(err))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, store.MaxRefSize+1))
	if err != nil {
		return nil, fmt.Errorf("get record %s: %w", name, err)
	}
	if len(b) > store.MaxRefSize {
		return nil, fmt.Errorf("get record %s: more than %d bytes: object %w", name, store.MaxRefSize, errdefs.ErrCorrupt)
	}
	return b, nil
}

func (s *Store) ListRefs(ctx context.Context, prefix string, fn func(name string) error) error {
	top := filepath.Join(s.root, "refs")
	var fnErr error
	err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(top, path)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if store.CheckRefName(name) != nil || !strings.HasPrefix(name, prefix) {
			return nil
		}
		if err := fn(name); err != nil {
			fnErr = err
			return fs.SkipAll
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("list records: %w", err)
	}
	return nil
}

func (s *Store) DeleteRef(ctx context.Context, name string) error {
	if err := store.CheckRefName(name); err != nil {
		return err
	}
	if err := os.Remove(s.refPath(name)); err != nil {
		return fmt.Errorf("delete record %s: %w", name, mapErr(err))
	}
	return nil
}
