package cache

import "container/list"

// lru is a list of keys, most recent at the front, with their sizes.
type lru struct {
	l     *list.List
	bytes int64
}

type lruItem struct {
	key  string
	size int64
	seg  *lru
	el   *list.Element
}

func newLRU() *lru { return &lru{l: list.New()} }

func (s *lru) pushFront(it *lruItem) {
	it.seg = s
	it.el = s.l.PushFront(it)
	s.bytes += it.size
}

func (s *lru) remove(it *lruItem) {
	s.l.Remove(it.el)
	s.bytes -= it.size
	it.seg, it.el = nil, nil
}

func (s *lru) back() *lruItem {
	if e := s.l.Back(); e != nil {
		return e.Value.(*lruItem)
	}
	return nil
}
