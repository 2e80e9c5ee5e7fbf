package volume

import (
	"os"
	"syscall"
)

func blocksOf(fi os.FileInfo) int64 { return fi.Sys().(*syscall.Stat_t).Blocks * 512 }
