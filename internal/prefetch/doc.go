// Package prefetch owns reading a volume's base snapshot and fetching ahead of its
// readers. It sits on the read path between the volume and the chunk cache:
//
//	fusefs -> volume (copy-on-write) -> prefetch -> cache -> fetch -> store
//
// A volume reads the blocks it has not written through its Reader: the Reader looks
// the range up in the base's block map, reads the chunks through the node's cache
// (in parallel when a read spans several), and accounts for what the volume read and
// what its reads moved from the store. On the way it decides what to fetch ahead:
//
//   - sequential readahead: when reads follow one another through the image, the
//     chunks that come next are loaded in the background, in a window that doubles
//     with each read in sequence up to MaxReadahead; a random reader gets nothing
//     extra;
//   - start-up traces (package trace): a container root records the chunks it reads
//     in its first StartupWindow, in first-read order, and writes them to the store
//     as its image's trace if the store has none; a container root whose image has a
//     trace replays it, its chunks loaded ahead in trace order, at most
//     ReplayParallel loads in flight (so that what start-up reads first arrives
//     first), within ReplayBudget, and readahead pauses meanwhile (the trace
//     already knows what start-up reads). A pull may have the trace fetched
//     ahead (FetchTraceAhead), so that the start's lookup finds it there;
//   - first starts: a start that found no trace to replay loads the chunks of
//     the FirstStartAhead bytes after each of its reads, each once, while the
//     store's round trip (Options.StoreRoundTrip) is FirstStartMinRoundTrip or
//     more: what a first start reads next mostly lies near what it read. Under
//     the same gate it also loads, as it begins, the ranges
//     Options.FirstStartRanges names (whatever program it runs: a filesystem's
//     inode tables in use, which the node reads with package ext4meta),
//     ReplayParallel at once.
//
// Background loads run on the Engine, one per node, which bounds how many run at
// once (a load that finds every slot busy is not queued: the caller asks again at
// its next read) and attributes the bytes each load fetched to the volume it was made
// for. Nothing here changes what a read returns: fetching ahead only warms the cache,
// and every byte still comes from the cache, verified.
//
// This package never writes a volume, never holds chunk data of its own (the cache
// does) and never talks to the store except for start-up trace records.
package prefetch
