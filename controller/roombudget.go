package controller

import (
	"errors"
	"io"
	"sync"
)

// roomBudget is the room one collection round may write under a home's
// runs/: the free space past collectFreeMargin, read once a round (by the
// first collection that needs it) and drawn from by every attempt of every
// node, in a stream or file by file, as its files are written (writeCapped).
// Nodes are collected side by side (onNodes): each attempt counting from
// its own reading of the free space, N of them wrote up to N times the
// room the disk has.
//
// An attempt that says what it will write (a stream's head, a local
// output/'s listing) claims that much at once, a share its files then draw
// from: drawn chunk by chunk only, two attempts written side by side could
// each get part of the room and neither all it needs (both tried again,
// and again).
type roomBudget struct {
	once   sync.Once
	read   func() (int64, error) // the free space under runs/; called once (none for a share)
	free   int64                 // what read said
	err    error                 // or why it could not
	parent *roomBudget           // a share's round: drawn from past the share

	mu   sync.Mutex // guards left
	left int64      // the room not drawn yet
}

// errRoomSpent is a draw on a roomBudget that has less left than it asks:
// the attempt stops as one with not enough free space, and is tried again.
var errRoomSpent = errors.New("the collection round's room is spent")

func newRoomBudget(read func() (int64, error)) *roomBudget {
	return &roomBudget{read: read}
}

// figure returns the free space the round started from, reading it the
// first time it is asked.
func (b *roomBudget) figure() (int64, error) {
	b.once.Do(func() {
		if b.read == nil {
			return // a share: left is set
		}
		b.free, b.err = b.read()
		if b.err == nil {
			b.mu.Lock()
			b.left = max(b.free-collectFreeMargin, 0)
			b.mu.Unlock()
		}
	})
	return b.free, b.err
}

// remaining is the room b may still draw: for a share, its own and what
// its round has left.
func (b *roomBudget) remaining() int64 {
	b.figure()
	b.mu.Lock()
	left := b.left
	b.mu.Unlock()
	if b.parent != nil {
		left += b.parent.remaining()
	}
	return left
}

// draw takes n bytes of room, all or none: false when less is left (or
// the free space could not be read). A share draws what it lacks from its
// round (a lock taken from share to round, never the other way).
func (b *roomBudget) draw(n int64) bool {
	if _, err := b.figure(); err != nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if n < 0 {
		return false
	}
	if n > b.left {
		if b.parent == nil || !b.parent.draw(n-b.left) {
			return false
		}
		b.left = n
	}
	b.left -= n
	return true
}

// claim takes n bytes of room at once (all or none) as a share of b, which
// one attempt's files draw from, and past it from b.
func (b *roomBudget) claim(n int64) (*roomBudget, bool) {
	if !b.draw(n) {
		return nil, false
	}
	return &roomBudget{parent: b, left: n}, true
}

// release gives a share's room not drawn back to its round (a round's
// own is kept).
func (b *roomBudget) release() {
	if b.parent == nil {
		return
	}
	b.mu.Lock()
	left := b.left
	b.left = 0
	b.mu.Unlock()
	b.parent.give(left)
}

// give returns n bytes drawn and not written (or written and removed).
func (b *roomBudget) give(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.left += max(n, 0)
}

// roomWriter writes to w each chunk it could first draw from room: past
// the room, errRoomSpent, nothing of the chunk written. A chunk is what
// one Write brings (a copy's buffer, 32 KiB): no lock is held while it is
// written.
type roomWriter struct {
	w     io.Writer
	room  *roomBudget
	drawn int64 // what was drawn and written
}

func (rw *roomWriter) Write(p []byte) (int, error) {
	if !rw.room.draw(int64(len(p))) {
		return 0, errRoomSpent
	}
	n, err := rw.w.Write(p)
	rw.room.give(int64(len(p) - n))
	rw.drawn += int64(n)
	return n, err
}
