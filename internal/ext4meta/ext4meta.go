package ext4meta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ErrNotExt4 is returned for a volume whose superblock or group descriptors are
// not those of an ext4 (or ext2/3) filesystem this package reads.
var ErrNotExt4 = errors.New("not an ext4 filesystem")

// Range is Len bytes of the volume at Off.
type Range struct{ Off, Len int64 }

// MaxDescriptorTable bounds the group descriptor table read (a 16 TiB
// filesystem of 4 KiB blocks has 131072 groups of 64-byte descriptors: 8 MiB).
const MaxDescriptorTable = 8 << 20

const (
	superblockOffset = 1024
	superblockSize   = 1024
	magic            = 0xEF53

	incompat64Bit      = 0x80
	roCompatGDTCsum    = 0x10
	roCompatMetaCsum   = 0x400
	bgInodeUninit      = 0x1
	minDescriptorSize  = 32
	wideDescriptorSize = 64
)

// superblock holds the fields InodeTables uses.
type superblock struct {
	blockSize       int64
	blocks          int64
	firstDataBlock  int64
	blocksPerGroup  int64
	inodesPerGroup  int64
	inodeSize       int64
	descSize        int64
	itableUnusedSet bool // the descriptors say how many inodes at each table's end are unused
}

// InodeTables returns the ranges of the inode tables of the ext4 filesystem that
// r holds (size bytes) in which inodes are in use, in volume order, clipped to
// the volume: what a filesystem's opens of files read, whichever files they are.
// A group whose descriptor says its inodes are uninitialized contributes
// nothing; without checksummed descriptors (whose unused counts are kept), every
// group's whole table is returned.
func InodeTables(r io.ReaderAt, size int64) ([]Range, error) {
	sb, err := readSuperblock(r)
	if err != nil {
		return nil, err
	}
	groups := (sb.blocks - sb.firstDataBlock + sb.blocksPerGroup - 1) / sb.blocksPerGroup
	tableSize := groups * sb.descSize
	if groups <= 0 || tableSize > MaxDescriptorTable {
		return nil, fmt.Errorf("%w: %d block groups", ErrNotExt4, groups)
	}
	gdt := make([]byte, tableSize)
	if _, err := r.ReadAt(gdt, (sb.firstDataBlock+1)*sb.blockSize); err != nil && !(errors.Is(err, io.EOF) && len(gdt) > 0) {
		return nil, fmt.Errorf("read group descriptors: %w", err)
	}
	var out []Range
	for g := range groups {
		d := gdt[g*sb.descSize : (g+1)*sb.descSize]
		table := int64(binary.LittleEndian.Uint32(d[0x8:]))
		unused := int64(binary.LittleEndian.Uint16(d[0x1C:]))
		flags := binary.LittleEndian.Uint16(d[0x12:])
		if sb.descSize >= wideDescriptorSize {
			table |= int64(binary.LittleEndian.Uint32(d[0x28:])) << 32
			unused |= int64(binary.LittleEndian.Uint16(d[0x32:])) << 16
		}
		used := sb.inodesPerGroup
		if sb.itableUnusedSet {
			if flags&bgInodeUninit != 0 {
				continue
			}
			used = max(0, sb.inodesPerGroup-unused)
		}
		if used == 0 || table <= 0 || table >= sb.blocks {
			continue
		}
		off, n := table*sb.blockSize, used*sb.inodeSize
		if off >= size {
			continue
		}
		n = min(n, size-off)
		if k := len(out); k > 0 && out[k-1].Off+out[k-1].Len == off {
			out[k-1].Len += n // tables of a flex group lie end to end
			continue
		}
		out = append(out, Range{Off: off, Len: n})
	}
	return out, nil
}

func readSuperblock(r io.ReaderAt) (superblock, error) {
	var sb superblock
	b := make([]byte, superblockSize)
	if _, err := r.ReadAt(b, superblockOffset); err != nil {
		return sb, fmt.Errorf("read superblock: %w", err)
	}
	le := binary.LittleEndian
	if le.Uint16(b[0x38:]) != magic {
		return sb, fmt.Errorf("%w: no ext4 magic in the superblock", ErrNotExt4)
	}
	logBlock := le.Uint32(b[0x18:])
	if logBlock > 6 { // 1 KiB to 64 KiB
		return sb, fmt.Errorf("%w: block size 2^%d KiB", ErrNotExt4, logBlock)
	}
	sb.blockSize = 1024 << logBlock
	sb.blocks = int64(le.Uint32(b[0x4:]))
	incompat := le.Uint32(b[0x60:])
	sb.descSize = minDescriptorSize
	if incompat&incompat64Bit != 0 {
		sb.blocks |= int64(le.Uint32(b[0x150:])) << 32
		sb.descSize = int64(le.Uint16(b[0xFE:]))
		if sb.descSize < wideDescriptorSize || sb.descSize > 1024 || sb.descSize&(sb.descSize-1) != 0 {
			return sb, fmt.Errorf("%w: group descriptors of %d bytes", ErrNotExt4, sb.descSize)
		}
	}
	sb.firstDataBlock = int64(le.Uint32(b[0x14:]))
	sb.blocksPerGroup = int64(le.Uint32(b[0x20:]))
	sb.inodesPerGroup = int64(le.Uint32(b[0x28:]))
	sb.inodeSize = int64(le.Uint16(b[0x58:]))
	if le.Uint32(b[0x4C:]) == 0 { // revision 0: 128-byte inodes
		sb.inodeSize = 128
	}
	roCompat := le.Uint32(b[0x64:])
	sb.itableUnusedSet = roCompat&(roCompatGDTCsum|roCompatMetaCsum) != 0
	switch {
	case sb.blocks <= sb.firstDataBlock || sb.firstDataBlock > 1:
		return sb, fmt.Errorf("%w: %d blocks, the first data block %d", ErrNotExt4, sb.blocks, sb.firstDataBlock)
	case sb.blocksPerGroup <= 0 || sb.blocksPerGroup > 8*sb.blockSize:
		return sb, fmt.Errorf("%w: %d blocks per group", ErrNotExt4, sb.blocksPerGroup)
	case sb.inodesPerGroup <= 0 || sb.inodesPerGroup > 8*sb.blockSize:
		return sb, fmt.Errorf("%w: %d inodes per group", ErrNotExt4, sb.inodesPerGroup)
	case sb.inodeSize < 128 || sb.inodeSize > sb.blockSize || sb.inodeSize&(sb.inodeSize-1) != 0:
		return sb, fmt.Errorf("%w: inodes of %d bytes", ErrNotExt4, sb.inodeSize)
	}
	return sb, nil
}
