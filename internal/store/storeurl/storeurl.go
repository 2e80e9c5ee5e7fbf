// Package storeurl opens a store.Store from a location string, the one place that
// knows every backend: a plain path or local:PATH (the embedded local directory
// store). Other schemes are refused with a message listing what is supported.
package storeurl

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/local"
)

// Open opens the store at location and returns it with a display form.
func Open(location string) (store.Store, string, error) {
	switch {
	case strings.HasPrefix(location, "local:"):
		return openLocal(strings.TrimPrefix(strings.TrimPrefix(location, "local:"), "//"))
	case strings.HasPrefix(location, "file://"):
		return openLocal(strings.TrimPrefix(location, "file://"))
	case strings.Contains(location, "://"):
		return nil, "", fmt.Errorf("store %q: unsupported scheme (supported: a directory path, local:PATH, file://PATH)", location)
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
