package distribution

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// TestLinkRace: which refusals of a manifest PUT are the link race. The first is
// what Debian's docker-registry answers while a concurrent upload of a named blob
// rewrites its link file (seen in CI; reproduced against the real registry by
// ocistore's TestPutWhileLinkRewritten).
func TestLinkRace(t *testing.T) {
	for _, tc := range []struct {
		codes []transport.ErrorCode
		want  bool
	}{
		{[]transport.ErrorCode{transport.DigestInvalidErrorCode, transport.ManifestBlobUnknownErrorCode}, true},
		{[]transport.ErrorCode{transport.UnknownErrorCode, transport.ManifestBlobUnknownErrorCode}, true},
		{[]transport.ErrorCode{transport.ManifestBlobUnknownErrorCode}, false}, // the blob is really missing
		{[]transport.ErrorCode{transport.DigestInvalidErrorCode}, false},       // the manifest's own digest
		{[]transport.ErrorCode{transport.ManifestInvalidErrorCode}, false},
	} {
		terr := &transport.Error{StatusCode: http.StatusBadRequest}
		for _, c := range tc.codes {
			terr.Errors = append(terr.Errors, transport.Diagnostic{Code: c})
		}
		if got := LinkRace(fmt.Errorf("put: %w", terr)); got != tc.want {
			t.Errorf("%v: LinkRace = %v, want %v", tc.codes, got, tc.want)
		}
	}
	if LinkRace(errors.New("connection refused")) || LinkRace(nil) {
		t.Error("LinkRace of an error that is not a registry's answer")
	}
}
