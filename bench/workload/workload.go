package workload

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Category is one of the paper's six HelloBench categories.
type Category string

// The categories of HelloBench (Table 2 of the Slacker paper).
const (
	Distro       Category = "distro"
	Language     Category = "language"
	Database     Category = "database"
	WebServer    Category = "web-server"
	WebFramework Category = "web-framework"
	Other        Category = "other"
)

// Categories lists every valid category in the paper's order.
var Categories = []Category{Distro, Language, Database, WebServer, WebFramework, Other}

// Base names the bottom layer of an image.
type Base string

// The bases a workload can start from.
const (
	// Minbase is `debootstrap --variant=minbase`: essential packages and apt.
	Minbase Base = "minbase"
	// Buildd is `debootstrap --variant=buildd`: minbase plus build-essential.
	Buildd Base = "buildd"
	// Standard is debootstrap's default set (required + important priorities).
	Standard Base = "standard"
	// Scratch is the empty filesystem; packages on it are unpacked, not installed.
	Scratch Base = "scratch"
)

// Bases lists every valid base.
var Bases = []Base{Minbase, Buildd, Standard, Scratch}

// Workload is one validated HelloBench workload.
type Workload struct {
	// Name is unique in its file and usable as an image repository component.
	Name     string
	Category Category
	Base     Base
	// Layers are package groups installed on top of the base, one image layer
	// per group, in order. Never nil after parsing; a group is never empty.
	Layers [][]string
	// Files maps an absolute path to the content written in the final layer.
	Files map[string]string
	// Cmd is the argv run in the container; never empty.
	Cmd []string
	// Stdin is piped to Cmd's standard input when HasStdin is set.
	Stdin    string
	HasStdin bool
	// Ready says when a run has finished (or a server is up).
	Ready Ready
	// Timeout is when the harness gives up on a run; always positive.
	Timeout time.Duration
	// User runs Cmd when set (a name, or uid[:gid]).
	User string
	// Index is the workload's position in its file, from 0.
	Index int
}

// Packages returns every package named in the workload's groups, in order.
func (w *Workload) Packages() []string {
	var out []string
	for _, g := range w.Layers {
		out = append(out, g...)
	}
	return out
}

// imageFields is everything in a definition that ends up in the image. Ready,
// Timeout and Stdin only steer the harness, so changing them does not rebuild.
type imageFields struct {
	Name     string            `json:"name"`
	Category Category          `json:"category"`
	Base     Base              `json:"base"`
	Layers   [][]string        `json:"layers"`
	Files    map[string]string `json:"files"`
	Cmd      []string          `json:"cmd"`
	User     string            `json:"user"`
	Ready    string            `json:"ready"`
}

// ImageHash is a hex sha256 over the parts of the definition that go into the
// image (name, category, base, groups, files, cmd, user and the ready rule, which
// is recorded as a label). Two definitions with the same ImageHash build the same
// image; timeout_s and stdin changes do not change it.
func (w *Workload) ImageHash() string {
	f := imageFields{w.Name, w.Category, w.Base, w.Layers, w.Files, w.Cmd, w.User, ""}
	if w.Ready != nil {
		f.Ready = w.Ready.String()
	}
	if f.Files == nil {
		f.Files = map[string]string{}
	}
	b, err := json.Marshal(f) // map keys are sorted by encoding/json
	if err != nil {
		panic(fmt.Sprintf("workload: marshal image fields: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Set is the workloads of one file, in file order.
type Set struct {
	Workloads []*Workload
}

// Get returns the workload called name, or nil.
func (s *Set) Get(name string) *Workload {
	for _, w := range s.Workloads {
		if w.Name == name {
			return w
		}
	}
	return nil
}

// Names returns the workload names in file order.
func (s *Set) Names() []string {
	out := make([]string, len(s.Workloads))
	for i, w := range s.Workloads {
		out[i] = w.Name
	}
	return out
}

// Select returns the workloads named in names, in file order. An empty names
// selects all. An unknown name is an error that lists the valid ones.
func (s *Set) Select(names []string) ([]*Workload, error) {
	if len(names) == 0 {
		return slices.Clone(s.Workloads), nil
	}
	want := map[string]bool{}
	for _, n := range names {
		if s.Get(n) == nil {
			return nil, fmt.Errorf("no workload named %q (known: %v)", n, s.Names())
		}
		want[n] = true
	}
	var out []*Workload
	for _, w := range s.Workloads {
		if want[w.Name] {
			out = append(out, w)
		}
	}
	return out, nil
}
