package volume

import "testing"

// abandon closes the volume's files without syncing anything, leaving them as a
// daemon killed with SIGKILL would (the page cache keeps what was written). The
// volume is then unusable.
func (v *Volume) abandon() {
	v.closed.Store(true)
	v.syncMu.Lock()
	defer v.syncMu.Unlock()
	v.closeFiles()
}

// setBootID makes the volumes opened from now until the test ends act as if the
// machine had rebooted: their boot id is id.
func setBootID(t *testing.T, id string) {
	old := bootID
	bootID = func() string { return id }
	t.Cleanup(func() { bootID = old })
}
