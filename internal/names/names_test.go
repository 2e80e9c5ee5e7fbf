package names

import (
	"errors"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/image"
)

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"debian":                   "debian:latest",
		"debian:bookworm":          "debian:bookworm",
		"127.0.0.1:5000/x/debian":  "127.0.0.1:5000/x/debian:latest",
		"localhost:5000/debian:12": "localhost:5000/debian:12",
		"my/app:v1":                "my/app:v1",
	} {
		got, err := Normalize(in)
		if err != nil || got != want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "UPPER", "a b", "x:y:z"} {
		if _, err := Normalize(bad); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Normalize(%q): %v, want ErrInvalid", bad, err)
		}
	}
}

func TestPutGetListDelete(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := &image.Descriptor{Snapshot: digest.FromString("x"), Size: 1 << 30, DataSize: 1 << 20}
	if err := s.Put("debian", d); err != nil {
		t.Fatal(err)
	}
	e, err := s.Get("debian:latest")
	if err != nil || e.Descriptor.Snapshot != d.Snapshot || e.Name != "debian:latest" {
		t.Fatalf("get: %+v, %v", e, err)
	}
	l, _ := s.List()
	if len(l) != 1 {
		t.Fatalf("list: %d", len(l))
	}
	if err := s.Delete("debian"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("debian"); !errors.Is(err, errdefs.ErrNotFound) || err.Error() != "image debian: no such image" {
		t.Fatalf("after delete: %v", err)
	}
	k := digest.FromString("chain")
	if _, err := s.Chain(k); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatal(err)
	}
	s.PutChain(k, d.Snapshot)
	if got, err := s.Chain(k); err != nil || got != d.Snapshot {
		t.Fatalf("chain: %v %v", got, err)
	}
}
