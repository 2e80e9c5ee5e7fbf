package corpus

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// LayerRecord is the layer cache entry for one layer key
// (DIR/layers/KEY.json). It is written after the layer blob, so a record always
// names a blob that was complete when it was written.
type LayerRecord struct {
	Key       string   `json:"key"`
	Parent    string   `json:"parent,omitempty"`
	Kind      StepKind `json:"kind"`
	CreatedBy string   `json:"created_by"`
	Source    Source   `json:"source"`
	// Empty is set for an app layer that changed nothing: images omit it.
	Empty bool `json:"empty,omitempty"`
	Blob
	// Installed is the dpkg database after this layer (for scratch images, the
	// packages unpacked so far).
	Installed []Package `json:"installed,omitempty"`
	// Added lists packages new or changed in this layer, Removed those gone.
	Added   []Package `json:"added,omitempty"`
	Removed []string  `json:"removed,omitempty"`
	// Notes and Problems come from the app step (see helperResult).
	Notes    []string  `json:"notes,omitempty"`
	Problems []string  `json:"problems,omitempty"`
	Built    time.Time `json:"built"`
	Seconds  float64   `json:"seconds"`
}

// ImageLayer is one layer of a built image, as recorded per image.
type ImageLayer struct {
	Key       string    `json:"key"`
	Kind      StepKind  `json:"kind"`
	CreatedBy string    `json:"created_by"`
	Digest    string    `json:"digest"`
	DiffID    string    `json:"diff_id"`
	Size      int64     `json:"size"`
	USize     int64     `json:"usize"`
	Added     []Package `json:"added,omitempty"`
	Removed   []string  `json:"removed,omitempty"`
	// SharedWith lists the other images of the build that use this very blob.
	SharedWith []string `json:"shared_with,omitempty"`
}

// ImageRecord describes one built image (DIR/records/NAME.json): where it is in
// the layout, what each layer holds and the exact package versions per layer.
type ImageRecord struct {
	Name      string       `json:"name"`
	Category  string       `json:"category"`
	Base      string       `json:"base"`
	ImageHash string       `json:"image_hash"`
	Source    Source       `json:"source"`
	Recipe    int          `json:"recipe"`
	Manifest  string       `json:"manifest"`
	Config    string       `json:"config"`
	Layers    []ImageLayer `json:"layers"`
	Size      int64        `json:"size"`
	USize     int64        `json:"usize"`
	Cmd       []string     `json:"cmd"`
	User      string       `json:"user,omitempty"`
	Notes     []string     `json:"notes,omitempty"`
	Problems  []string     `json:"problems,omitempty"`
	Built     time.Time    `json:"built"`
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicWrite(path, append(b, '\n'))
}

// readJSON decodes path into v; a missing file is os.ErrNotExist.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}

func isNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }

// diffPackages returns what changed from before to after.
func diffPackages(before, after []Package) (added []Package, removed []string) {
	old := map[string]string{}
	for _, p := range before {
		old[p.Name+":"+p.Arch] = p.Version
	}
	seen := map[string]bool{}
	for _, p := range after {
		k := p.Name + ":" + p.Arch
		seen[k] = true
		if v, ok := old[k]; !ok || v != p.Version {
			added = append(added, p)
		}
	}
	for _, p := range before {
		if !seen[p.Name+":"+p.Arch] {
			removed = append(removed, p.Name)
		}
	}
	return added, removed
}
