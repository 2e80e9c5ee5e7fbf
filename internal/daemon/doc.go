// Package daemon is slackerd's API server: it serves package api's JSON-over-HTTP
// contract on a unix socket, on top of a node. It translates errors to API error
// kinds and HTTP statuses exactly once (ErrorAnswer, from errdefs.KindOf), logs each
// request as one JSON line, and shuts down cleanly on request (closing the node,
// which unmounts volumes but keeps their records).
package daemon
