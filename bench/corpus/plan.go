package corpus

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/slacker-dev/slacker/bench/workload"
)

// RecipeVersion changes whenever the way a layer is built changes in a way that
// changes its content; it is part of every layer key, so bumping it rebuilds all.
const RecipeVersion = 1

// Source is where packages come from. It is part of every layer key.
type Source struct {
	// Suite is the Debian suite, e.g. "bookworm".
	Suite string `json:"suite"`
	// Mirror is the Debian mirror URL, e.g. "http://deb.debian.org/debian".
	Mirror string `json:"mirror"`
	// Snapshot is a free label for the state of the mirror (e.g. a
	// snapshot.debian.org timestamp used as Mirror). Change it to force a rebuild
	// against a mirror that moved on.
	Snapshot string `json:"snapshot,omitempty"`
	// Recommends installs recommended packages too (apt's default); the corpus
	// default is off, as in most Dockerfiles.
	Recommends bool `json:"recommends,omitempty"`
}

// DefaultSource is Debian bookworm from deb.debian.org.
var DefaultSource = Source{Suite: "bookworm", Mirror: "http://deb.debian.org/debian"}

// StepKind is what a layer is made of.
type StepKind string

const (
	StepBase     StepKind = "base"     // debootstrap --variant=...
	StepPackages StepKind = "packages" // one package group
	StepApp      StepKind = "app"      // files, user, /hello
)

// Step is one layer of one image, before it is built.
type Step struct {
	// Key identifies the layer's content: the same key is the same layer blob.
	Key string
	// Parent is the key of the layer below, "" for the bottom layer.
	Parent string
	Kind   StepKind
	// Base is the debootstrap base (StepBase) or the image's base.
	Base workload.Base
	// Packages is the group for StepPackages, sorted.
	Packages []string
	// Depth is the layer's index in the image, from 0.
	Depth int
	// Scratch is set when the image has no package manager (scratch base).
	Scratch bool
	// App holds the app step's inputs.
	App *AppSpec
}

// AppSpec is what the app layer is made of.
type AppSpec struct {
	Files map[string]string `json:"files"`
	User  string            `json:"user,omitempty"`
	// Hello puts the builder's static hello-world binary at /hello when the image
	// lacks it: set when cmd[0] is "/hello" and no file provides it.
	Hello bool `json:"hello,omitempty"`
	// Cmd is checked against the image (see AnalyzeCmd). It does not change the
	// layer's content, but it is part of the key so that the check runs again
	// whenever cmd changes (the rebuilt layer is the same blob: app layers have
	// fixed mtimes).
	Cmd []string `json:"cmd"`
}

// Describe says in a few words what the step installs, for progress and history.
func (s Step) Describe() string {
	switch s.Kind {
	case StepBase:
		if s.Base == workload.Standard {
			return "debootstrap (default package set)"
		}
		return "debootstrap --variant=" + string(s.Base)
	case StepPackages:
		if s.Scratch {
			return "dpkg-deb -x " + strings.Join(s.Packages, " ")
		}
		return "apt-get install " + strings.Join(s.Packages, " ")
	default:
		var parts []string
		for _, p := range sortedKeys(s.App.Files) {
			parts = append(parts, p)
		}
		if s.App.Hello {
			parts = append(parts, "/hello")
		}
		if s.App.User != "" {
			parts = append(parts, "user "+s.App.User)
		}
		if len(parts) == 0 {
			return "app (nothing)"
		}
		return "app: " + strings.Join(parts, " ")
	}
}

// ShortKey is the first 12 hex digits of the key, for names and logs.
func (s Step) ShortKey() string { return s.Key[:12] }

func hashKey(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("corpus: marshal key: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Plan returns the layers of w from the bottom up. The app step is always
// last; the builder drops it from the image when it changes nothing.
//
// Keys chain: a layer's key hashes its parent's key, so equal keys mean equal
// bases and equal ordered group lists below. Package order inside one group does
// not matter to apt and does not change the key.
func Plan(w *workload.Workload, src Source) []Step {
	var steps []Step
	parent := ""
	scratch := w.Base == workload.Scratch
	if scratch {
		// No base layer; the root key still pins the source and recipe.
		parent = hashKey(struct {
			V      int    `json:"v"`
			Kind   string `json:"kind"`
			Suite  string `json:"suite"`
			Mirror string `json:"mirror"`
			Snap   string `json:"snapshot"`
		}{RecipeVersion, "scratch", src.Suite, src.Mirror, src.Snapshot})
	} else {
		key := hashKey(struct {
			V       int    `json:"v"`
			Kind    string `json:"kind"`
			Variant string `json:"variant"`
			Source  Source `json:"source"`
		}{RecipeVersion, "base", string(w.Base), src})
		steps = append(steps, Step{Key: key, Kind: StepBase, Base: w.Base})
		parent = key
	}
	for _, g := range w.Layers {
		pkgs := slices.Clone(g)
		sort.Strings(pkgs)
		pkgs = slices.Compact(pkgs)
		key := hashKey(struct {
			V          int      `json:"v"`
			Parent     string   `json:"parent"`
			Kind       string   `json:"kind"`
			Packages   []string `json:"packages"`
			Recommends bool     `json:"recommends"`
		}{RecipeVersion, parent, "packages", pkgs, src.Recommends})
		steps = append(steps, Step{Key: key, Parent: parentOrEmpty(steps, parent), Kind: StepPackages,
			Base: w.Base, Packages: pkgs, Scratch: scratch})
		parent = key
	}
	app := &AppSpec{Files: w.Files, User: w.User, Cmd: w.Cmd}
	if app.Files == nil {
		app.Files = map[string]string{}
	}
	if w.Cmd[0] == "/hello" {
		if _, ok := w.Files["/hello"]; !ok {
			app.Hello = true
		}
	}
	key := hashKey(struct {
		V      int      `json:"v"`
		Parent string   `json:"parent"`
		Kind   string   `json:"kind"`
		App    *AppSpec `json:"app"`
	}{RecipeVersion, parent, "app", app})
	steps = append(steps, Step{Key: key, Parent: parentOrEmpty(steps, parent), Kind: StepApp,
		Base: w.Base, App: app, Scratch: scratch})
	for i := range steps {
		steps[i].Depth = i
	}
	return steps
}

// parentOrEmpty returns "" for the first layer of a scratch image (its parent
// key is the virtual empty root, which has no blob).
func parentOrEmpty(steps []Step, parent string) string {
	if len(steps) == 0 {
		return ""
	}
	return parent
}

// Node is one distinct layer in a build plan, shared by every image that uses it.
type Node struct {
	Step
	// Children are the distinct layers built on this one.
	Children []*Node
	// Users are the workloads whose images contain this layer.
	Users []string
}

// Forest is the layer sharing structure of a set of workloads: one tree per
// distinct bottom layer, with a node per distinct layer key.
type Forest struct {
	Roots []*Node
	Nodes map[string]*Node
	// Images maps a workload name to its steps, bottom up.
	Images map[string][]Step
}

// BuildForest plans every workload and merges equal layers.
func BuildForest(ws []*workload.Workload, src Source) *Forest {
	f := &Forest{Nodes: map[string]*Node{}, Images: map[string][]Step{}}
	for _, w := range ws {
		steps := Plan(w, src)
		f.Images[w.Name] = steps
		var parent *Node
		for _, s := range steps {
			n, ok := f.Nodes[s.Key]
			if !ok {
				n = &Node{Step: s}
				f.Nodes[s.Key] = n
				if parent == nil {
					f.Roots = append(f.Roots, n)
				} else {
					parent.Children = append(parent.Children, n)
				}
			}
			n.Users = append(n.Users, w.Name)
			parent = n
		}
	}
	return f
}

// Shared returns the number of distinct layers and the number of layer
// references across all images (references minus distinct is what sharing saves).
func (f *Forest) Shared() (distinct, refs int) {
	for _, steps := range f.Images {
		refs += len(steps)
	}
	return len(f.Nodes), refs
}
