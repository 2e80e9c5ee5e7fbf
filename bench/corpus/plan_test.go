package corpus

import (
	"slices"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/bench/workload"
)

func parse(t *testing.T, doc string) []*workload.Workload {
	t.Helper()
	set, err := workload.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return set.Workloads
}

func realWorkloads(t *testing.T) []*workload.Workload {
	t.Helper()
	set, err := workload.ParseFile("../workload/testdata/workloads.toml")
	if err != nil {
		t.Fatal(err)
	}
	return set.Workloads
}

const planDoc = `
[[workload]]
name = "a"
category = "language"
base = "minbase"
layers = [["jre"], ["jdk"]]
cmd = ["java"]
ready = { exit = 0 }
timeout_s = 10

[[workload]]
name = "b"
category = "language"
base = "minbase"
layers = [["jre"], ["clojure"]]
cmd = ["clojure"]
ready = { exit = 0 }
timeout_s = 10

[[workload]]
name = "c"
category = "language"
base = "minbase"
layers = [["jre", "zz"]]
cmd = ["x"]
ready = { exit = 0 }
timeout_s = 10

[[workload]]
name = "d"
category = "language"
base = "minbase"
layers = [["zz", "jre"]]
files = { "/f" = "x" }
cmd = ["x"]
ready = { exit = 0 }
timeout_s = 10

[[workload]]
name = "e"
category = "language"
base = "buildd"
layers = [["jre"]]
cmd = ["x"]
ready = { exit = 0 }
timeout_s = 10

[[workload]]
name = "hello"
category = "other"
base = "scratch"
cmd = ["/hello"]
ready = { exit = 0 }
timeout_s = 10
`

func TestPlanKeysAndSharing(t *testing.T) {
	ws := parse(t, planDoc)
	plans := map[string][]Step{}
	for _, w := range ws {
		plans[w.Name] = Plan(w, DefaultSource)
	}
	a, b, c, d, e := plans["a"], plans["b"], plans["c"], plans["d"], plans["e"]
	tests := []struct {
		name string
		x, y Step
		same bool
	}{
		{"same base", a[0], b[0], true},
		{"same first group on same base", a[1], b[1], true},
		{"different second group", a[2], b[2], false},
		{"base differs by variant", a[0], e[0], false},
		{"same group on different base", a[1], e[1], false},
		{"package order inside a group does not matter", c[1], d[1], true},
		{"group content matters", a[1], c[1], false},
		{"app layer with files differs", c[2], d[2], false},
	}
	for _, tt := range tests {
		if got := tt.x.Key == tt.y.Key; got != tt.same {
			t.Errorf("%s: same key = %v, want %v", tt.name, got, tt.same)
		}
	}
	// Chaining: a layer's parent is the key below it.
	for name, steps := range plans {
		for i, s := range steps {
			if s.Depth != i {
				t.Errorf("%s step %d depth %d", name, i, s.Depth)
			}
			if i > 0 && s.Parent != steps[i-1].Key {
				t.Errorf("%s step %d parent %s, want %s", name, i, s.Parent, steps[i-1].Key)
			}
		}
		if last := steps[len(steps)-1]; last.Kind != StepApp {
			t.Errorf("%s: last step is %s", name, last.Kind)
		}
	}
	h := plans["hello"]
	if len(h) != 1 || h[0].Kind != StepApp || !h[0].App.Hello || !h[0].Scratch || h[0].Parent != "" {
		t.Errorf("hello-world plan: %+v", h)
	}
	if a[0].Describe() != "debootstrap --variant=minbase" || a[1].Describe() != "apt-get install jre" {
		t.Errorf("describe: %q %q", a[0].Describe(), a[1].Describe())
	}
}

func TestPlanKeyCoversSource(t *testing.T) {
	w := parse(t, planDoc)[0]
	k0 := Plan(w, DefaultSource)
	for _, src := range []Source{
		{Suite: "trixie", Mirror: DefaultSource.Mirror},
		{Suite: "bookworm", Mirror: "http://mirror.example/debian"},
		{Suite: "bookworm", Mirror: DefaultSource.Mirror, Snapshot: "20250520T000000Z"},
		{Suite: "bookworm", Mirror: DefaultSource.Mirror, Recommends: true},
	} {
		k := Plan(w, src)
		for i := range k {
			if k[i].Key == k0[i].Key {
				t.Errorf("source %+v: layer %d key unchanged", src, i)
			}
		}
	}
	if again := Plan(w, DefaultSource); !slices.EqualFunc(again, k0, func(x, y Step) bool { return x.Key == y.Key }) {
		t.Error("plan keys are not deterministic")
	}
}

func TestForestOfRealWorkloads(t *testing.T) {
	ws := realWorkloads(t)
	f := BuildForest(ws, DefaultSource)
	// One root per debootstrap variant, plus the scratch images' first layers.
	var bases []string
	for _, r := range f.Roots {
		bases = append(bases, r.Describe())
	}
	slices.Sort(bases)
	want := []string{"app: /hello", "debootstrap (default package set)", "debootstrap --variant=buildd", "debootstrap --variant=minbase", "dpkg-deb -x busybox-static"}
	if !slices.Equal(bases, want) {
		t.Fatalf("roots %q, want %q", bases, want)
	}
	byDesc := map[string]*Node{}
	for _, r := range f.Roots {
		byDesc[r.Describe()] = r
	}
	minbase := byDesc["debootstrap --variant=minbase"]
	if len(minbase.Users) != 36 {
		t.Errorf("minbase shared by %d images, want 36", len(minbase.Users))
	}
	// openjdk-17-jre-headless directly on minbase: java has ca-certificates
	// first, so it is not in this group.
	var jre *Node
	for _, ch := range minbase.Children {
		if ch.Describe() == "apt-get install openjdk-17-jre-headless" {
			jre = ch
		}
	}
	if jre == nil {
		t.Fatal("no shared openjdk layer on minbase")
	}
	users := slices.Clone(jre.Users)
	slices.Sort(users)
	if strings.Join(users, ",") != "clojure,jetty,jruby,tomcat" {
		t.Errorf("openjdk layer users %v", users)
	}
	distinct, refs := f.Shared()
	if distinct >= refs {
		t.Errorf("no sharing: %d distinct of %d", distinct, refs)
	}
	t.Logf("%d distinct layers for %d layer references", distinct, refs)
	// Every image's steps are a path in the forest.
	for name, steps := range f.Images {
		for _, s := range steps {
			if !slices.Contains(f.Nodes[s.Key].Users, name) {
				t.Errorf("%s missing from users of %s", name, s.Describe())
			}
		}
	}
}

func TestDiffPackages(t *testing.T) {
	before := []Package{{"a", "1", "amd64"}, {"b", "1", "amd64"}, {"c", "1", "all"}}
	after := []Package{{"a", "1", "amd64"}, {"b", "2", "amd64"}, {"d", "1", "amd64"}}
	added, removed := diffPackages(before, after)
	if len(added) != 2 || added[0].Name != "b" || added[1].Name != "d" {
		t.Errorf("added %v", added)
	}
	if !slices.Equal(removed, []string{"c"}) {
		t.Errorf("removed %v", removed)
	}
	got := parseDpkgList([]byte("ii \tlibc6\t2.36-9\tamd64\nrc \told\t1\tamd64\nii \tbash\t5.2\tamd64\ngarbage\n"))
	if len(got) != 2 || got[0] != (Package{"libc6", "2.36-9", "amd64"}) || got[1].Name != "bash" {
		t.Errorf("parseDpkgList: %v", got)
	}
}
