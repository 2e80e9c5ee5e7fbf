package ocistore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/slacker-dev/slacker/internal/distribution"
	"github.com/slacker-dev/slacker/internal/errdefs"
)

// client speaks the OCI distribution API to one repository, through
// go-containerregistry's authenticating transport (Docker config credentials,
// basic auth, token auth with refresh on 401). The transport is made on first use,
// so a store can be opened while its registry is away.
type client struct {
	repo     name.Repository
	keychain authn.Keychain
	base     http.RoundTripper
	log      *slog.Logger

	mu sync.Mutex
	hc *http.Client
}

func (c *client) http(ctx context.Context) (*http.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hc != nil {
		return c.hc, nil
	}
	auth, err := c.keychain.Resolve(c.repo.Registry)
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %w", c.repo.RegistryStr(), err)
	}
	rt, err := transport.NewWithContext(ctx, c.repo.Registry, auth, c.base,
		[]string{c.repo.Scope(transport.PushScope), c.repo.Scope("delete")})
	if err != nil {
		return nil, c.mapErr(ctx, "connect", err)
	}
	c.hc = &http.Client{Transport: rt}
	return c.hc, nil
}

func (c *client) url(path string) string {
	return fmt.Sprintf("%s://%s/v2/%s/%s", c.repo.Scheme(), c.repo.RegistryStr(), c.repo.RepositoryStr(), path)
}

// send sends req with a fresh copy of body (nil for none) and returns the
// registry's answer, whatever its status, or the transport's error.
func send(hc *http.Client, req *http.Request, body []byte) (*http.Response, error) {
	for attempt := 1; ; attempt++ {
		r := req.Clone(req.Context())
		if body != nil {
			// The bearer transport sends a request again after a 401 (an expired
			// token) with the same body, possibly while the first send still reads
			// it: the body must be safe for that. A send that finds it half read
			// fails, and is made once more here with a fresh body and the new token.
			r.Body = &lockedReader{r: bytes.NewReader(body)}
			r.ContentLength = int64(len(body))
			r.GetBody = func() (io.ReadCloser, error) { return &lockedReader{r: bytes.NewReader(body)}, nil }
		}
		resp, err := hc.Do(r)
		if err == nil || body == nil || attempt == 2 || req.Context().Err() != nil {
			return resp, err
		}
	}
}

// answerRetries is how many times a request the registry answered with a
// transient error (retryableAnswer) is sent again, and answerPause the pause
// before the first of them, quadrupled each time: the races they cover last
// microseconds, so a registry that keeps failing still fails the call within
// about half a second.
const (
	answerRetries = 3
	answerPause   = 25 * time.Millisecond
)

// do sends one request and returns the response if its status is one of ok; any
// other answer is read, closed and mapped once. body, if not nil, is replayable.
//
// Every request this client sends is idempotent (reads, a manifest PUT of the
// same bytes, a DELETE whose repeat finds nothing, an upload session that is
// restarted when it is gone), so an answer that retryableAnswer calls transient
// is retried here, in one place, rather than by each caller.
func (c *client) do(ctx context.Context, op, method, u string, hdr http.Header, body []byte, ok ...int) (*http.Response, error) {
	hc, err := c.http(ctx)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	pause := answerPause
	for retry := 0; ; retry++ {
		resp, err := send(hc, req, body)
		if err != nil {
			return nil, c.mapErr(ctx, op, err)
		}
		err = transport.CheckError(resp, ok...)
		if err == nil {
			return resp, nil
		}
		resp.Body.Close()
		if retry == answerRetries || !retryableAnswer(err) || ctx.Err() != nil {
			return nil, c.mapErr(ctx, op, err)
		}
		c.log.Warn("registry-retry", "op", op, "retry", retry+1, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause *= 4
	}
}

// retryableAnswer reports whether a registry's error answer is one a repeat of
// the request may not get. Debian's docker-registry 2.8 on its filesystem
// driver writes link files in place (truncate, then write), so a request that
// reads one at that moment fails although nothing is wrong: a manifest PUT
// racing another node's upload of a blob it names is refused with
// DIGEST_INVALID + MANIFEST_BLOB_UNKNOWN (distribution.LinkRace); a manifest GET
// or DELETE racing a tag's rewrite (a DELETE reads every tag's link to remove
// those naming the manifest) gets 500 UNKNOWN. Overload (429, 503) and other 5xx
// answers are retried too.
func retryableAnswer(err error) bool {
	var terr *transport.Error
	if !errors.As(err, &terr) {
		return false
	}
	return distribution.LinkRace(terr) || terr.StatusCode >= 500 || terr.StatusCode == http.StatusTooManyRequests
}

// headBlob reports whether the repository has blob d.
func (c *client) headBlob(ctx context.Context, d digest.Digest) (bool, error) {
	resp, err := c.do(ctx, "head blob "+d.String(), http.MethodHead, c.url("blobs/"+d.String()), nil, nil, http.StatusOK)
	if errors.Is(err, errdefs.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return true, nil
}

// uploadBlob uploads b as blob d in one monolithic upload (POST, then PUT). The
// registry checks the digest before the blob exists.
func (c *client) uploadBlob(ctx context.Context, d digest.Digest, b []byte) error {
	err := c.uploadBlobOnce(ctx, d, b)
	if errors.Is(err, errdefs.ErrUnavailable) && ctx.Err() == nil {
		// An upload session does not survive a failed PUT (a token that expired
		// mid-request, a cut connection): start a new one.
		err = c.uploadBlobOnce(ctx, d, b)
	}
	return err
}

func (c *client) uploadBlobOnce(ctx context.Context, d digest.Digest, b []byte) error {
	op := "upload blob " + d.String()
	resp, err := c.do(ctx, op, http.MethodPost, c.url("blobs/uploads/"), nil, nil, http.StatusAccepted)
	if err != nil {
		return err
	}
	resp.Body.Close()
	loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
	if err != nil || resp.Header.Get("Location") == "" {
		return fmt.Errorf("%s: upload location %q: store %w", op, resp.Header.Get("Location"), errdefs.ErrUnavailable)
	}
	q := loc.Query()
	q.Set("digest", d.String())
	loc.RawQuery = q.Encode()
	hdr := http.Header{"Content-Type": {"application/octet-stream"}}
	resp, err = c.do(ctx, op, http.MethodPut, loc.String(), hdr, b, http.StatusCreated)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// uploadBlobStream uploads size bytes from r as blob d, streamed (not replayable:
// a failure is not retried here).
func (c *client) uploadBlobStream(ctx context.Context, d digest.Digest, size int64, r io.Reader) error {
	op := "upload blob " + d.String()
	resp, err := c.do(ctx, op, http.MethodPost, c.url("blobs/uploads/"), nil, nil, http.StatusAccepted)
	if err != nil {
		return err
	}
	resp.Body.Close()
	loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
	if err != nil || resp.Header.Get("Location") == "" {
		return fmt.Errorf("%s: upload location %q: store %w", op, resp.Header.Get("Location"), errdefs.ErrUnavailable)
	}
	q := loc.Query()
	q.Set("digest", d.String())
	loc.RawQuery = q.Encode()
	hc, err := c.http(ctx)
	if err != nil {
		return err
	}
	rr := &recordingReader{r: r}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, loc.String(), rr)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err = hc.Do(req)
	if rerr := rr.failure(); rerr != nil && errors.Is(rerr, errdefs.ErrCorrupt) {
		if resp != nil {
			resp.Body.Close()
		}
		return fmt.Errorf("%s: %w", op, rerr)
	}
	if err != nil {
		return c.mapErr(ctx, op, err)
	}
	defer resp.Body.Close()
	if err := transport.CheckError(resp, http.StatusCreated); err != nil {
		return c.mapErr(ctx, op, err)
	}
	return nil
}

// recordingReader remembers the first error its reader returned, so an upload can
// tell a digest mismatch (its own verdict) from a transport failure.
type recordingReader struct {
	r   io.Reader
	mu  sync.Mutex
	err error
}

func (r *recordingReader) Read(p []byte) (int, error) {
	r.mu.Lock() // see lockedReader
	defer r.mu.Unlock()
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF && r.err == nil {
		r.err = err
	}
	return n, err
}

func (r *recordingReader) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// lockedReader is a request body safe for the concurrent reads described in do.
type lockedReader struct {
	mu sync.Mutex
	r  io.Reader
}

func (l *lockedReader) Read(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Read(p)
}

func (l *lockedReader) Close() error { return nil }

// readRange opens bytes [off, off+n) of blob d. A registry that ignores Range
// (answers 200) is handled by skipping to off.
func (c *client) readRange(ctx context.Context, d digest.Digest, off, n int64) (io.ReadCloser, error) {
	op := fmt.Sprintf("read blob %s [%d, +%d)", d, off, n)
	hdr := http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", off, off+n-1)}}
	resp, err := c.do(ctx, op, http.MethodGet, c.url("blobs/"+d.String()), hdr, nil, http.StatusOK, http.StatusPartialContent)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusPartialContent {
		start, ok := contentRangeStart(resp.Header.Get("Content-Range"))
		if !ok || start != off {
			resp.Body.Close()
			return nil, fmt.Errorf("%s: answered range %q: store %w", op, resp.Header.Get("Content-Range"), errdefs.ErrUnavailable)
		}
		return readCloser{io.LimitReader(resp.Body, n), resp.Body}, nil
	}
	if _, err := io.CopyN(io.Discard, resp.Body, off); err != nil {
		resp.Body.Close()
		return nil, c.mapErr(ctx, op, err)
	}
	return readCloser{io.LimitReader(resp.Body, n), resp.Body}, nil
}

func contentRangeStart(h string) (int64, bool) {
	rest, ok := strings.CutPrefix(h, "bytes ")
	if !ok {
		return 0, false
	}
	a, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(a, 10, 64)
	return v, err == nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// deleteBlob unlinks blob d from the repository; an absent blob is not an error.
func (c *client) deleteBlob(ctx context.Context, d digest.Digest) error {
	resp, err := c.do(ctx, "delete blob "+d.String(), http.MethodDelete, c.url("blobs/"+d.String()), nil, nil, http.StatusAccepted, http.StatusOK)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// getManifest reads the manifest at ref (a tag or digest), at most MaxManifestSize.
func (c *client) getManifest(ctx context.Context, ref string) ([]byte, error) {
	op := "get manifest " + ref
	hdr := http.Header{"Accept": {ocispec.MediaTypeImageManifest}}
	resp, err := c.do(ctx, op, http.MethodGet, c.url("manifests/"+ref), hdr, nil, http.StatusOK)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxManifestSize+1))
	if err != nil {
		return nil, c.mapErr(ctx, op, err)
	}
	return b, nil
}

// putManifest stores manifest b under tag.
func (c *client) putManifest(ctx context.Context, tag string, b []byte) error {
	hdr := http.Header{"Content-Type": {ocispec.MediaTypeImageManifest}}
	resp, err := c.do(ctx, "put manifest "+tag, http.MethodPut, c.url("manifests/"+tag), hdr, b, http.StatusCreated, http.StatusOK)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// manifestDigest returns the digest of the manifest tag names now.
func (c *client) manifestDigest(ctx context.Context, tag string) (digest.Digest, error) {
	hdr := http.Header{"Accept": {ocispec.MediaTypeImageManifest}}
	resp, err := c.do(ctx, "head manifest "+tag, http.MethodHead, c.url("manifests/"+tag), hdr, nil, http.StatusOK)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	d, err := digest.Parse(resp.Header.Get("Docker-Content-Digest"))
	if err != nil {
		return "", fmt.Errorf("head manifest %s: no digest in the answer: store %w", tag, errdefs.ErrUnavailable)
	}
	return d, nil
}

// deleteManifest deletes the manifest d (and the tags naming it). An absent
// manifest is ErrNotFound.
func (c *client) deleteManifest(ctx context.Context, d digest.Digest) error {
	resp, err := c.do(ctx, "delete manifest "+d.String(), http.MethodDelete, c.url("manifests/"+d.String()), nil, nil, http.StatusAccepted, http.StatusOK)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// tags lists every tag of the repository, following pagination. A repository
// that does not exist yet has none.
func (c *client) tags(ctx context.Context) ([]string, error) {
	var all []string
	u := c.url("tags/list?n=10000")
	for u != "" {
		resp, err := c.do(ctx, "list tags", http.MethodGet, u, nil, nil, http.StatusOK)
		if errors.Is(err, errdefs.ErrNotFound) {
			return all, nil
		}
		if err != nil {
			return nil, err
		}
		var page struct {
			Tags []string `json:"tags"`
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&page)
		resp.Body.Close()
		if err != nil {
			return nil, c.mapErr(ctx, "list tags", err)
		}
		all = append(all, page.Tags...)
		u = ""
		if next := nextLink(resp.Header.Get("Link")); next != "" {
			if nu, err := resp.Request.URL.Parse(next); err == nil {
				u = nu.String()
			}
		}
	}
	return all, nil
}

// nextLink returns the target of a `Link: <url>; rel="next"` header.
func nextLink(h string) string {
	for part := range strings.SplitSeq(h, ",") {
		target, params, ok := strings.Cut(strings.TrimSpace(part), ";")
		if ok && strings.Contains(params, `rel="next"`) {
			return strings.Trim(strings.TrimSpace(target), "<>")
		}
	}
	return ""
}

// mapErr maps a transport or registry error to the store's sentinels, once.
func (c *client) mapErr(ctx context.Context, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%s: %w (%v)", op, cerr, err)
	}
	var terr *transport.Error
	if errors.As(err, &terr) {
		if distribution.LinkRace(terr) {
			return fmt.Errorf("%s: store %w: the registry could not read a blob the manifest names (%v)", op, errdefs.ErrUnavailable, err)
		}
		for _, d := range terr.Errors {
			switch d.Code {
			case transport.BlobUnknownErrorCode, transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode:
				return fmt.Errorf("%s: object %w (%s)", op, errdefs.ErrNotFound, d.Code)
			case transport.DigestInvalidErrorCode, transport.SizeInvalidErrorCode:
				return fmt.Errorf("%s: the registry refused the bytes: object %w (%s)", op, errdefs.ErrCorrupt, d.Code)
			case transport.UnsupportedErrorCode:
				return fmt.Errorf("%s: the registry does not allow it (%s: %s); deleting needs storage.delete.enabled in its configuration", op, d.Code, d.Message)
			case transport.BlobUploadUnknownErrorCode, transport.BlobUploadInvalidErrorCode:
				return fmt.Errorf("%s: store %w: the upload session is gone (%s)", op, errdefs.ErrUnavailable, d.Code)
			case transport.TooManyRequestsErrorCode, transport.UnavailableErrorCode:
				return fmt.Errorf("%s: store %w (%s)", op, errdefs.ErrUnavailable, d.Code)
			}
		}
		switch {
		case terr.StatusCode == http.StatusNotFound:
			return fmt.Errorf("%s: object %w", op, errdefs.ErrNotFound)
		case terr.StatusCode == http.StatusRequestedRangeNotSatisfiable:
			return fmt.Errorf("%s: %w: %v", op, errdefs.ErrInvalid, err)
		case terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden:
			return fmt.Errorf("%s: access denied by the registry %s (log in with `docker login`; credentials are read from the Docker config): %v", op, c.repo.RegistryStr(), err)
		case terr.StatusCode >= 500 || terr.StatusCode == http.StatusTooManyRequests || terr.StatusCode == http.StatusRequestTimeout:
			return fmt.Errorf("%s: store %w: %v", op, errdefs.ErrUnavailable, err)
		}
		return fmt.Errorf("%s: registry %s: %v", op, c.repo.RegistryStr(), err)
	}
	// Connection refused or reset, a timeout, a body cut short: transient.
	return fmt.Errorf("%s: store %w: registry %s: %v", op, errdefs.ErrUnavailable, c.repo.RegistryStr(), err)
}
