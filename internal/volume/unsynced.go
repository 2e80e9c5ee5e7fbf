package volume

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/slacker-dev/slacker/internal/runs"
)

// The unsynced file lists the block runs written since the last Sync, so that a
// daemon killed without a reboot loses no acknowledged write: their data is in the
// data file's page cache, and the next Open of the same boot reads the runs back.
// It is a header line naming the boot,
//
//	slacker-unsynced 1 <the 36 characters of /proc/sys/kernel/random/boot_id>\n
//
// then records in the journal's encoding, appended (never fsynced) before a write
// returns; a torn tail ends the list. After a reboot the file is ignored (its boot
// id differs): the data of writes never synced may have been lost with the page
// cache, so their blocks in the data file could hold neither the new content nor
// the old (zeros, where the file had a hole); as before, they read as the base.
const (
	unsyncedName  = "unsynced"
	unsyncedTemp  = "unsynced.tmp" // a replacement being written (left only by a kill)
	unsyncedMagic = "slacker-unsynced 1 "
	bootIDLen     = 36
)

// bootID returns this boot's id, read once per process. Tests replace it to act as
// a later boot. A process that cannot read it uses a random id: it then trusts no
// unsynced file but its own.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if id := strings.TrimSpace(string(b)); err == nil && validBootID(id) {
		return id
	}
	r := make([]byte, bootIDLen/2)
	rand.Read(r)
	return hex.EncodeToString(r)
})

func validBootID(id string) bool {
	if len(id) != bootIDLen {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == '-') {
			return false
		}
	}
	return true
}

// unsyncedHeader returns the header of an unsynced file written in boot.
func unsyncedHeader(boot string) []byte {
	return []byte(unsyncedMagic + boot + "\n")
}

// readUnsynced calls fn with each run of the unsynced file read from r if the file
// starts with hdr (the header of this boot), up to the end or the first record that
// fails its check. It reports whether the header matched; a file too short for it
// or with another one lists nothing. err is a read error.
func readUnsynced(r io.Reader, hdr []byte, maxBlock int64, fn func(runs.Run)) (bool, error) {
	got := make([]byte, len(hdr))
	if _, err := io.ReadFull(r, got); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return false, nil
		}
		return false, err
	}
	if !bytes.Equal(got, hdr) {
		return false, nil
	}
	_, _, err := scanRecords(r, maxBlock, fn)
	return true, err
}

// writeUnsynced replaces dir's unsynced file with one holding hdr and the records
// of pend, and returns it open with its length (where the next record goes). The
// new file is written whole under another name and renamed over the old one, so a
// kill at any point leaves in place either the old file or the new one, whole:
// never a file listing fewer runs than both. Nothing is fsynced: the file only
// serves the same boot, and the page cache holds it.
func writeUnsynced(dir string, hdr []byte, pend []runs.Run) (*os.File, int64, error) {
	tmp := filepath.Join(dir, unsyncedTemp)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
	if err != nil {
		return nil, 0, err
	}
	b := make([]byte, len(hdr)+len(pend)*journalRecord)
	copy(b, hdr)
	for i, r := range pend {
		encodeRecord(b[len(hdr)+i*journalRecord:], r)
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, 0, err
	}
	crash("unsynced-written")
	if err := os.Rename(tmp, filepath.Join(dir, unsyncedName)); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, 0, err
	}
	return f, int64(len(b)), nil
}

// crashPoint, if set (by tests), is called at the points between the steps of Sync
// and of the unsynced file's rewrite where a kill leaves distinct states.
var crashPoint func(where string)

func crash(where string) {
	if crashPoint != nil {
		crashPoint(where)
	}
}

// logRuns appends the records of rs to the unsynced file in one write at its end.
// Callers hold mu. The buffer is reused: a write costs one pwrite of 24 bytes.
func (v *Volume) logRuns(rs ...runs.Run) error {
	n := len(rs) * journalRecord
	if cap(v.ubuf) < n {
		v.ubuf = make([]byte, n)
	}
	b := v.ubuf[:n]
	for i, r := range rs {
		encodeRecord(b[i*journalRecord:], r)
	}
	// A failed or short write leaves uend where it was: the next append overwrites
	// what it wrote, and a kill before that leaves a tail that the reader drops or
	// (a whole record) a run whose write failed, which may read as written.
	if _, err := v.unsynced.WriteAt(b, v.uend); err != nil {
		return fmt.Errorf("record unsynced runs: %w", err)
	}
	v.uend += int64(n)
	return nil
}

// trimUnsynced drops from the unsynced file the records of the runs Sync has just
// journaled: those written before mark (its end when Sync took the pending runs).
// The records after mark are those of the runs written since, all in v.pending.
// Callers hold syncMu and mu.
func (v *Volume) trimUnsynced(mark int64) error {
	hdr := int64(len(v.uhdr))
	switch {
	case mark == hdr: // nothing was pending: the file lists v.pending exactly
		return nil
	case len(v.pending) == 0:
		// Cutting the records off is one step: before it they list runs now in
		// the journal too; after it, nothing is pending.
		if err := v.unsynced.Truncate(hdr); err != nil {
			return fmt.Errorf("trim unsynced runs: %w", err)
		}
		v.uend = hdr
		crash("unsynced-trimmed")
		return nil
	default:
		// Writes came during the Sync: their runs must be listed at every
		// instant, so the file is replaced whole rather than cut then refilled.
		return v.rewriteUnsynced()
	}
}

// rewriteUnsynced replaces the unsynced file with this process's header and the
// records of v.pending. On an error the old file stays in place and in use. Callers
// hold syncMu and mu, or own v.
func (v *Volume) rewriteUnsynced() error {
	f, end, err := writeUnsynced(v.dir, v.uhdr, v.pending)
	if err != nil {
		return fmt.Errorf("rewrite unsynced runs: %w", err)
	}
	if v.unsynced != nil {
		v.unsynced.Close()
	}
	v.unsynced, v.uend = f, end
	crash("unsynced-rewritten")
	return nil
}

// recoverUnsynced adds to present and pending the runs of the unsynced file that
// a process of this boot left (killed before it synced them) and the journal lacks,
// then rewrites the file for this process. A missing file (a volume made by an
// older build), one of another boot or with an unreadable header lists nothing:
// those writes were never synced, so they are absent. Open calls it, owning v.
func (v *Volume) recoverUnsynced() error {
	f, err := os.Open(filepath.Join(v.dir, unsyncedName))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	default:
		found := runs.New()
		_, err := readUnsynced(f, v.uhdr, v.meta.Size/BlockSize, func(r runs.Run) { found.Add(r.Start, r.End) })
		f.Close()
		if err != nil {
			return fmt.Errorf("read unsynced runs: %w", err)
		}
		for _, r := range found.Runs() {
			v.synced.Segments(r.Start, r.End, func(s, e int64, in bool) {
				if !in {
					v.present.Add(s, e)
					v.pending = append(v.pending, runs.Run{Start: s, End: e})
				}
			})
		}
	}
	return v.rewriteUnsynced()
}
