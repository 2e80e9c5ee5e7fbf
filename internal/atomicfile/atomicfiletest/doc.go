// Package atomicfiletest wraps an atomicfile.FS for tests, in the style of pebble's
// errorfs: it records every call a write makes, in order, and injects an error or a
// crash at a chosen step. A crash is the process dying right there: the call does not
// happen, no later call does anything (so no cleanup runs), and the files the writer
// had open are closed as the kernel would close them.
//
// It never changes what a call does when no fault is injected, and it must never be
// used outside tests.
package atomicfiletest
