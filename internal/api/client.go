package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// Client talks to slackerd. Safe for concurrent use.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient returns a client for the daemon listening on socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:    4,
		IdleConnTimeout: 30 * time.Second,
	}
	return &Client{socket: socket, http: &http.Client{Transport: tr}}
}

// Socket returns the daemon's socket path.
func (c *Client) Socket() string { return c.socket }

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://slackerd"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w (no daemon at %s): start it with `slackerd` (see README)", ErrDaemon, c.socket)
		}
		if errors.Is(err, syscall.EACCES) {
			return fmt.Errorf("connect to slackerd at %s: permission denied; run as root", c.socket)
		}
		return fmt.Errorf("slackerd at %s: %w", c.socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e ErrorBody
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = fmt.Sprintf("%s: %s", resp.Status, bytes.TrimSpace(b))
		}
		return errorOf(e)
	}
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if rb, ok := out.(rawBody); ok {
		_, err := io.Copy(rb.w, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode slackerd's answer to %s %s: %w", method, path, err)
	}
	return nil
}

// errorOf turns a failed request's body back into the error the daemon answered: its
// message, as its errdefs kind (errors.Is(err, errdefs.ErrNotFound), or
// context.Canceled for "canceled"), so that KindOf on either side of the socket says
// the same. An error of no kind (or one this client does not know)
// says it came from slackerd.
func errorOf(e ErrorBody) error {
	k, ok := errdefs.ParseKind(e.Kind)
	if !ok || k == errdefs.Internal {
		return fmt.Errorf("slackerd: %s", e.Error)
	}
	return errdefs.New(k.Err(), e.Error)
}

func (c *Client) Info(ctx context.Context) (Info, error) {
	var out Info
	return out, c.do(ctx, "GET", "/v1/info", nil, &out)
}

func (c *Client) CreateVolume(ctx context.Context, r CreateVolumeRequest) (Volume, error) {
	var out Volume
	return out, c.do(ctx, "POST", "/v1/volumes", r, &out)
}

func (c *Client) Volume(ctx context.Context, id string) (Volume, error) {
	var out Volume
	return out, c.do(ctx, "GET", "/v1/volumes/"+url.PathEscape(id), nil, &out)
}

func (c *Client) Volumes(ctx context.Context) ([]Volume, error) {
	var out []Volume
	return out, c.do(ctx, "GET", "/v1/volumes", nil, &out)
}

func (c *Client) MountVolume(ctx context.Context, id string, r MountRequest) (Volume, error) {
	var out Volume
	return out, c.do(ctx, "POST", "/v1/volumes/"+url.PathEscape(id)+"/mount", r, &out)
}

func (c *Client) UnmountVolume(ctx context.Context, id string) error {
	return c.do(ctx, "POST", "/v1/volumes/"+url.PathEscape(id)+"/unmount", nil, nil)
}

func (c *Client) SnapshotVolume(ctx context.Context, id string, r SnapshotRequest) (Snapshot, error) {
	var out Snapshot
	return out, c.do(ctx, "POST", "/v1/volumes/"+url.PathEscape(id)+"/snapshot", r, &out)
}

func (c *Client) DeleteVolume(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", "/v1/volumes/"+url.PathEscape(id), nil, nil)
}

func (c *Client) Mkfs(ctx context.Context, r MkfsRequest) (Snapshot, error) {
	var out Snapshot
	return out, c.do(ctx, "POST", "/v1/snapshots/mkfs", r, &out)
}

// LayoutStartup re-lays snapshot id for start-up from its stored start-up trace
// (docs/design.md, "Start-up layout") and returns the new snapshot.
func (c *Client) LayoutStartup(ctx context.Context, id digest.Digest) (Layout, error) {
	var out Layout
	return out, c.do(ctx, "POST", "/v1/snapshots/"+url.PathEscape(id.String())+"/layout", nil, &out)
}

// PrepareImage asks the node to ready the image snapshot for a container expected
// soon (it mounts the image's root and begins its start-up in the background).
func (c *Client) PrepareImage(ctx context.Context, id digest.Digest) error {
	return c.do(ctx, "POST", "/v1/snapshots/"+url.PathEscape(id.String())+"/prepare", nil, nil)
}

// WarmStore asks the node to open connections to its store ahead of a pull
// (node.WarmStore); it returns at once.
func (c *Client) WarmStore(ctx context.Context) error {
	return c.do(ctx, "POST", "/v1/store/warm", nil, nil)
}

// SnapshotMap returns the snapshot's encoded block map (a push carries it in
// the image's Slacker layer).
func (c *Client) SnapshotMap(ctx context.Context, id digest.Digest) ([]byte, error) {
	var out BlockMap
	err := c.do(ctx, "GET", "/v1/snapshots/"+url.PathEscape(id.String())+"/map", nil, &out)
	return out.Map, err
}

// CarryMap hands the node the snapshot's block map that a pull read with the
// image's manifest, instead of its lookup in the store (node.CarryMap).
func (c *Client) CarryMap(ctx context.Context, id digest.Digest, blockMap []byte) error {
	return c.do(ctx, "PUT", "/v1/snapshots/"+url.PathEscape(id.String())+"/map", BlockMap{Map: blockMap}, nil)
}

// Snapshot looks up a snapshot, fetching its block map onto the node.
func (c *Client) Snapshot(ctx context.Context, id digest.Digest) (Snapshot, error) {
	var out Snapshot
	return out, c.do(ctx, "GET", "/v1/snapshots/"+url.PathEscape(id.String()), nil, &out)
}

func (c *Client) Stats(ctx context.Context) (NodeStats, error) {
	var out NodeStats
	return out, c.do(ctx, "GET", "/v1/stats", nil, &out)
}

// DropCaches empties the memory tier of the node cache, and with disk also its disk
// tier and the local images no image root reads (benchmarks use it for cold runs).
func (c *Client) DropCaches(ctx context.Context, disk bool) error {
	q := ""
	if disk {
		q = "?disk=1"
	}
	return c.do(ctx, "POST", "/v1/cache/drop"+q, nil, nil)
}

// TrimCache evicts the node cache's coldest chunks until its disk tier holds at
// most keep bytes.
func (c *Client) TrimCache(ctx context.Context, keep int64) (TrimCacheResult, error) {
	var out TrimCacheResult
	err := c.do(ctx, "POST", "/v1/cache/trim", TrimCacheRequest{KeepBytes: keep}, &out)
	return out, err
}

// GC collects the store (it may take minutes); out receives the gc.Report.
func (c *Client) GC(ctx context.Context, r GCRequest, out any) error {
	return c.do(ctx, "POST", "/v1/gc", r, out)
}

// GCProgress is GC, telling fn how far it has come as slackerd works.
func (c *Client) GCProgress(ctx context.Context, r GCRequest, out any, fn func(ProgressEvent)) error {
	r.Progress = true
	return c.stream(ctx, "POST", "/v1/gc", r, out, fn)
}

// CheckProgress is Check, telling fn how far it has come as slackerd works.
func (c *Client) CheckProgress(ctx context.Context, r CheckRequest, out any, fn func(ProgressEvent)) error {
	r.Progress = true
	return c.stream(ctx, "POST", "/v1/check", r, out, fn)
}

// stream makes a call whose answer is streamed (StreamLine): each progress line
// goes to fn, the result into out.
func (c *Client) stream(ctx context.Context, method, path string, in, out any, fn func(ProgressEvent)) error {
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := c.do(ctx, method, path, in, rawBody{pw})
		pw.CloseWithError(err)
		errc <- err
	}()
	// done stops reading and returns the call's own error, if it had one.
	done := func() error {
		pr.Close()
		err := <-errc
		if errors.Is(err, io.ErrClosedPipe) {
			return nil // this side stopped reading
		}
		return err
	}
	dec := json.NewDecoder(pr)
	for {
		var l StreamLine
		if err := dec.Decode(&l); err != nil {
			if callErr := done(); callErr != nil {
				return callErr // no daemon, or an error answered before the stream
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // the stream ended before its result
			}
			return fmt.Errorf("slackerd's answer to %s %s: %w", method, path, err)
		}
		switch {
		case l.Progress != nil:
			if fn != nil {
				fn(*l.Progress)
			}
		case l.Error != nil:
			done()
			return errorOf(*l.Error)
		default:
			done()
			if out == nil {
				return nil
			}
			if err := json.Unmarshal(l.Result, out); err != nil {
				return fmt.Errorf("decode slackerd's answer to %s %s: %w", method, path, err)
			}
			return nil
		}
	}
}

// rawBody, as do's out, copies the answer's body to w as it arrives.
type rawBody struct{ w io.Writer }

// Check checks the store (with ReadData it reads every object); out receives the
// gc.CheckReport.
func (c *Client) Check(ctx context.Context, r CheckRequest, out any) error {
	return c.do(ctx, "POST", "/v1/check", r, out)
}
