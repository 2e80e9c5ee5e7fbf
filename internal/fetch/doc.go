// Package fetch turns a request for a chunk into reads from the store: bounded
// parallelism, retries with exponential backoff, a deadline per attempt and a bound on
// the total wait, a size and digest check on what arrives, and one clear log line when
// a chunk cannot be had. One retry policy (retry.go) decides for every call
// the node makes to the store, fetches and the bounded uploads and checks alike: what
// cannot succeed is final, a damaged transfer is tried a few times, an outage until
// the bound. FetchMany reads several chunks at once, in one ranged
// request per group of neighbours where the store can (store.BatchGetter). It knows
// nothing of volumes or caches: it is the only path from the node to the store's
// data.
package fetch
