package ocistore

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/units"
)

// ParseLocation parses a registry store location into Options:
//
//	registry://HOST[:PORT]/REPOSITORY[?insecure=1&timeout=2m&pack=4MiB&solo=1MiB&compress=zstd]
//
// Credentials never appear in the location: they come from the Docker config
// (`docker login`, credential helpers), as for `slacker push`. compress=zstd (the
// default) keeps objects compressed where that pays, compress=none keeps new
// objects as they are (Options.Compress).
func ParseLocation(loc string) (Options, error) {
	var o Options
	u, err := url.Parse(loc)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return o, fmt.Errorf("store location: not a valid registry:// URL: %v", err)
	}
	if u.Scheme != "registry" {
		return o, fmt.Errorf("store location %s: not a registry:// location", u.Redacted())
	}
	if u.User != nil {
		return o, fmt.Errorf("store location %s: credentials do not belong in a registry location; log in with `docker login %s` (the Docker config is read)", u.Redacted(), u.Host)
	}
	repo := strings.Trim(u.Path, "/")
	if u.Host == "" || repo == "" {
		return o, fmt.Errorf("store location %s: want registry://HOST[:PORT]/REPOSITORY", u.Redacted())
	}
	o.Repository = u.Host + "/" + repo
	o.Compress = true
	for k, vs := range u.Query() {
		v := vs[len(vs)-1]
		switch k {
		case "insecure":
			o.Insecure = v == "1" || v == "true" || v == "yes"
		case "timeout":
			if o.Timeout, err = time.ParseDuration(v); err != nil || o.Timeout <= 0 {
				return o, fmt.Errorf("store location %s: timeout %q: want a duration such as 30s", u.Redacted(), v)
			}
		case "pack", "solo":
			n, err := units.ParseBytes(v)
			if err != nil || n <= 0 || n > 1<<30 {
				return o, fmt.Errorf("store location %s: %s %q: want a size such as 4MiB", u.Redacted(), k, v)
			}
			if k == "pack" {
				o.PackSize = n
			} else {
				o.SoloSize = n
			}
		case "compress":
			if o.Compress, err = store.ParseCompress(v); err != nil {
				return o, fmt.Errorf("store location %s: %v", u.Redacted(), err)
			}
		default:
			return o, fmt.Errorf("store location %s: unknown parameter %q (known: insecure, timeout, pack, solo, compress)", u.Redacted(), k)
		}
	}
	return o, nil
}

// Open parses loc and returns its store. It sends no request.
func Open(loc string) (*Store, error) {
	o, err := ParseLocation(loc)
	if err != nil {
		return nil, err
	}
	return New(o)
}
