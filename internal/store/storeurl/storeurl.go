package storeurl

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/local"
	"github.com/slacker-dev/slacker/internal/store/ocistore"
	"github.com/slacker-dev/slacker/internal/store/s3"
)

// Options configure OpenWith.
type Options struct {
	// ReceiveBuffer is each connection's receive buffer for a remote store
	// (transport.Options.ReceiveBuffer: 0 its default, negative the kernel's
	// autotuning).
	ReceiveBuffer int
}

// Open opens the store at location and returns it with a display form.
func Open(location string) (store.Store, string, error) { return OpenWith(location, Options{}) }

// OpenWith is Open with options for a remote store.
func OpenWith(location string, o Options) (store.Store, string, error) {
	switch {
	case strings.HasPrefix(location, "local:"):
		return openLocal(strings.TrimPrefix(strings.TrimPrefix(location, "local:"), "//"))
	case strings.HasPrefix(location, "file://"):
		return openLocal(strings.TrimPrefix(location, "file://"))
	case strings.HasPrefix(location, "s3://"):
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		l, err := s3.ParseLocation(location)
		if err != nil {
			return nil, "", err
		}
		l.Options.ReceiveBuffer = o.ReceiveBuffer
		s, err := s3.OpenLocation(ctx, l)
		if err != nil {
			return nil, "", err
		}
		return s, s.String(), nil
	case strings.HasPrefix(location, "registry://"):
		oo, err := ocistore.ParseLocation(location)
		if err != nil {
			return nil, "", err
		}
		oo.ReceiveBuffer = o.ReceiveBuffer
		s, err := ocistore.New(oo)
		if err != nil {
			return nil, "", err
		}
		return s, s.String(), nil
	case strings.Contains(location, "://"):
		return nil, "", fmt.Errorf("store %q: unsupported scheme (supported: a directory path, local:PATH, file://PATH, s3://HOST/BUCKET[/PREFIX], registry://HOST/REPOSITORY)", redact(location))
	case location == "":
		return nil, "", fmt.Errorf("no store given")
	default:
		return openLocal(location)
	}
}

func openLocal(path string) (store.Store, string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, "", err
	}
	s, err := local.Open(abs)
	if err != nil {
		return nil, "", err
	}
	return s, "local:" + abs, nil
}

// redact hides the password of a location that has one.
func redact(location string) string {
	if u, err := url.Parse(location); err == nil {
		return u.Redacted()
	}
	if i := strings.LastIndex(location, "@"); i >= 0 {
		if j := strings.Index(location, "://"); j >= 0 && j < i {
			return location[:j+3] + "…" + location[i:]
		}
	}
	return location
}
