package ocistore

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/transport"
)

// linkRestorer hands requests to the real transport; when the registry refuses
// a manifest request of the given method, it remembers the answer and puts the
// emptied link file back, as the concurrent upload or tag write that was
// rewriting it would have.
type linkRestorer struct {
	base     http.RoundTripper
	method   string
	link     string
	content  []byte
	mu       sync.Mutex
	refusals []string
}

func (l *linkRestorer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(r)
	if err != nil || r.Method != l.method || !strings.Contains(r.URL.Path, "/manifests/") || resp.StatusCode < 400 {
		return resp, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refusals = append(l.refusals, string(body))
	if werr := os.WriteFile(l.link, l.content, 0o644); werr != nil {
		return nil, werr
	}
	return resp, nil
}

// answers returns the refused answers seen so far.
func (l *linkRestorer) answers() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.refusals...)
}

// raceLink opens a second store on s's repository whose refused manifest
// requests of method put link back (linkRestorer), then empties link, as a
// rewrite of it caught half-way would leave it.
func raceLink(t *testing.T, s *Store, method, link string) (*Store, *linkRestorer) {
	t.Helper()
	content, err := os.ReadFile(link)
	if err != nil {
		t.Fatalf("the link file: %v", err)
	}
	lr := &linkRestorer{base: transport.New(transport.Options{HTTP2: true}), method: method, link: link, content: content}
	s2 := reopen(t, s, func(o *Options) { o.Transport = lr })
	if err := s2.ensureConfig(t.Context()); err != nil { // before the link is emptied: it may be the config's
		t.Fatal(err)
	}
	if err := os.Truncate(link, 0); err != nil {
		t.Fatal(err)
	}
	return s2, lr
}

// TestPutWhileLinkRewritten: the registry's filesystem driver rewrites a
// blob's link file in place when another node finishes uploading the same
// blob. A pack manifest PUT that reads the link at that moment is refused with
// DIGEST_INVALID and MANIFEST_BLOB_UNKNOWN (a CI failure of
// TestManyNodesSharedStore); the store must take that as transient and retry,
// not report the bytes as corrupt.
func TestPutWhileLinkRewritten(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	first := []byte("the first object, which makes the store upload its config blob")
	if err := s.Put(ctx, digest.FromBytes(first), int64(len(first)), bytes.NewReader(first)); err != nil {
		t.Fatal(err)
	}
	s2, lr := raceLink(t, s, http.MethodPut, registryFile("repositories",
		s.repo.RepositoryStr(), "_layers", "sha256", emptyDigest.Encoded(), "link"))
	second := []byte("the second object, whose pack manifest names the config blob")
	if err := s2.Put(ctx, digest.FromBytes(second), int64(len(second)), bytes.NewReader(second)); err != nil {
		t.Fatalf("put while the link was being rewritten: %v", err)
	}
	refusals := lr.answers()
	if len(refusals) == 0 || !strings.Contains(refusals[0], "MANIFEST_BLOB_UNKNOWN") {
		t.Fatalf("the registry did not refuse the manifest while the link was empty (answers: %q): the test did not reproduce the race", refusals)
	}
	t.Logf("the registry first answered %s", strings.TrimSpace(refusals[0]))
	rc, err := s.Get(ctx, digest.FromBytes(second))
	if err != nil {
		t.Fatalf("the object from another node: %v", err)
	}
	defer rc.Close()
	if got, err := io.ReadAll(rc); err != nil || !bytes.Equal(got, second) {
		t.Fatalf("the object from another node: %q, %v", got, err)
	}
}

// TestDeleteWhileTagRewritten: to delete a manifest, the registry reads the
// link of every tag of the repository (to remove the tags naming it); a tag
// being rewritten in place at that moment (a node renewing its lease record)
// reads empty, and the DELETE is answered 500 UNKNOWN (a CI failure of
// TestGCRemoteStores). The store must try again, not fail the collection.
func TestDeleteWhileTagRewritten(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	doomed := []byte("an object the collector deletes")
	if err := s.Put(ctx, digest.FromBytes(doomed), int64(len(doomed)), bytes.NewReader(doomed)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutRef(ctx, "leases/node-a", []byte("a record rewritten all the time")); err != nil {
		t.Fatal(err)
	}
	s2, lr := raceLink(t, s, http.MethodDelete, registryFile("repositories",
		s.repo.RepositoryStr(), "_manifests", "tags", refTag("leases/node-a"), "current", "link"))
	if err := s2.Delete(ctx, digest.FromBytes(doomed)); err != nil {
		t.Fatalf("delete while a tag was being rewritten: %v", err)
	}
	refusals := lr.answers()
	if len(refusals) == 0 {
		t.Fatal("the registry did not refuse the DELETE while the tag's link was empty: the test did not reproduce the race")
	}
	t.Logf("the registry first answered %s", strings.TrimSpace(refusals[0]))
	if ok, err := store.Exists(ctx, reopen(t, s, nil), digest.FromBytes(doomed)); err != nil || ok {
		t.Fatalf("the deleted object: exists %v, %v", ok, err)
	}
	if got, err := s.GetRef(ctx, "leases/node-a"); err != nil || string(got) != "a record rewritten all the time" {
		t.Fatalf("the record: %q, %v", got, err)
	}
}
