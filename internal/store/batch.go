package store

import (
	"context"

	"github.com/opencontainers/go-digest"
)

// BatchGetter is an optional ability of a Store (found by type assertion): reading
// several whole objects in fewer requests, for a backend that keeps objects side
// by side (the registry backend packs them into larger blobs and reads neighbours
// with one ranged request). Callers that find no BatchGetter read objects one by
// one with Get.
//
// Rules every implementation follows (checked by storetest.Run when the store has
// the ability):
//   - fn is called exactly once for each distinct digest in ds, in any order, with
//     the object's whole content or an error; never concurrently. Duplicates in ds
//     are reported once.
//   - data given to fn has been verified against its digest; a mismatch is an error
//     wrapping errdefs.ErrCorrupt, a missing object errdefs.ErrNotFound, an invalid
//     digest errdefs.ErrInvalid. fn may keep data.
//   - GetBatch returns an error only when ctx ends (wrapping ctx.Err()); objects not
//     yet reported by then may be reported with that error or not at all.
type BatchGetter interface {
	GetBatch(ctx context.Context, ds []digest.Digest, fn func(d digest.Digest, data []byte, err error)) error
}
