// Package volume implements Slacker's writable volumes: a clone of a snapshot plus a
// local copy-on-write delta.
//
// A volume reads as its base snapshot (read through a BaseReader: the node gives
// each volume one from package prefetch) overlaid with the blocks written to it. Writes go to the
// delta at BlockSize (4 KiB) granularity, whatever the size of the file the guest
// filesystem is changing: a sparse data file holding written blocks at their own
// offsets, and a journal of which blocks are present. Clone is O(1) (two empty files,
// a one-line one and a small record); Delete removes one directory; Snapshot hashes and uploads only
// the written blocks the store lacks, then the new map (data before metadata), in time
// proportional to the change.
//
// Crash consistency: a write is durable once Sync returns. Sync fdatasyncs the data
// file and only then appends the newly written block runs to the journal and
// fdatasyncs it, so after a crash every synced write is present and an unsynced write
// is either present or absent, as on a disk. A torn journal tail is detected by CRC
// and dropped. The record (volume.json) and the journal, when compacted, are
// replaced whole through package atomicfile: a failed or interrupted compaction
// leaves the old journal in place.
//
// A daemon killed without a reboot (a new one takes over the guest's writes) loses
// no acknowledged write: before a write returns, the runs it adds are appended to a
// third file, unsynced, which lists those written since the last Sync (never
// fsynced: the page cache keeps it, as it keeps their data), and the next Open of
// the same boot reads them back as present, to be journaled at its first Sync. The
// file names the boot it was written in (the kernel's boot id): after a reboot the
// data of unsynced writes may not have reached the disk, so their blocks could read
// as neither old nor new content, and the file is ignored: those writes are absent,
// as before.
//
// Memory per volume is proportional to the base map's extent count plus the number of
// written runs, never to the data. This package does copy-on-write only: it never
// mounts anything, never talks to FUSE, never looks chunks up or fetches them, and
// never decides what to read ahead.
package volume
