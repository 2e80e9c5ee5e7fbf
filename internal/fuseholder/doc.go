// Package fuseholder keeps a FUSE connection alive while its server (slackerd)
// is replaced or dies, so that the next server can take it over (issue 14;
// docs/design.md, "Surviving slackerd").
//
// The kernel ends a FUSE connection when the last descriptor of its /dev/fuse
// file closes, not when its server dies. A small holder process (Serve, run as
// `slackerd fuse-holder --socket PATH --timeout DUR`, started by Start) keeps a
// duplicate of that descriptor, the bytes of the kernel's INIT request (sent once
// per connection: a new server must be given them) and the mountpoint. slackerd
// hands them in with Hold; the next slackerd gets them with Take.
//
// # Ownership and the timeout
//
// The client connection that last did Hold or Take is the owner. The holder
// knows its owner lives by its connection: when it closes (the process exited,
// died or was killed) while a session is held, the holder logs fuse-owner-gone
// and waits Options.Timeout for a Take. If none comes, it ends the connection:
// it writes "1" to the connection's fusectl abort file when it found one at Hold
// time (/sys/fs/fuse/connections/N/abort, N the superblock's device number taken
// from mountinfo; skipped when fusectl is not mounted), then closes its
// descriptor, which, being the last, ends the connection anyway: requests
// waiting on it fail instead of blocking forever. It logs fuse-connection-ended
// and Serve returns. Release is the owner's normal stop: the holder closes its
// descriptor and Serve returns. A Take while another client owns the session is
// refused: two servers of one connection would split its requests between two
// processes that each believe they alone write the volumes (a planned hand-over
// is the old slackerd exiting, then the new one taking).
//
// The holder never opens or stats anything on the FUSE mount (a stat there would
// block once nobody serves it): it finds the connection's number in
// /proc/self/mountinfo and opens the abort file when the session is handed in,
// while it is served. The abort file, kept open, is detached by the kernel when
// its connection goes, so a later write cannot abort another connection that
// reused the number. Every descriptor is close-on-exec; received ones are kept
// as *os.File.
//
// One holder runs per socket: Serve holds PATH.lock (flock) while it runs, fails
// with ErrAlreadyRunning if another holder has it or answers on PATH, and
// replaces a stale socket file nothing answers on (never anything that is not a
// socket). The socket file is mode 0600 and removed when Serve returns.
//
// # Protocol, version 1
//
// A unix socket of type SOCK_SEQPACKET. The client sends one request at a time
// and the holder answers each with exactly one message. Every message is one JSON
// object (UTF-8, at most 64 KiB) with a "version" field. A message carries at
// most one descriptor (SCM_RIGHTS): a hold request must carry the /dev/fuse
// descriptor, a take reply with "held": true carries a duplicate of it, no other
// message carries one. "init" is the INIT request's bytes in standard base64 (at
// most 16 KiB decoded); "mountpoint" is an absolute path.
//
//	request                                                   reply
//	{"version":1,"op":"hello"}                                {"version":1,"pid":1234}
//	{"version":1,"op":"hold","init":"…","mountpoint":"/m"}   {"version":1}
//	  + the descriptor
//	{"version":1,"op":"take"}                                 {"version":1,"held":true,"init":"…","mountpoint":"/m"}
//	                                                            + a duplicate of the descriptor
//	                                                          {"version":1}  (nothing held)
//	{"version":1,"op":"release"}                              {"version":1}
//	any request that fails                                    {"version":1,"error":"text"}
//
// A malformed request (not one JSON object, unknown op, wrong descriptor count,
// too long) gets an error reply and the connection stays usable. Dial sends hello
// first.
//
// Compatibility, for a new slackerd talking to an old holder during an upgrade:
// fields a side does not know are ignored, so a later revision may add optional
// fields and ops without a new version (an old holder answers an unknown op with
// an error). A change an old peer would misread takes a new version number; a
// holder answers a request of a version it does not speak with an error reply in
// its own version, naming the version it speaks, and keeps answering the older
// versions it knows.
//
// # Log lines
//
// fuse-holder-started, fuse-session-held (fusectl: the connection's number, or
// fusectl_unavailable: why it cannot be aborted), fuse-session-taken
// (previous_owner gone, connected or self; waited), fuse-session-take-empty,
// fuse-owner-gone, fuse-connection-ended (reason timeout), fuse-session-released,
// fuse-holder-stopped; warnings fuse-connection-abort-failed,
// fuse-client-read-failed, fuse-client-reply-failed, fuse-holder-accept-failed.
package fuseholder
