package harness

import (
	"fmt"
	"slices"
	"time"

	"github.com/slacker-dev/slacker/bench/rig"
	"github.com/slacker-dev/slacker/internal/api"
)

// Cycles of the paper (Fig 20).
const (
	Deployment  = "deployment"  // pull + run of a published image
	Development = "development" // push of a change + pull + run
)

// ResultsVersion is the version of the results.json format.
const ResultsVersion = 1

// Results is everything a run of the harness measured (results.json).
type Results struct {
	Version int       `json:"version"`
	Date    time.Time `json:"date"`
	// Commit is the source's git commit (with "-dirty" when the tree had changes).
	Commit  string   `json:"commit"`
	Machine Machine  `json:"machine"`
	Command []string `json:"command,omitempty"`
	Profile Profile  `json:"profile"`
	Runs    int      `json:"runs"`
	Seed    uint64   `json:"seed"`
	// WorkloadsFile is the definitions file; Workloads the workloads measured.
	WorkloadsFile string         `json:"workloads_file"`
	Workloads     []WorkloadInfo `json:"workloads"`
	Systems       []SystemInfo   `json:"systems"`
	// Publish holds the first push of each whole image by each system.
	Publish []PublishSample `json:"publish"`
	// Footprint is what the published images take where they are kept.
	Footprint *Footprint `json:"footprint,omitempty"`
	Samples   []Sample   `json:"samples"`
	// Warmups are the untimed deployment of every workload with Slacker before the
	// samples (Options.Warmup): it gives Slacker's store each image's start-up
	// trace, as one earlier run of the image anywhere would. They count in no
	// statistic.
	Warmups []Sample `json:"warmups,omitempty"`
	// Elapsed is the harness's wall-clock time; Interrupted is set when it was
	// stopped before the end (the samples taken are kept).
	Elapsed     float64  `json:"elapsed_s"`
	Interrupted bool     `json:"interrupted,omitempty"`
	Notes       []string `json:"notes,omitempty"`
}

// Machine describes where it ran.
type Machine struct {
	Hostname string `json:"hostname"`
	Kernel   string `json:"kernel"`
	CPU      string `json:"cpu"`
	CPUs     int    `json:"cpus"`
	Memory   string `json:"memory"`
	OS       string `json:"os"`
}

// Profile is the network between the node and the registry and store.
type Profile struct {
	Name string `json:"name"` // loopback, 1gbit, ...
	// RateBits (bits/s) and RTTMillis describe an emulated link; zero on loopback.
	RateBits  int64   `json:"rate_bits,omitempty"`
	RTTMillis float64 `json:"rtt_ms,omitempty"`
	// Registry is the registry's address.
	Registry string `json:"registry"`
	// Store is Slacker's chunk store location; StoreRemote says whether it sits
	// across the link (false: on the node, so Slacker's data never crossed it).
	Store       string `json:"store"`
	StoreRemote bool   `json:"store_remote"`
	// PublishUnshaped says the images were published (and laid out) with the
	// link's rate and delay off (Options.PublishUnshaped).
	PublishUnshaped bool `json:"publish_unshaped,omitempty"`
}

// WorkloadInfo describes a measured workload and its image.
type WorkloadInfo struct {
	Name     string  `json:"name"`
	Category string  `json:"category"`
	Ready    string  `json:"ready"`
	Timeout  float64 `json:"timeout_s"`
	Layers   int     `json:"layers"`
	// CompressedBytes is the layers' gzip size; DataBytes their uncompressed size.
	CompressedBytes int64 `json:"compressed_bytes"`
	DataBytes       int64 `json:"data_bytes"`
}

// SystemInfo describes a system under test.
type SystemInfo struct {
	Name   string `json:"name"`
	Detail string `json:"detail"`
}

// PublishSample is the first push of a whole image.
type PublishSample struct {
	Workload string  `json:"workload"`
	System   string  `json:"system"`
	OK       bool    `json:"ok"`
	Failure  string  `json:"failure,omitempty"`
	Push     float64 `json:"push_s"`
	// Total includes work before the push (Slacker's conversion).
	Total float64 `json:"total_s"`
	// Optimize marks the second publish of an image laid out for start-up
	// (Options.Optimize), with what the layout did.
	Optimize bool        `json:"optimize,omitempty"`
	Layout   *api.Layout `json:"layout,omitempty"`
	// RecordedFiles is, for an eStargz image optimized from a recorded run, how
	// many files that run read (prioritized in the new image); RecordNote says
	// what went wrong in the run, if anything (the files recorded are used anyway,
	// as ctr-remote optimize does).
	RecordedFiles int    `json:"recorded_files,omitempty"`
	RecordNote    string `json:"record_note,omitempty"`
	// LinkBytes crossed the emulated link away from the node during the publish
	// (IP level; zero on loopback): the gzip layers for the baseline, the chunks
	// and descriptor for Slacker with its store behind the link.
	LinkBytes int64 `json:"link_bytes,omitempty"`
	// Unshaped marks a publish made with the link's rate and delay off
	// (Options.PublishUnshaped): its times are not the profile's.
	Unshaped bool `json:"unshaped,omitempty"`
}

// Footprint is what the published images take where they are kept, measured
// once every image is published: the baseline's distinct layers in the registry
// (gzip, and their tars), and each Slacker store's objects (chunks and block maps)
// as content and as the store keeps them (compressed where it compresses).
type Footprint struct {
	Layers         int              `json:"layers"`
	GzipLayerBytes int64            `json:"gzip_layer_bytes"`
	TarLayerBytes  int64            `json:"tar_layer_bytes"`
	Stores         []StoreFootprint `json:"stores,omitempty"`
}

// StoreFootprint is one Slacker store after the publish.
type StoreFootprint struct {
	Systems      []string `json:"systems"`
	Store        string   `json:"store"` // its display form, without credentials
	Objects      int      `json:"objects"`
	ContentBytes int64    `json:"content_bytes"`
	StoredBytes  int64    `json:"stored_bytes"`
	// Compressed counts the objects the store keeps in a smaller form.
	Compressed int `json:"compressed"`
}

// Store returns the footprint of system's store, or nil.
func (f *Footprint) Store(system string) *StoreFootprint {
	if f == nil {
		return nil
	}
	for i := range f.Stores {
		if slices.Contains(f.Stores[i].Systems, system) {
			return &f.Stores[i]
		}
	}
	return nil
}

// Sample is one cycle of one workload on one system: the unit of the results.
type Sample struct {
	Workload string    `json:"workload"`
	Category string    `json:"category"`
	System   string    `json:"system"`
	Cycle    string    `json:"cycle"`
	Run      int       `json:"run"`
	Seq      int       `json:"seq"` // position in the run's shuffled order
	Start    time.Time `json:"start"`
	OK       bool      `json:"ok"`
	// Stage is where a failed sample failed (push, cold, pull, start, ready);
	// Failure says why.
	Stage   string `json:"stage,omitempty"`
	Failure string `json:"failure,omitempty"`

	Push      float64            `json:"push_s,omitempty"` // development only
	PushParts map[string]float64 `json:"push_parts_s,omitempty"`
	PushBytes int64              `json:"push_bytes,omitempty"`
	// PushLinkBytes crossed the emulated link away from the node during the push.
	PushLinkBytes int64   `json:"push_link_bytes,omitempty"`
	Pull          float64 `json:"pull_s"`
	RunTime       float64 `json:"run_s"`
	// Total is the cycle's time: push + pull + run.
	Total float64 `json:"total_s"`

	// Ready says what made the run ready ("exit 0", "log: LINE", "tcp 6379",
	// "http 200"). Output is the standard output of a workload whose rule is an
	// exit status (its first KiB), to compare systems.
	Ready    string `json:"ready,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Output   string `json:"output,omitempty"`

	// RegistryBytes and StoreBytes are what the node moved during pull and run;
	// LinkBytes what crossed the emulated link towards the node (IP level), and
	// LinkDropped the packets the link dropped meanwhile, either way, its queue
	// full (each costs its TCP connection a retransmission).
	RegistryBytes int64 `json:"registry_bytes"`
	StoreBytes    int64 `json:"store_bytes"`
	LinkBytes     int64 `json:"link_bytes,omitempty"`
	LinkDropped   int64 `json:"link_dropped,omitempty"`
	// ReadBytes is how much of the image the container read (-1: the system
	// cannot tell).
	ReadBytes int64 `json:"read_bytes"`
	// TracesReplayed is how many start-up traces the sample's node replayed
	// (absent: the system cannot tell): 0 for a first run.
	TracesReplayed *int64 `json:"traces_replayed,omitempty"`
}

// Fetched is everything the node moved for the sample's pull and run.
func (s *Sample) Fetched() int64 { return s.RegistryBytes + s.StoreBytes }

// WriteJSON writes r to path atomically.
func (r *Results) WriteJSON(path string) error { return rig.WriteJSON(path, r) }

// ReadResults reads a results.json.
func ReadResults(path string) (*Results, error) {
	var r Results
	if err := rig.ReadJSON(path, &r); err != nil {
		return nil, err
	}
	if r.Version != ResultsVersion {
		return nil, fmt.Errorf("%s: results version %d, this program reads %d", path, r.Version, ResultsVersion)
	}
	return &r, nil
}

// Workload returns the info of the named workload.
func (r *Results) Workload(name string) *WorkloadInfo {
	for i := range r.Workloads {
		if r.Workloads[i].Name == name {
			return &r.Workloads[i]
		}
	}
	return nil
}

// machineOf keeps the machine fields results.json has always held.
func machineOf(m rig.Machine) Machine {
	return Machine{Hostname: m.Hostname, Kernel: m.Kernel, CPU: m.CPU, CPUs: m.CPUs, Memory: m.Memory, OS: m.OS}
}
