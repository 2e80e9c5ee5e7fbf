package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
)

var _ store.Refs = (*Store)(nil)

// Records are objects under <prefix>refs/<name>. A PUT replaces one atomically and
// S3's read-after-write consistency makes it visible to every later GET.

func (s *Store) refKey(name string) string { return s.o.Prefix + "refs/" + name }

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
	cctx, cancel := s.bound(ctx)
	defer cancel()
	sum := sha256.Sum256(b)
	_, err := s.core.PutObject(cctx, s.o.Bucket, s.refKey(name), bytes.NewReader(b), int64(len(b)), "", hex.EncodeToString(sum[:]),
		minio.PutObjectOptions{ContentType: "application/octet-stream", DisableContentSha256: true, DisableMultipart: true})
	if err != nil {
		return fmt.Errorf("put record %s: %w", name, s.mapErr(ctx, cctx, err))
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
	cctx, cancel := s.bound(ctx)
	defer cancel()
	body, _, _, err := s.core.GetObject(cctx, s.o.Bucket, s.refKey(name), minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("get record %s: %w", name, s.mapErr(ctx, cctx, err))
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, store.MaxRefSize+1))
	if err != nil {
		return nil, fmt.Errorf("get record %s: %w", name, s.mapErr(ctx, cctx, err))
	}
	if len(b) > store.MaxRefSize {
		return nil, fmt.Errorf("get record %s: more than %d bytes: object %w", name, store.MaxRefSize, errdefs.ErrCorrupt)
	}
	return b, nil
}

func (s *Store) ListRefs(ctx context.Context, prefix string, fn func(name string) error) error {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	top := s.o.Prefix + "refs/"
	for obj := range s.client.ListObjectsIter(lctx, s.o.Bucket, minio.ListObjectsOptions{Prefix: top + prefix, Recursive: true}) {
		if obj.Err != nil {
			return fmt.Errorf("list records: %w", s.mapErr(ctx, lctx, obj.Err))
		}
		name := strings.TrimPrefix(obj.Key, top)
		if store.CheckRefName(name) != nil {
			continue // not a record of ours
		}
		if err := fn(name); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("list records: %w", err)
	}
	return nil
}

func (s *Store) DeleteRef(ctx context.Context, name string) error {
	if err := store.CheckRefName(name); err != nil {
		return err
	}
	cctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.client.StatObject(cctx, s.o.Bucket, s.refKey(name), minio.StatObjectOptions{}); err != nil {
		return fmt.Errorf("delete record %s: %w", name, s.mapErr(ctx, cctx, err))
	}
	if err := s.client.RemoveObject(cctx, s.o.Bucket, s.refKey(name), minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("delete record %s: %w", name, s.mapErr(ctx, cctx, err))
	}
	return nil
}
