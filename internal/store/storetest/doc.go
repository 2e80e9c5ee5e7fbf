// Package storetest is the test suite every store.Store backend runs: the written
// contract of package store, checked. A backend's test calls Run with a Harness that
// makes fresh, empty stores (and, where the backend can, corrupts a stored object so
// the suite can check that corruption is detected rather than served).
package storetest
