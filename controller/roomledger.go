package controller

import (
	"errors"
	"fmt"
	"io"
	"sync"
)

// roomLedger is the controller's account of the room its collections may
// write under the home's runs/ (the file system the database lives on):
// the free space past collectFreeMargin, less what collections still hold
// (claimed and not written yet), whichever round began them. Nodes are
// collected side by side (onNodes), and a slow node's collection outlives
// the round that began it (onNodes stops waiting at call_timeout): each
// attempt counting from its own reading of the free space, or each round
// from its own, N of them wrote up to N times the room the disk has.
//
// An attempt that says what it will write (a stream's head, a local
// output/'s listing) claims that much at once; its files draw from the
// claim, then past it from the room. Drawn chunk by chunk only, two
// attempts written side by side could each get part of the room and
// neither all it needs. What an attempt did not write is given back as
// soon as it ends or fails.
type roomLedger struct {
	read func() (int64, error) // the free space under runs/

	// mu guards free, avail, held and holders, and the claims' left,
	// drawing and written. refresh holds it across read: a byte being
	// written is held until it is written, so none is counted free twice.
	mu      sync.Mutex
	free    int64 // the last reading of the free space (0: not read)
	avail   int64 // the room neither held nor written since the last reading
	held    int64 // claimed or being written, not written yet
	holders map[*roomClaim]bool
}

// errRoomSpent is a claim or a draw the room cannot give even without
// what other collections hold: the attempt stops as one with not enough
// free space, and the try counts.
var errRoomSpent = errors.New("the controller's room for collections is spent")

// errRoomBusy is a claim or a draw refused only because other
// collections hold the room it needs (roomWait.err says how much): the
// attempt waits for a later round, no try counted.
var errRoomBusy = errors.New("waiting for room")

// roomWait is what other collections hold when an attempt needs room.
type roomWait struct {
	need   int64 // what the attempt asked for
	claims int   // the other collections holding room
	held   int64 // what they hold
}

// err is the refusal of an attempt waiting for room: errRoomBusy.
func (w roomWait) err() error {
	them := fmt.Sprintf("%d collections in flight hold", w.claims)
	if w.claims == 1 {
		them = "1 collection in flight holds"
	}
	return fmt.Errorf("%w: %s %s of the controller's free space, and this one needs %s of it; it is tried again once they end, no try counted",
		errRoomBusy, them, mib(w.held), mib(w.need))
}

func newRoomLedger(read func() (int64, error)) *roomLedger {
	return &roomLedger{read: read, holders: map[*roomClaim]bool{}}
}

// roomVerdict is decideRoom's answer.
type roomVerdict int

const (
	roomGranted roomVerdict = iota
	roomBusy                // it would fit without what others hold
	roomFull                // it would not fit even then
)

// decideRoom decides a claim of need bytes when avail is left and other
// collections hold others.
func decideRoom(need, avail, others int64) roomVerdict {
	switch {
	case need < 0:
		return roomFull
	case need <= avail:
		return roomGranted
	case need <= avail+max(others, 0):
		return roomBusy
	}
	return roomFull
}

// refresh reads the free space and makes the room what it leaves past the
// margin and what collections hold; it returns what it read.
func (l *roomLedger) refresh() (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	free, err := l.read()
	if err != nil {
		l.avail, l.free = 0, 0
		return 0, err
	}
	l.free = free
	l.avail = max(free-collectFreeMargin-l.held, 0)
	return free, nil
}

// take takes n bytes of the room for c (l.mu held).
func (l *roomLedger) take(c *roomClaim, n int64) error {
	others := l.held - c.left - c.drawing
	switch decideRoom(n, l.avail, others) {
	case roomBusy:
		return roomWait{need: n, claims: l.holding(c), held: others}.err()
	case roomFull:
		return errRoomSpent
	}
	l.avail -= n
	l.held += n
	l.holders[c] = true
	return nil
}

// holding counts the claims other than c that hold room (l.mu held).
func (l *roomLedger) holding(c *roomClaim) int {
	n := 0
	for h := range l.holders {
		if h != c && h.left+h.drawing > 0 {
			n++
		}
	}
	return n
}

// roomRound is one collection round's view of the ledger: the free space
// is read once a round, by the first attempt that needs it.
type roomRound struct {
	ledger *roomLedger
	once   sync.Once
	free   int64
	err    error
}

func (l *roomLedger) round() *roomRound { return &roomRound{ledger: l} }

// figure returns the free space the round read, reading it the first
// time it is asked.
func (r *roomRound) figure() (int64, error) {
	r.once.Do(func() { r.free, r.err = r.ledger.refresh() })
	return r.free, r.err
}

// open is an attempt's claim on the round's ledger, holding nothing yet;
// release it once the attempt ends.
func (r *roomRound) open() *roomClaim { return &roomClaim{ledger: r.ledger} }

// roomClaim is one attempt's account in the ledger: what it claimed and
// has not drawn (left), what it drew and is writing (drawing), and what it
// wrote and has not given back (written: in its staging directory until
// placed).
type roomClaim struct {
	ledger                 *roomLedger
	left, drawing, written int64 // guarded by ledger.mu
	claimed                bool  // claim was called: the attempt announced what it sends (guarded by ledger.mu)
}

// claim claims n bytes more, all or none: errRoomSpent, or errRoomBusy
// when only what other collections hold is in the way.
func (c *roomClaim) claim(n int64) error {
	l := c.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.take(c, n); err != nil {
		return err
	}
	c.left += n
	c.claimed = true
	return nil
}

// draw takes n bytes about to be written: from the claim, and past it
// from the room (refused as claim is); wrote says how it went.
func (c *roomClaim) draw(n int64) error {
	l := c.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	if extra := n - c.left; extra > 0 {
		if err := l.take(c, extra); err != nil {
			if c.claimed && errors.Is(err, errRoomBusy) {
				// Past what it announced: the node's fault, not a wait.
				return fmt.Errorf("%w: the node sent more than it announced, and others hold the rest", errRoomSpent)
			}
			return err
		}
		c.left += extra
	}
	c.left -= n
	c.drawing += n
	return nil
}

// wrote ends a draw of n bytes of which written were written: those are
// on the disk now, the rest stays claimed.
func (c *roomClaim) wrote(n, written int64) {
	l := c.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	c.drawing -= n
	l.held -= written
	c.written += written
	c.left += n - written
	if c.left+c.drawing == 0 {
		delete(l.holders, c)
	}
}

// release gives back what the claim holds and did not write; the claim
// may go on drawing from the room.
func (c *roomClaim) release() {
	l := c.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held -= c.left
	l.avail += c.left
	c.left = 0
	if c.drawing == 0 {
		delete(l.holders, c)
	}
}

// freed gives back n bytes written and removed since.
func (c *roomClaim) freed(n int64) {
	l := c.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	n = min(max(n, 0), c.written)
	l.avail += n
	c.written -= n
}

// discard gives back what the claim wrote and did not give back yet, as
// its staging directory is removed without being placed: a refused or
// failed attempt's files no longer take the room of the attempts after it.
func (c *roomClaim) discard() {
	l := c.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	l.avail += c.written
	c.written = 0
}

// remaining is what the claim may still draw: its own and the room.
func (c *roomClaim) remaining() int64 {
	l := c.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	return c.left + l.avail
}

// view is the disk's free space as last read, and what the other
// collections hold of it now: what a refusal tells the operator.
func (c *roomClaim) view() (free, others int64) {
	l := c.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.free, l.held - c.left - c.drawing
}

// others is what the other collections hold now, as a roomWait of need.
func (c *roomClaim) others(need int64) roomWait {
	l := c.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	return roomWait{need: need, claims: l.holding(c), held: l.held - c.left - c.drawing}
}

// roomWriter writes to w each chunk it could first draw from its claim:
// past the room, the claim's error, nothing of the chunk written. A chunk
// is what one Write brings (a copy's buffer, 32 KiB): no lock is held
// while it is written.
type roomWriter struct {
	w     io.Writer
	room  *roomClaim
	drawn int64 // what was drawn and written
}

func (rw *roomWriter) Write(p []byte) (int, error) {
	if err := rw.room.draw(int64(len(p))); err != nil {
		return 0, err
	}
	n, err := rw.w.Write(p)
	rw.room.wrote(int64(len(p)), int64(n))
	rw.drawn += int64(n)
	return n, err
}
