package distribution

import (
	"errors"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// LinkRace reports a manifest PUT refused because the registry could not read,
// at that moment, a blob the manifest names: MANIFEST_BLOB_UNKNOWN together with
// another error about that blob (DIGEST_INVALID, UNKNOWN). Distribution's
// filesystem driver (Debian's docker-registry) rewrites a blob's link file in
// place when an upload of the same blob completes; a manifest PUT that reads the
// link then finds it empty. The blob is there a moment later: the PUT is worth
// another try, and the answer says nothing about the bytes sent.
func LinkRace(err error) bool {
	var terr *transport.Error
	if !errors.As(err, &terr) {
		return false
	}
	var blobUnknown, other bool
	for _, d := range terr.Errors {
		switch d.Code {
		case transport.ManifestBlobUnknownErrorCode:
			blobUnknown = true
		case transport.DigestInvalidErrorCode, transport.UnknownErrorCode:
			other = true
		}
	}
	return blobUnknown && other
}
