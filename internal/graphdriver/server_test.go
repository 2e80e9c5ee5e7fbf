package graphdriver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// fakeBackend records calls and answers from its fields.
type fakeBackend struct {
	mu      sync.Mutex
	calls   []string
	err     error
	applied []byte
	diff    []byte
	diffErr error // returned by the diff stream after its bytes
}

func (f *fakeBackend) call(format string, args ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
	return f.err
}

func (f *fakeBackend) Init(home string, opts []string, remapped bool) error {
	return f.call("Init %s %v %v", home, opts, remapped)
}
func (f *fakeBackend) Create(ctx context.Context, id, parent string, rw bool, so map[string]string) error {
	return f.call("Create %s %s %v %v", id, parent, rw, so)
}
func (f *fakeBackend) Remove(ctx context.Context, id string) error { return f.call("Remove %s", id) }
func (f *fakeBackend) Get(ctx context.Context, id string) (string, error) {
	return "/mnt/" + id, f.call("Get %s", id)
}
func (f *fakeBackend) Put(ctx context.Context, id string) error { return f.call("Put %s", id) }
func (f *fakeBackend) Exists(id string) bool                    { f.call("Exists %s", id); return id == "yes" }
func (f *fakeBackend) Status() [][2]string                      { return [][2]string{{"Store", "local:/x"}} }
func (f *fakeBackend) Metadata(ctx context.Context, id string) (map[string]string, error) {
	return map[string]string{"Snapshot": "sha256:1"}, f.call("Metadata %s", id)
}
func (f *fakeBackend) Cleanup(ctx context.Context) error { return f.call("Cleanup") }
func (f *fakeBackend) Diff(ctx context.Context, id, parent string) (io.ReadCloser, error) {
	if err := f.call("Diff %s %s", id, parent); err != nil {
		return nil, err
	}
	r := io.Reader(bytes.NewReader(f.diff))
	if f.diffErr != nil {
		r = io.MultiReader(r, errReader{f.diffErr})
	}
	return io.NopCloser(r), nil
}
func (f *fakeBackend) Changes(ctx context.Context, id, parent string) ([]Change, error) {
	return []Change{{Path: "/etc/motd", Kind: ChangeModify}, {Path: "/tmp/x", Kind: ChangeAdd}}, f.call("Changes %s %s", id, parent)
}
func (f *fakeBackend) ApplyDiff(ctx context.Context, id, parent string, r io.Reader) (int64, error) {
	b, _ := io.ReadAll(r)
	f.mu.Lock()
	f.applied = b
	f.mu.Unlock()
	return int64(len(b)), f.call("ApplyDiff %s %s", id, parent)
}
func (f *fakeBackend) DiffSize(ctx context.Context, id, parent string) (int64, error) {
	return 42, f.call("DiffSize %s %s", id, parent)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// dockerClient talks to the plugin as dockerd 20.10's plugin client does: POST
// /<Method>, Accept: application/vnd.docker.plugins.v1.2+json, JSON bodies.
type dockerClient struct{ hc *http.Client }

func newServer(t *testing.T, b Backend) *dockerClient {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "slacker.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(b, nil)
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Shutdown(context.Background())
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	if _, err := Listen(sock); err == nil {
		t.Fatal("a second server could listen on a served socket")
	}
	return &dockerClient{hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}}
}

func (c *dockerClient) post(t *testing.T, method string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", "http://plugin/"+method, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Add("Accept", "application/vnd.docker.plugins.v1.2+json")
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: read answer: %v", method, err)
	}
	return resp.StatusCode, b
}

// dockerResponse is dockerd's graphDriverResponse (daemon/graphdriver/proxy.go).
type dockerResponse struct {
	Err          string            `json:",omitempty"`
	Dir          string            `json:",omitempty"`
	Exists       bool              `json:",omitempty"`
	Status       [][2]string       `json:",omitempty"`
	Changes      []Change          `json:",omitempty"`
	Size         int64             `json:",omitempty"`
	Metadata     map[string]string `json:",omitempty"`
	Capabilities struct{ ReproducesExactDiffs bool }
}

func TestProtocol(t *testing.T) {
	f := &fakeBackend{}
	c := newServer(t, f)
	// dockerd's requests, byte for byte as its proxy encodes them.
	tests := []struct {
		method, body string
		call         string
		want         dockerResponse
	}{
		{"GraphDriver.Init", `{"Home":"/var/lib/docker/slacker","Opts":null,"UIDMaps":null,"GIDMaps":null}`,
			"Init /var/lib/docker/slacker [] false", dockerResponse{}},
		{"GraphDriver.Init", `{"Home":"/h","Opts":["a=b"],"UIDMaps":[{"ContainerID":0,"HostID":100000,"Size":65536}],"GIDMaps":null}`,
			"Init /h [a=b] true", dockerResponse{}},
		{"GraphDriver.Create", `{"ID":"l1"}`, "Create l1  false map[]", dockerResponse{}},
		{"GraphDriver.Create", `{"ID":"l2","Parent":"l1","MountLabel":"x"}`, "Create l2 l1 false map[]", dockerResponse{}},
		{"GraphDriver.CreateReadWrite", `{"ID":"c-init","Parent":"l2","StorageOpt":{"size":"1G"}}`, "Create c-init l2 true map[size:1G]", dockerResponse{}},
		{"GraphDriver.Get", `{"ID":"c","MountLabel":""}`, "Get c", dockerResponse{Dir: "/mnt/c"}},
		{"GraphDriver.Put", `{"ID":"c"}`, "Put c", dockerResponse{}},
		{"GraphDriver.Exists", `{"ID":"yes"}`, "Exists yes", dockerResponse{Exists: true}},
		{"GraphDriver.Exists", `{"ID":"no"}`, "Exists no", dockerResponse{}},
		{"GraphDriver.Status", `{}`, "", dockerResponse{Status: [][2]string{{"Store", "local:/x"}}}},
		{"GraphDriver.GetMetadata", `{"ID":"l1"}`, "Metadata l1", dockerResponse{Metadata: map[string]string{"Snapshot": "sha256:1"}}},
		{"GraphDriver.Cleanup", `{}`, "Cleanup", dockerResponse{}},
		{"GraphDriver.Capabilities", `{}`, "", dockerResponse{}},
		{"GraphDriver.Changes", `{"ID":"c","Parent":"c-init"}`, "Changes c c-init",
			dockerResponse{Changes: []Change{{"/etc/motd", ChangeModify}, {"/tmp/x", ChangeAdd}}}},
		{"GraphDriver.DiffSize", `{"ID":"c","Parent":"c-init"}`, "DiffSize c c-init", dockerResponse{Size: 42}},
		{"GraphDriver.Remove", `{"ID":"c"}`, "Remove c", dockerResponse{}},
	}
	for _, tc := range tests {
		t.Run(tc.method, func(t *testing.T) {
			f.calls = nil
			status, b := c.post(t, tc.method, strings.NewReader(tc.body))
			if status != 200 {
				t.Fatalf("status %d: %s", status, b)
			}
			var got dockerResponse
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("answer %s: %v", b, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("answer %+v, want %+v", got, tc.want)
			}
			if tc.call != "" && (len(f.calls) != 1 || f.calls[0] != tc.call) {
				t.Fatalf("backend calls %q, want %q", f.calls, tc.call)
			}
		})
	}
	// The change kinds on the wire are Docker's numbers.
	_, b := c.post(t, "GraphDriver.Changes", strings.NewReader(`{"ID":"c"}`))
	if !strings.Contains(string(b), `{"Path":"/etc/motd","Kind":0},{"Path":"/tmp/x","Kind":1}`) {
		t.Fatalf("changes on the wire: %s", b)
	}
}

func TestActivate(t *testing.T) {
	c := newServer(t, &fakeBackend{})
	// dockerd sends a JSON null.
	status, b := c.post(t, "Plugin.Activate", strings.NewReader("null\n"))
	var got struct{ Implements []string }
	if status != 200 || json.Unmarshal(b, &got) != nil || !reflect.DeepEqual(got.Implements, []string{"GraphDriver"}) {
		t.Fatalf("activate: %d %s", status, b)
	}
}

func TestProtocolErrors(t *testing.T) {
	f := &fakeBackend{err: errdefs.Errorf(errdefs.ErrBusy, "layer x: layer in use")}
	c := newServer(t, f)
	for _, m := range []string{"GraphDriver.Create", "GraphDriver.Get", "GraphDriver.Remove", "GraphDriver.Diff", "GraphDriver.ApplyDiff?id=a&parent=b"} {
		status, b := c.post(t, m, strings.NewReader(`{"ID":"x"}`))
		var got dockerResponse
		if status != 500 || json.Unmarshal(b, &got) != nil || got.Err != "layer x: layer in use" {
			t.Errorf("%s: %d %s; want 500 with the error in Err", m, status, b)
		}
	}
	// A bad request body is an error, not a call with empty fields.
	status, b := c.post(t, "GraphDriver.Get", strings.NewReader(`{"ID":`))
	if status != 500 || !strings.Contains(string(b), "request body") {
		t.Fatalf("bad body: %d %s", status, b)
	}
	// dockerd reads 404 as "not implemented" (e.g. Capabilities of an old plugin).
	status, b = c.post(t, "GraphDriver.Frobnicate", strings.NewReader(`{}`))
	if status != 404 {
		t.Fatalf("unknown call: %d %s", status, b)
	}
}

func TestApplyDiffAndDiffStreams(t *testing.T) {
	layer := bytes.Repeat([]byte("layer bytes "), 100000)
	f := &fakeBackend{diff: layer}
	c := newServer(t, f)
	status, b := c.post(t, "GraphDriver.ApplyDiff?id=l2&parent=l1", bytes.NewReader(layer))
	var got dockerResponse
	if status != 200 || json.Unmarshal(b, &got) != nil || got.Size != int64(len(layer)) {
		t.Fatalf("apply: %d %s", status, b)
	}
	if !bytes.Equal(f.applied, layer) || f.calls[0] != "ApplyDiff l2 l1" {
		t.Fatalf("backend got %d bytes, calls %q", len(f.applied), f.calls)
	}
	status, b = c.post(t, "GraphDriver.Diff", strings.NewReader(`{"ID":"l2","Parent":"l1"}`))
	if status != 200 || !bytes.Equal(b, layer) {
		t.Fatalf("diff: %d, %d bytes", status, len(b))
	}
}

func TestDiffFailureCutsTheStream(t *testing.T) {
	f := &fakeBackend{diff: bytes.Repeat([]byte("x"), 1<<20), diffErr: errors.New("disk on fire")}
	c := newServer(t, f)
	req, _ := http.NewRequest("POST", "http://plugin/GraphDriver.Diff", strings.NewReader(`{"ID":"c"}`))
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil {
		t.Fatalf("a failed diff read as a complete stream of %d bytes", n)
	}
}
