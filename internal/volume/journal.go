package volume

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"github.com/slacker-dev/slacker/internal/atomicfile"
	"github.com/slacker-dev/slacker/internal/runs"
)

// The journal is a sequence of 24-byte records, each adding the block run
// [start, end) to the set of blocks present in the delta:
//
//	uint64 start | uint64 end | uint32 crc32c(start|end) | uint32 journalMagic
//
// all little-endian. Replay stops at the first record that fails its check (a torn
// tail after a crash) and truncates the file there. The unsynced file (unsynced.go)
// holds records of the same encoding after its header.
const (
	journalRecord = 24
	journalMagic  = 0x4c4b4a31 // "1JKL"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func encodeRecord(b []byte, r runs.Run) {
	binary.LittleEndian.PutUint64(b[0:], uint64(r.Start))
	binary.LittleEndian.PutUint64(b[8:], uint64(r.End))
	binary.LittleEndian.PutUint32(b[16:], crc32.Checksum(b[:16], castagnoli))
	binary.LittleEndian.PutUint32(b[20:], journalMagic)
}

// replayJournal reads f's records into set, truncates a torn tail, and returns the
// number of good records. maxBlock bounds block numbers (the volume's size).
func replayJournal(f *os.File, set *runs.Set, maxBlock int64) (int, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	good, n, err := scanRecords(f, maxBlock, func(r runs.Run) { set.Add(r.Start, r.End) })
	if err != nil {
		return n, fmt.Errorf("read journal: %w", err)
	}
	return n, truncateAt(f, good)
}

// scanRecords calls fn with the run of each record read from r, up to the end of r
// or the first record that fails its check (a torn tail), and returns the length
// and the number of the good records. err is a read error, never the end of r.
func scanRecords(r io.Reader, maxBlock int64, fn func(runs.Run)) (good int64, n int, err error) {
	buf := make([]byte, 64*journalRecord)
	for {
		k, err := io.ReadFull(r, buf)
		for i := range k / journalRecord {
			run, ok := decodeRecord(buf[i*journalRecord:(i+1)*journalRecord], maxBlock)
			if !ok {
				return good, n, nil
			}
			fn(run)
			good += journalRecord
			n++
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return good, n, nil
		}
		if err != nil {
			return good, n, err
		}
	}
}

// decodeRecord returns the run of record rec, or false if rec fails its check or
// names blocks outside [0, maxBlock).
func decodeRecord(rec []byte, maxBlock int64) (runs.Run, bool) {
	start := int64(binary.LittleEndian.Uint64(rec[0:]))
	end := int64(binary.LittleEndian.Uint64(rec[8:]))
	if binary.LittleEndian.Uint32(rec[20:]) != journalMagic ||
		binary.LittleEndian.Uint32(rec[16:]) != crc32.Checksum(rec[:16], castagnoli) ||
		start < 0 || end <= start || end > maxBlock {
		return runs.Run{}, false
	}
	return runs.Run{Start: start, End: end}, true
}

func truncateAt(f *os.File, size int64) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() == size {
		_, err = f.Seek(size, io.SeekStart)
		return err
	}
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("truncate torn journal tail: %w", err)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	_, err = f.Seek(size, io.SeekStart)
	return err
}

// encodeRecords returns the records of runs.
func encodeRecords(runs []runs.Run) []byte {
	buf := make([]byte, len(runs)*journalRecord)
	for i, r := range runs {
		encodeRecord(buf[i*journalRecord:], r)
	}
	return buf
}

// appendRecords appends records for runs at the end of f and syncs it.
func appendRecords(f *os.File, runs []runs.Run) error {
	if len(runs) == 0 {
		return nil
	}
	if _, err := f.Write(encodeRecords(runs)); err != nil {
		return fmt.Errorf("append journal: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync journal: %w", err)
	}
	return nil
}

// rewriteJournal atomically replaces the journal at path with one record per run
// and returns the new file, open for appending. On an error the old journal is in
// place and the returned file is nil, except when only the fsync of the directory
// failed: the new journal is then in place, and returned with the error, because
// appending to the old one would write to a file no longer there.
func rewriteJournal(path string, runs []runs.Run) (*os.File, error) {
	p, err := files.Create(path, 0o600)
	if err != nil {
		return nil, err
	}
	defer p.Abort() // unless committed
	if _, err := p.Write(encodeRecords(runs)); err != nil {
		return nil, err
	}
	// Opened before the rename, so the volume never loses hold of its journal.
	f, err := os.OpenFile(p.TempPath(), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open new journal: %w", err)
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, fmt.Errorf("open new journal: %w", err)
	}
	if err := p.Commit(); err != nil {
		if atomicfile.Replaced(err) {
			return f, err
		}
		f.Close()
		return nil, err
	}
	return f, nil
}
