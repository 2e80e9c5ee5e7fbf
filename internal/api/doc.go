// Package api is the wire contract between the slacker CLI (and other clients) and
// slackerd: JSON over HTTP on a unix socket. It holds the request and response types
// and a Client; the server side lives in package daemon.
//
// Errors travel as {"error": "...", "kind": "not_found"|"exists"|...|"internal"}, the
// kind being the error's errdefs kind by name, with a matching HTTP status (package
// daemon; docs/operating.md has the table). The Client turns them back into the
// kind, with the daemon's message, so a caller writes errors.Is(err,
// errdefs.ErrNotFound) whichever side of the socket the error came from.
package api
