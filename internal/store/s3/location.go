package s3

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/slacker-dev/slacker/internal/store"
)

// Location is a parsed store location:
//
//	s3://[ACCESS:SECRET@]HOST[:PORT]/BUCKET[/PREFIX][?insecure=1&region=R&create=1&timeout=2m&compress=zstd]
//
// Without credentials in the location, they come from the environment (see
// Options). insecure=1 speaks plain HTTP; create=1 makes the bucket if it is missing;
// compress=zstd (the default) keeps objects compressed where that pays,
// compress=none keeps new objects as they are (Options.Compress).
type Location struct {
	Options
	Create bool
}

// ParseLocation parses an s3:// location.
func ParseLocation(loc string) (Location, error) {
	var l Location
	u, err := url.Parse(loc)
	if err != nil {
		// url.Error repeats the whole location, secret included: keep only the reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return l, fmt.Errorf("store location: not a valid s3:// URL: %v", err)
	}
	if u.Scheme != "s3" {
		return l, fmt.Errorf("store location %s: not an s3:// location", redactURL(u))
	}
	if u.Host == "" {
		return l, fmt.Errorf("store location %s: no host (want s3://HOST[:PORT]/BUCKET[/PREFIX])", redactURL(u))
	}
	l.Endpoint = u.Host
	path := strings.TrimPrefix(u.Path, "/")
	l.Bucket, l.Prefix, _ = strings.Cut(path, "/")
	if l.Bucket == "" {
		return l, fmt.Errorf("store location %s: no bucket (want s3://HOST[:PORT]/BUCKET[/PREFIX])", redactURL(u))
	}
	if u.User != nil {
		l.AccessKey = u.User.Username()
		l.SecretKey, _ = u.User.Password()
	}
	l.Compress = true
	q := u.Query()
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "insecure":
			l.Insecure = truthy(v)
		case "create":
			l.Create = truthy(v)
		case "region":
			l.Region = v
		case "timeout":
			if l.Timeout, err = time.ParseDuration(v); err != nil || l.Timeout <= 0 {
				return l, fmt.Errorf("store location %s: timeout %q: want a duration such as 30s", redactURL(u), v)
			}
		case "compress":
			if l.Compress, err = store.ParseCompress(v); err != nil {
				return l, fmt.Errorf("store location %s: %v", redactURL(u), err)
			}
		default:
			return l, fmt.Errorf("store location %s: unknown parameter %q (known: insecure, create, region, timeout, compress)", redactURL(u), k)
		}
	}
	return l, nil
}

func truthy(v string) bool { return v == "1" || v == "true" || v == "yes" }

// redactURL prints u without its secret.
func redactURL(u *url.URL) string {
	if u == nil {
		return "s3://…"
	}
	return u.Redacted()
}

// Open parses loc and returns its store, creating the bucket if the location asks.
func Open(ctx context.Context, loc string) (*Store, error) {
	l, err := ParseLocation(loc)
	if err != nil {
		return nil, err
	}
	return OpenLocation(ctx, l)
}

// OpenLocation opens the store a parsed location names (its Options changed by
// the caller, if need be), creating its bucket if the location says so.
func OpenLocation(ctx context.Context, l Location) (*Store, error) {
	s, err := New(l.Options)
	if err != nil {
		return nil, err
	}
	if l.Create {
		if err := s.EnsureBucket(ctx); err != nil {
			return nil, fmt.Errorf("store %s: %w", s, err)
		}
	}
	return s, nil
}
