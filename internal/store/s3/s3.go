package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/transport"
)

// Options configure a Store.
type Options struct {
	// Endpoint is host[:port] of the S3 service.
	Endpoint string
	// Bucket holds the objects; Prefix (optional) is prepended to every key.
	Bucket, Prefix string
	// AccessKey and SecretKey (and SessionToken) sign requests. Empty: taken from
	// the environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN,
	// then MINIO_ROOT_USER/MINIO_ROOT_PASSWORD), then ~/.aws/credentials.
	AccessKey, SecretKey, SessionToken string
	// Insecure speaks plain HTTP instead of HTTPS.
	Insecure bool
	// Region of the bucket ("us-east-1"). Set, so no request is spent looking it up.
	Region string
	// Timeout bounds each call whose ctx has no earlier deadline (2m). A Get's
	// bound covers the reading of its body.
	Timeout time.Duration
	// BufferLimit is the largest object Put reads into memory and verifies before
	// sending (64 MiB); larger ones are streamed under the same signed hash.
	BufferLimit int64
	// MaxRetries is how many times the client itself sends a request it can replay
	// (3). Reads are retried by the caller (package fetch), with its own backoff.
	MaxRetries int
	// Transport carries the requests (default: transport.New's, with
	// ReceiveBuffer). Tests and fault injection wrap it.
	Transport http.RoundTripper
	// ReceiveBuffer is each connection's receive buffer for the default
	// transport (transport.Options.ReceiveBuffer: 0 its default, negative the
	// kernel's autotuning).
	ReceiveBuffer int
	// Compress keeps each object of up to store.MaxEncodedObject bytes as a zstd
	// frame when that saves at least a sixteenth of it (store.EncodeObject), with its
	// encoding and plain size in the object's metadata. Reads decode whatever
	// encoding an object was stored with, so a bucket may hold both.
	Compress bool
}

// User metadata of a compressed object (x-amz-meta-slacker-encoding, -size).
const (
	metaEncoding = "Slacker-Encoding"
	metaSize     = "Slacker-Size"
)

// Store is a store.Store in an S3 bucket.
type Store struct {
	o      Options
	client *minio.Client
	core   minio.Core
}

var _ store.Store = (*Store)(nil)

// New returns a store for the bucket in o. It sends no request.
func New(o Options) (*Store, error) {
	if o.Endpoint == "" || o.Bucket == "" {
		return nil, fmt.Errorf("s3 store: endpoint and bucket are required")
	}
	if err := s3utils.CheckValidBucketName(o.Bucket); err != nil {
		return nil, fmt.Errorf("s3 store: bucket %q: %v", o.Bucket, err)
	}
	if o.Prefix != "" && !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
	o.Prefix = strings.TrimPrefix(o.Prefix, "/")
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.BufferLimit <= 0 {
		o.BufferLimit = 64 << 20
	}
	if o.MaxRetries <= 0 {
		o.MaxRetries = 3
	}
	if o.Transport == nil {
		o.Transport = transport.New(transport.Options{ReceiveBuffer: o.ReceiveBuffer})
	}
	var creds *credentials.Credentials
	if o.AccessKey != "" {
		creds = credentials.NewStaticV4(o.AccessKey, o.SecretKey, o.SessionToken)
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{}, &credentials.EnvMinio{}, &credentials.FileAWSCredentials{},
		})
	}
	c, err := minio.New(o.Endpoint, &minio.Options{
		Creds: creds, Secure: !o.Insecure, Region: o.Region, Transport: o.Transport,
		BucketLookup: minio.BucketLookupPath, MaxRetries: o.MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 store %s: %w", o.Endpoint, err)
	}
	return &Store{o: o, client: c, core: minio.Core{Client: c}}, nil
}

// String is the store's location without credentials.
func (s *Store) String() string {
	scheme := "https"
	if s.o.Insecure {
		scheme = "http"
	}
	return fmt.Sprintf("s3:%s://%s/%s/%s", scheme, s.o.Endpoint, s.o.Bucket, s.o.Prefix)
}

// Bucket and Prefix say where the objects are.
func (s *Store) Bucket() string { return s.o.Bucket }
func (s *Store) Prefix() string { return s.o.Prefix }

// Key is the object key that holds d.
func (s *Store) Key(d digest.Digest) string {
	hex := d.Encoded()
	return s.o.Prefix + "sha256/" + hex[:2] + "/" + hex
}

// EnsureBucket creates the bucket if it does not exist.
func (s *Store) EnsureBucket(ctx context.Context) error {
	cctx, cancel := s.bound(ctx)
	defer cancel()
	ok, err := s.client.BucketExists(cctx, s.o.Bucket)
	if err == nil && ok {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bucket %s: %w", s.o.Bucket, s.mapErr(ctx, cctx, err))
	}
	err = s.client.MakeBucket(cctx, s.o.Bucket, minio.MakeBucketOptions{Region: s.o.Region})
	if code := errCode(err); code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("create bucket %s: %w", s.o.Bucket, s.mapErr(ctx, cctx, err))
	}
	return nil
}

// bound gives ctx the store's per-call deadline unless it has an earlier one.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= s.o.Timeout {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.o.Timeout)
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
	cctx, cancel := s.bound(ctx)
	defer cancel()
	var body io.Reader
	var vr *recordingReader
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", DisableContentSha256: true, DisableMultipart: true}
	storedSize, storedSum := size, d.Encoded()
	if size <= s.o.BufferLimit {
		// Read and verify first: nothing that fails its digest is ever sent, and a
		// bytes.Reader lets the client replay the request after a transient failure.
		var buf bytes.Buffer
		buf.Grow(int(size) + 1)
		if _, err := buf.ReadFrom(io.LimitReader(store.VerifyingReader(r, d, size), size+1)); err != nil {
			return fmt.Errorf("put %s: %w", d, err)
		}
		data := buf.Bytes()
		if s.o.Compress {
			if z, enc := store.EncodeObject(data); enc != store.EncodingRaw {
				data, storedSize, storedSum = z, int64(len(z)), digest.FromBytes(z).Encoded()
				opts.UserMetadata = map[string]string{metaEncoding: enc, metaSize: strconv.FormatInt(size, 10)}
			}
		}
		body = bytes.NewReader(data)
	} else {
		vr = &recordingReader{r: store.VerifyingReader(r, d, size)}
		body = vr
	}
	// The signed x-amz-content-sha256 is the digest itself (of the compressed form,
	// for a compressed object): the server refuses a body that does not hash to it,
	// so a damaged transfer never becomes the object. If-None-Match: * keeps the
	// first copy (and its modification time, which garbage collection goes by); a
	// server without conditional writes overwrites it with equivalent bytes.
	opts.SetMatchETagExcept("*")
	_, err := s.core.PutObject(cctx, s.o.Bucket, s.Key(d), body, storedSize, "", storedSum, opts)
	if vr != nil {
		if verr := vr.failure(); verr != nil && errors.Is(verr, errdefs.ErrCorrupt) {
			return fmt.Errorf("put %s: %w", d, verr)
		}
	}
	if errCode(err) == "PreconditionFailed" {
		return nil // stored already
	}
	if err != nil {
		return fmt.Errorf("put %s: %w", d, s.mapErr(ctx, cctx, err))
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
	cctx, cancel := s.bound(ctx)
	body, info, _, err := s.core.GetObject(cctx, s.o.Bucket, s.Key(d), minio.GetObjectOptions{})
	if err != nil {
		err = s.mapErr(ctx, cctx, err)
		cancel()
		return nil, fmt.Errorf("get %s: %w", d, err)
	}
	enc, plainSize, err := encodingOf(d, info.UserMetadata, info.Size)
	if err != nil || enc == store.EncodingRaw {
		if err != nil {
			body.Close()
			cancel()
			return nil, err
		}
		return store.VerifyingBody(body, d, info.Size, func(err error) error { return s.mapErr(ctx, cctx, err) }, cancel), nil
	}
	// A compressed object is read whole (it is at most store.MaxEncodedObject),
	// decoded and verified before its first byte is handed out.
	defer cancel()
	defer body.Close()
	if info.Size < 0 || info.Size > store.MaxEncodedObject {
		return nil, fmt.Errorf("get %s: compressed object of %d bytes stored: object %w", d, info.Size, errdefs.ErrCorrupt)
	}
	// The stored form is dropped once decoded (the plain bytes are new): its
	// buffer is reused.
	stored := store.ReadBuffer(int(info.Size) + 1)
	defer store.ReleaseBuffer(stored)
	n, err := io.ReadFull(body, stored)
	switch {
	case err == io.ErrUnexpectedEOF && int64(n) == info.Size:
	case err == nil || err == io.EOF || err == io.ErrUnexpectedEOF:
		return nil, fmt.Errorf("get %s: %d bytes stored, the store said %d: object %w", d, n, info.Size, errdefs.ErrCorrupt)
	default:
		return nil, fmt.Errorf("get %s: %w", d, s.mapErr(ctx, cctx, err))
	}
	plain, err := store.DecodeObject(d, plainSize, enc, stored[:n])
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", d, err)
	}
	return store.NewInMemory(plain), nil
}

// encodingOf reads how object d is stored from its user metadata: the encoding and
// the plain size (storedSize for a raw object).
func encodingOf(d digest.Digest, meta map[string]string, storedSize int64) (string, int64, error) {
	enc := meta[metaEncoding]
	if enc == store.EncodingRaw {
		return enc, storedSize, nil
	}
	size, err := strconv.ParseInt(meta[metaSize], 10, 64)
	if err != nil || size < 0 || size > store.MaxEncodedObject {
		return "", 0, fmt.Errorf("object %s: stored %s with a bad plain size %q: object %w", d, enc, meta[metaSize], errdefs.ErrCorrupt)
	}
	return enc, size, nil
}

func (s *Store) GetRange(ctx context.Context, d digest.Digest, off, length int64) ([]byte, error) {
	// An object is the unit of verification: read it whole, check it, then cut.
	return store.ReadRange(ctx, s, d, off, length)
}

func (s *Store) Stat(ctx context.Context, d digest.Digest) (store.Info, error) {
	if err := store.CheckDigest(d); err != nil {
		return store.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.Info{}, fmt.Errorf("stat %s: %w", d, err)
	}
	cctx, cancel := s.bound(ctx)
	defer cancel()
	info, err := s.client.StatObject(cctx, s.o.Bucket, s.Key(d), minio.StatObjectOptions{})
	if err != nil {
		return store.Info{}, fmt.Errorf("stat %s: %w", d, s.mapErr(ctx, cctx, err))
	}
	_, size, err := encodingOf(d, info.UserMetadata, info.Size)
	if err != nil {
		return store.Info{}, fmt.Errorf("stat %s: %w", d, err)
	}
	return store.Info{Digest: d, Size: size, Stored: info.Size, ModTime: info.LastModified.Truncate(time.Second)}, nil
}

func (s *Store) List(ctx context.Context, fn func(store.Info) error) error {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	top := s.o.Prefix + "sha256/"
	// WithMetadata: MinIO lists each object's user metadata, so a compressed
	// object's plain size is known without a HEAD; AWS S3 ignores it, and then a
	// compressed object lists its stored size (see store.Info).
	for obj := range s.client.ListObjectsIter(lctx, s.o.Bucket, minio.ListObjectsOptions{Prefix: top, Recursive: true, WithMetadata: true}) {
		if obj.Err != nil {
			return fmt.Errorf("list %s: %w", s, s.mapErr(ctx, lctx, obj.Err))
		}
		rest := strings.TrimPrefix(obj.Key, top)
		dir, hex, ok := strings.Cut(rest, "/")
		d := digest.NewDigestFromEncoded(digest.SHA256, hex)
		if !ok || d.Validate() != nil || !strings.HasPrefix(hex, dir) || len(dir) != 2 {
			continue // not ours (a stray key); never report it as an object
		}
		size := obj.Size
		if _, plain, err := encodingOf(d, obj.UserMetadataStripped, obj.Size); err == nil {
			size = plain
		}
		// HEAD gives whole seconds, listings milliseconds: say the same in both.
		if err := fn(store.Info{Digest: d, Size: size, Stored: obj.Size, ModTime: obj.LastModified.Truncate(time.Second)}); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("list: %w", err)
	}
	return nil
}

func (s *Store) Delete(ctx context.Context, d digest.Digest) error {
	// S3 deletes are idempotent; the contract wants ErrNotFound for an absent
	// object, so look first (a concurrent Delete may still make both succeed).
	if _, err := s.Stat(ctx, d); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	cctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.client.RemoveObject(cctx, s.o.Bucket, s.Key(d), minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("delete %s: %w", d, s.mapErr(ctx, cctx, err))
	}
	return nil
}

func errCode(err error) string {
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		return er.Code
	}
	return ""
}

// mapErr maps an error of the client to the store's sentinels, once. ctx is the
// caller's, cctx the one the call ran under (the caller's plus the store's bound).
func (s *Store) mapErr(ctx, cctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	if errors.Is(cctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("store %w: no answer from %s within %v: %v", errdefs.ErrUnavailable, s.o.Endpoint, s.o.Timeout, err)
	}
	var er minio.ErrorResponse
	if !errors.As(err, &er) {
		// Connection refused or reset, a timeout, a body cut short: transient.
		return fmt.Errorf("store %w: %s: %v", errdefs.ErrUnavailable, s.o.Endpoint, err)
	}
	switch er.Code {
	case "NoSuchKey", "NotFound":
		return fmt.Errorf("object %w (%s)", errdefs.ErrNotFound, er.Code)
	case "NoSuchBucket":
		return fmt.Errorf("object %w: bucket %q does not exist at %s (create it, or add create=1 to the store location)", errdefs.ErrNotFound, s.o.Bucket, s.o.Endpoint)
	case "XAmzContentSHA256Mismatch", "BadDigest", "InvalidDigest", "IncompleteBody":
		return fmt.Errorf("object %w: the store refused the bytes: %s", errdefs.ErrCorrupt, er.Code)
	case "InvalidRange":
		return fmt.Errorf("%w: %s", errdefs.ErrInvalid, er.Code)
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken":
		return fmt.Errorf("access denied by the S3 store at %s (%s: %s); check the credentials in the store location or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY", s.o.Endpoint, er.Code, er.Message)
	case "SlowDown", "RequestTimeout", "ServiceUnavailable", "InternalError", "RequestTimeTooSkewed", "XMinioServerNotInitialized",
		"ConditionalRequestConflict": // a concurrent conditional PUT of the key: try again
		return fmt.Errorf("store %w: %s: %s", errdefs.ErrUnavailable, er.Code, er.Message)
	}
	switch {
	case er.StatusCode == http.StatusNotFound:
		return fmt.Errorf("object %w (%s)", errdefs.ErrNotFound, er.Code)
	case er.StatusCode == http.StatusUnauthorized || er.StatusCode == http.StatusForbidden:
		return fmt.Errorf("access denied by the S3 store at %s (HTTP %d %s); check the credentials", s.o.Endpoint, er.StatusCode, er.Code)
	case er.StatusCode >= 500 || er.StatusCode == http.StatusTooManyRequests || er.StatusCode == 0:
		return fmt.Errorf("store %w: HTTP %d %s: %s", errdefs.ErrUnavailable, er.StatusCode, er.Code, er.Message)
	}
	return fmt.Errorf("s3 %s: HTTP %d %s: %s", s.o.Endpoint, er.StatusCode, er.Code, er.Message)
}

// recordingReader remembers the first error its reader returned, so Put can tell a
// digest mismatch (its own verdict) from a transport failure.
type recordingReader struct {
	r   io.Reader
	mu  sync.Mutex
	err error
}

func (r *recordingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.mu.Lock()
		if r.err == nil {
			r.err = err
		}
		r.mu.Unlock()
	}
	return n, err
}

func (r *recordingReader) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}
