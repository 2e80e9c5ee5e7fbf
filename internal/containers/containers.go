package containers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/atomicfile"
	"github.com/slacker-dev/slacker/internal/errdefs"
	"github.com/slacker-dev/slacker/internal/image"
	"github.com/slacker-dev/slacker/internal/labels"
	"github.com/slacker-dev/slacker/internal/runc"
)

// Node is what containers need from slackerd (*api.Client has it).
type Node interface {
	CreateVolume(ctx context.Context, r api.CreateVolumeRequest) (api.Volume, error)
	Volume(ctx context.Context, id string) (api.Volume, error)
	SnapshotVolume(ctx context.Context, id string, r api.SnapshotRequest) (api.Snapshot, error)
	DeleteVolume(ctx context.Context, id string) error
}

// Status values of a container.
const (
	Created = "created"
	Running = "running"
	Exited  = "exited"
)

// Record is a container's persistent record.
type Record struct {
	ID       string        `json:"id"`
	Name     string        `json:"name"`
	Image    string        `json:"image"`
	Snapshot digest.Digest `json:"snapshot"`
	Command  []string      `json:"command"`
	Rootfs   string        `json:"rootfs"`
	Created  time.Time     `json:"created"`
	Started  time.Time     `json:"started,omitzero"`
	Finished time.Time     `json:"finished,omitzero"`
	Status   string        `json:"status"`
	ExitCode int           `json:"exit_code"`
	// Mode is how the root was made: "shared" or "block".
	Mode string `json:"mode,omitempty"`
}

// Manager keeps container records in a directory.
type Manager struct {
	dir  string
	node Node
	rt   *runc.Runtime
}

// NewManager returns a manager keeping records under stateRoot/containers and runc's
// state under stateRoot/runc.
func NewManager(stateRoot string, node Node) (*Manager, error) {
	dir := filepath.Join(stateRoot, "containers")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &Manager{dir: dir, node: node, rt: &runc.Runtime{Root: filepath.Join(stateRoot, "runc")}}, nil
}

// Runtime returns the runc runtime the manager uses.
func (m *Manager) Runtime() *runc.Runtime { return m.rt }

var namePattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$`)

// CreateOptions configure Create.
type CreateOptions struct {
	Name      string // empty: derived from the ID
	ImageName string
	Image     *image.Descriptor
	Run       runc.Config // Image, ID and Rootfs are filled in by Create
	// Mode is how the root is made: "shared", "block", or empty for the image's
	// label (labels.RootMode), else slackerd's container_root.
	Mode string
}

// Create clones the image's snapshot into a mounted volume and writes the bundle.
func (m *Manager) Create(ctx context.Context, o CreateOptions) (*Record, error) {
	b := make([]byte, 16)
	rand.Read(b)
	id := hex.EncodeToString(b)
	name := o.Name
	if name == "" {
		name = "c-" + id[:10]
	}
	if !namePattern.MatchString(name) {
		return nil, fmt.Errorf("container name %q: use letters, digits, '_', '.', '-'", name)
	}
	if _, err := m.Get(name); err == nil {
		return nil, fmt.Errorf("container name %q is already in use; remove it with `slacker rm %s`", name, name)
	}
	var earlier []digest.Digest // the image's layers, newest first
	for i := len(o.Image.Layers) - 1; i >= 0; i-- {
		earlier = append(earlier, o.Image.Layers[i].Snapshot)
	}
	mode := o.Mode
	if mode == "" {
		mode = o.Image.Config.Labels[labels.RootMode]
	}
	switch mode {
	case "", "shared", "block":
	default:
		from := "--root-mode"
		if o.Mode == "" {
			from = "the image's label " + labels.RootMode
		}
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "unknown container root mode %q (from %s): use shared or block", mode, from)
	}
	vol, err := m.node.CreateVolume(ctx, api.CreateVolumeRequest{ID: id, Snapshot: o.Image.Snapshot, Mount: true,
		Startup: true, StartupFallback: earlier, Mode: mode,
		Labels: map[string]string{labels.Kind: labels.KindContainer, labels.Container: name, labels.Image: o.ImageName}})
	if err != nil {
		return nil, fmt.Errorf("clone image %s: %w", o.ImageName, err)
	}
	rc := o.Run
	rc.ID, rc.Rootfs, rc.Image = id, vol.Mountpoint, o.Image.Config
	if rc.Hostname == "" {
		rc.Hostname = name
	}
	dir := filepath.Join(m.dir, id)
	// hosts, hostname and resolv.conf bound over the image's, as Docker does: images
	// made by debootstrap have no /etc/hosts, and servers resolve localhost.
	rc.EtcDir = filepath.Join(dir, "etc")
	err = runc.WriteEtc(rc.EtcDir, rc.Hostname, rc.HostNetwork)
	if err == nil {
		err = runc.WriteBundle(filepath.Join(dir, "bundle"), rc)
	}
	if err != nil {
		m.node.DeleteVolume(context.WithoutCancel(ctx), id)
		os.RemoveAll(dir)
		return nil, err
	}
	spec, _ := runc.Spec(rc)
	r := &Record{ID: id, Name: name, Image: o.ImageName, Snapshot: o.Image.Snapshot, Command: spec.Process.Args,
		Rootfs: vol.Mountpoint, Created: time.Now().UTC(), Status: Created, Mode: vol.Mode}
	if r.Mode == "" {
		r.Mode = "block"
	}
	if err := m.save(r); err != nil {
		m.node.DeleteVolume(context.WithoutCancel(ctx), id)
		os.RemoveAll(dir)
		return nil, err
	}
	return r, nil
}

// Run runs a created container in the foreground and records its exit code.
func (m *Manager) Run(ctx context.Context, r *Record, stdio runc.Stdio) (int, error) {
	r.Status, r.Started = Running, time.Now().UTC()
	if err := m.save(r); err != nil {
		return -1, err
	}
	code, err := m.rt.Run(ctx, r.ID, filepath.Join(m.dir, r.ID, "bundle"), stdio)
	r.Status, r.Finished, r.ExitCode = Exited, time.Now().UTC(), code
	if serr := m.save(r); serr != nil && err == nil {
		err = serr
	}
	return code, err
}

// Remove deletes a container: its runc state, its volume and its record. A running
// container is refused unless force, which kills it.
func (m *Manager) Remove(ctx context.Context, nameOrID string, force bool) error {
	r, err := m.Get(nameOrID)
	if err != nil {
		return err
	}
	if st, _ := m.rt.State(ctx, r.ID); st == "running" || st == "paused" {
		if !force {
			return fmt.Errorf("container %s is running; stop it first or use rm -f", r.Name)
		}
	}
	if err := m.rt.Delete(ctx, r.ID, true); err != nil {
		return err
	}
	if err := m.node.DeleteVolume(ctx, r.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("remove container %s: %w", r.Name, err)
	}
	return os.RemoveAll(filepath.Join(m.dir, r.ID))
}

// Commit snapshots a container's root filesystem (in O(changed data); a running
// container's filesystem is frozen for the moment it takes) and returns the
// descriptor of a new image based on its image.
func (m *Manager) Commit(ctx context.Context, nameOrID string, base *image.Descriptor, comment string) (_ *image.Descriptor, _ api.Snapshot, err error) {
	r, err := m.Get(nameOrID)
	if err != nil {
		return nil, api.Snapshot{}, err
	}
	if r.Mode == "shared" {
		// A block root is frozen by slackerd for the snapshot; an overlay cannot
		// be, so a running container is paused while its changes are read, as
		// docker commit does.
		if st, _ := m.rt.State(ctx, r.ID); st == "running" {
			if err := m.rt.Pause(ctx, r.ID); err != nil {
				return nil, api.Snapshot{}, fmt.Errorf("commit %s: %w", r.Name, err)
			}
			defer func() {
				if rerr := m.rt.Resume(context.WithoutCancel(ctx), r.ID); rerr != nil {
					err = errors.Join(err, fmt.Errorf("commit %s: the container stays paused: %w", r.Name, rerr))
				}
			}()
		}
	}
	snap, err := m.node.SnapshotVolume(ctx, r.ID, api.SnapshotRequest{})
	if err != nil {
		return nil, snap, fmt.Errorf("commit %s: %w", r.Name, err)
	}
	d := *base
	d.Snapshot, d.Size, d.DataSize = snap.ID, snap.Size, snap.DataSize
	d.Layers = append(append([]image.Layer(nil), base.Layers...), image.Layer{Snapshot: snap.ID, Comment: comment})
	d.Created = time.Now().UTC()
	return &d, snap, nil
}

// Get finds a container by name, full ID or unique ID prefix.
func (m *Manager) Get(nameOrID string) (*Record, error) {
	all, err := m.List()
	if err != nil {
		return nil, err
	}
	var match []*Record
	for _, r := range all {
		if r.Name == nameOrID || r.ID == nameOrID {
			return r, nil
		}
		if len(nameOrID) >= 4 && strings.HasPrefix(r.ID, nameOrID) {
			match = append(match, r)
		}
	}
	if len(match) == 1 {
		return match[0], nil
	}
	if len(match) > 1 {
		return nil, fmt.Errorf("container ID prefix %q is ambiguous", nameOrID)
	}
	return nil, errdefs.Errorf(errdefs.ErrNotFound, "no such container: %s", nameOrID)
}

// List returns every container, oldest first, with statuses reconciled with runc
// (a container recorded as running that runc no longer knows has exited).
func (m *Manager) List() ([]*Record, error) {
	ents, err := os.ReadDir(m.dir)
	if err != nil {
		return nil, err
	}
	var out []*Record
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(m.dir, e.Name(), "container.json"))
		if err != nil {
			continue
		}
		var r Record
		if json.Unmarshal(b, &r) != nil {
			continue
		}
		if r.Status == Running {
			if st, _ := m.rt.State(context.Background(), r.ID); st == "" || st == "stopped" {
				r.Status, r.ExitCode = Exited, -1
			}
		}
		out = append(out, &r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

func (m *Manager) save(r *Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Join(m.dir, r.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, "container.json"), b, 0o600)
}
