package rig

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Binaries are the Slacker programs a benchmark drives.
type Binaries struct {
	Slacker, Slackerd string
}

// FindBinaries finds slacker and slackerd: the paths given first, then this program
// (when it is slacker) and the programs next to it, then PATH; slackerd is looked
// for next to slacker before PATH.
func FindBinaries(slacker, slackerd string) (Binaries, error) {
	self, _ := os.Executable()
	dir := filepath.Dir(self)
	if slacker == "" {
		switch {
		case filepath.Base(self) == "slacker":
			slacker = self
		case exists(filepath.Join(dir, "slacker")):
			slacker = filepath.Join(dir, "slacker")
		default:
			slacker, _ = exec.LookPath("slacker")
		}
	}
	if slackerd == "" {
		if slacker != "" && exists(filepath.Join(filepath.Dir(slacker), "slackerd")) {
			slackerd = filepath.Join(filepath.Dir(slacker), "slackerd")
		} else {
			slackerd, _ = exec.LookPath("slackerd")
		}
	}
	if slacker == "" || slackerd == "" {
		return Binaries{}, errors.New("cannot find the slacker and slackerd binaries next to this program or on PATH: build them (scripts/setup.sh builds them into bin/)")
	}
	return Binaries{Slacker: slacker, Slackerd: slackerd}, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Check reports a missing binary with what to do.
func (b Binaries) Check() error {
	for _, p := range []string{b.Slacker, b.Slackerd} {
		if p == "" {
			return fmt.Errorf("slacker and slackerd binaries are needed (scripts/setup.sh builds them into bin/)")
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w (scripts/setup.sh builds bin/slacker and bin/slackerd)", err)
		}
	}
	return nil
}
