package local

import (
	"os"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/storetest"
)

func TestSuite(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			s, err := Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Corrupt: func(t *testing.T, s store.Store, d digest.Digest) {
			p := s.(*Store).Path(d)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x40
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		},
	})
}

func TestStrayFilesAreNotObjects(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(dir+"/sha256/ab", 0o700)
	os.WriteFile(dir+"/sha256/ab/not-a-digest", []byte("x"), 0o600)
	n := 0
	if err := s.List(t.Context(), func(store.Info) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("listed %d objects from stray files", n)
	}
}
