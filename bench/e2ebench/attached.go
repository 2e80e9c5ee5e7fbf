package e2ebench

// AttachedResults is what BenchmarkDeployAttached writes with
// SLACKER_BENCH_RESULTS (docs/bench/attached-*.json): BenchmarkDeployStores's
// format, its systems the ways one image is deployed (Attached*), its metrics
// BenchmarkDeployStores's but for publish_s (none) and fetched_bytes, which is
// what the node moved: from the store for the Slacker systems, the compressed
// layers for overlayfs.
type AttachedResults = StoresResults

// The systems of BenchmarkDeployAttached.
const (
	AttachedOrdinary = "ordinary-name" // the ordinary name, its descriptor attached; the Slacker snapshotter
	AttachedSlacker  = "slacker-name"  // the dedicated Slacker name; the Slacker snapshotter
	AttachedStock    = "overlayfs"     // the ordinary name on stock containerd
)

// ReadAttached reads a results file of BenchmarkDeployAttached.
func ReadAttached(path string) (*AttachedResults, error) { return ReadStores(path) }
