// Package daemon is slackerd's API server: it serves package api's JSON-over-HTTP
// contract on a unix socket, on top of a node. It translates node errors to API error
// kinds exactly once, logs each request as one JSON line, and shuts down cleanly on
// request (closing the node, which unmounts volumes but keeps their records).
package daemon
