package rig

import (
	"sync"

	"github.com/slacker-dev/slacker/internal/filetrace"
)

// FileWatch records the regular files opened on one filesystem, in the order of
// their first open: the recorded run of a workload that eStargz images are
// optimized from (stargz's own analyzer does the same with fanotify). It watches
// the whole filesystem (filetrace.Watch), so a container root mounted once is
// watched through every mount of it, including the bind mount the runtime makes
// inside the container's mount namespace.
type FileWatch struct {
	w    *filetrace.Watcher
	mu   sync.Mutex
	list []string
}

// WatchFiles starts recording the files opened on the filesystem mounted at root.
func WatchFiles(root string) (*FileWatch, error) {
	fw := &FileWatch{}
	w, err := filetrace.Watch(root, func(path string, fd int) {
		fw.mu.Lock()
		fw.list = append(fw.list, path)
		fw.mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	fw.w = w
	return fw, nil
}

// Stop ends the recording and returns the files, as paths in the watched root
// (/usr/bin/python3), first opened first.
func (fw *FileWatch) Stop() ([]string, error) {
	err := fw.w.Stop()
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return fw.list, err
}
