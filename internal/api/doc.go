// Package api is the wire contract between the slacker CLI (and other clients) and
// slackerd: JSON over HTTP on a unix socket. It holds the request and response types
// and a Client; the server side lives in package daemon.
//
// Errors travel as {"error": "...", "kind": "not_found"|"exists"|"invalid"|"busy"|
// "unavailable"|"internal"} with a matching HTTP status, and the Client maps them back
// to the sentinels below, so a caller writes errors.Is(err, api.ErrNotFound).
package api
