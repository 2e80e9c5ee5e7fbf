package node

import (
	"time"

	"github.com/slacker-dev/slacker/internal/mount"
	"github.com/slacker-dev/slacker/internal/prefetch"
)

// DefaultStartupReadahead is a start's volume's readahead while it starts,
// unless Config.StartupReadahead says (docs/design.md, "A start reads ahead
// little").
//
// The guest's readahead decides what a start's trace holds: the trace records
// the volume's reads, and ext4 asks for its readahead window around every page
// a program touches. At 1 MiB a start read, and its trace kept, about twice
// what it did at 16 KiB (HelloBench), and every later start of the image
// fetched it all. A start that replays a trace gets the speed a large readahead
// bought from the replay and from the warming of the trace's files. A first
// start (no trace yet) is slower at 16 KiB, its reads many more round trips
// (HelloBench's first runs at 1 Gbit/s: 4.1x overlayfs against 4.9x): paid
// once per image, for a trace that every later start replays at half the bytes.
const DefaultStartupReadahead = 16 << 10

// DefaultReplayReadahead is a start's volume's readahead, within its start-up
// window, once the start replays its image's trace, unless
// Config.ReplayReadahead says (docs/design.md, "A replayed start reads ahead
// less").
//
// A replayed start's files are warmed from its trace, so most of a program's
// page faults find their page cached; the kernel then keeps reading around the
// faults that miss (a file's misses outnumber its hits on a cold start, where
// it stops), in windows the recorded start never read: blocks outside the
// trace and its laid-out chunks, each a fetch while the container waits. At
// 16 KiB, HelloBench's python, flask and gcc at 1 Gbit/s and 20 ms read 2-5%
// more blocks than their traces held and missed the cache 8-24 times a start;
// at 8 KiB, 0-4 extra blocks and 0-3 misses. At 0 the kernel reads a page at a
// time even for the warming's large reads: three to five times the requests.
const DefaultReplayReadahead = 8 << 10

// startupReadahead is the readahead a start's volume gets from its mount until
// its start-up window closes; 0: none (the volume readahead throughout). A
// local store's volumes keep the volume readahead: their chunks cost no fetch,
// and fewer, larger reads start sooner there.
func (n *Node) startupReadahead() int64 {
	switch {
	case n.localStore, n.cfg.StartupReadahead < 0, n.cfg.StartupWindow < 0:
		return 0
	case n.cfg.StartupReadahead == 0:
		return DefaultStartupReadahead
	}
	return n.cfg.StartupReadahead
}

// volumeReadahead is the readahead of a volume's loop device outside a start.
func (n *Node) volumeReadahead() int64 {
	if n.cfg.VolumeReadahead > 0 {
		return n.cfg.VolumeReadahead
	}
	return DefaultVolumeReadahead
}

// beginStartupReadaheadLocked gives x, a start's volume just mounted from
// loop, the start-up readahead until its start-up window closes, when the
// volume readahead comes back. The filesystem was mounted with the volume
// readahead (its mount reads a few blocks, sooner in large reads); a file
// takes its readahead when it is opened, so the start's files read ahead
// little, and files opened after the window as any volume's. x.mu is held.
func (n *Node) beginStartupReadaheadLocked(x *vol, loop *mount.Loop) {
	ra := n.startupReadahead()
	if ra <= 0 {
		return
	}
	if err := loop.SetReadahead(ra); err != nil {
		n.log.Warn("startup-readahead-failed", "volume", x.rec.ID, "err", err)
		return
	}
	window := n.cfg.StartupWindow
	if window == 0 {
		window = prefetch.DefaultStartupWindow
	}
	dev := loop.Path
	x.startupRA = time.AfterFunc(window, func() { n.endStartupReadahead(x, dev) })
}

// endStartupReadahead gives x's device the volume readahead back, if x is
// still mounted from dev (an unmount stops the timer, but may have begun while
// it fired).
func (n *Node) endStartupReadahead(x *vol, dev string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.startupRA == nil || x.dev != dev || x.mnt == "" {
		return
	}
	x.startupRA = nil
	if err := mount.SetDeviceReadahead(dev, n.volumeReadahead()); err != nil {
		n.log.Warn("startup-readahead-end-failed", "volume", x.rec.ID, "err", err)
		return
	}
	n.log.Debug("startup-readahead-ended", "volume", x.rec.ID, "device", dev)
}

// replayReadahead gives x, a start's volume whose start began to replay its
// image's trace (and records none: a start that replays an older trace, or an
// earlier layer's, while it records its own keeps the start-up readahead), the
// replay readahead for the rest of its start-up window, if
// it is still mounted and reading ahead the start-up readahead (the timer that
// ends the window gives the volume readahead back).
func (n *Node) replayReadahead(x *vol) {
	ra := n.cfg.ReplayReadahead
	switch {
	case ra < 0:
		return
	case ra == 0:
		ra = DefaultReplayReadahead
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.startupRA == nil || x.mnt == "" || x.dev == "" {
		return
	}
	if err := mount.SetDeviceReadahead(x.dev, ra); err != nil {
		n.log.Warn("replay-readahead-failed", "volume", x.rec.ID, "err", err)
		return
	}
	n.log.Debug("replay-readahead", "volume", x.rec.ID, "device", x.dev, "bytes", ra)
}
