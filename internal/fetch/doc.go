// Package fetch turns a request for a chunk into reads from the store: bounded
// parallelism, retries with exponential backoff, a deadline per attempt and a bound on
// the total wait, a size and digest check on what arrives, and one clear log line when
// a chunk cannot be had. FetchMany reads several chunks at once, in one ranged
// request per group of neighbours where the store can (store.BatchGetter). It knows
// nothing of volumes or caches: it is the only path from the node to the store's
// data.
package fetch
