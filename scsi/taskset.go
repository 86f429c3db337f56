package scsi

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// task is one command in a logical unit's task set (SAM-5 §8). It also
// carries the command context handed to the opcode handlers, so a command
// costs one allocation.
type task struct {
	ts      *taskSet
	sess    *session
	knownLU bool // the session had reached the LU before this command
	tag     uint64
	attr    TaskAttr
	seq     uint64

	// Links of the task set list (oldest first) or, before enter, of the
	// pending list; guarded by ts.mu.
	prev, next *task
	// State guarded by ts.mu.
	enabled  bool // left the dormant state and may run
	finished bool // left the task set
	aborted  bool
	// reportAborted: the abort came from another nexus with TAS=1, so the
	// command completes with TASK ABORTED status instead of silently.
	reportAborted bool
	// started is when an Observer saw the command start (Observer.Started),
	// as Target.elapsed, when it was left dormant (session.start).
	started time.Duration

	cmdCtx
}

// taskSet orders the tasks of one logical unit by task attribute
// (SAM-5 §8.6): a SIMPLE task waits for older ORDERED and HEAD OF QUEUE
// tasks, an ORDERED task for every older task, and a HEAD OF QUEUE task
// runs at once. With the control mode page's TST=001b each I_T nexus has its
// own task set, so only tasks of the same nexus are considered.
type taskSet struct {
	mu         sync.Mutex
	cond       sync.Cond
	head, tail *task
	// pending lists the tasks whose tag is registered but that have not
	// entered the task set yet (still in the unit attention, CDB and
	// admission checks). Task management functions reach them here, so a
	// command cannot slip past an ABORT TASK SET, CLEAR TASK SET, LOGICAL
	// UNIT RESET or I_T NEXUS RESET that completes before it enters.
	phead, ptail *task
	seq          uint64
	n            int // tasks in the set
	nOrdHoQ      int // ORDERED or HEAD OF QUEUE tasks in the set
	// ordered mirrors nOrdHoQ for readers without ts.mu (Submit's inline
	// decision).
	ordered atomic.Int32
	waiting int // tasks blocked in enter
	// nexusView counts, per I_T nexus (session.key), the commands whose
	// data-in a fabric still sends from the backstore's memory
	// (Command.ViewIn); a nexus with none has no entry. ORDERED tasks wait
	// until it is empty, or until their own nexus has none when each nexus
	// has its own task set.
	nexusView map[string]int
	perNexus  bool
}

func (ts *taskSet) init() { ts.cond.L = &ts.mu }

// blockedLocked reports whether t may not be enabled yet.
func (ts *taskSet) blockedLocked(t *task) bool {
	switch t.attr {
	case TaskHeadOfQueue:
		return false
	case TaskOrdered:
		if ts.perNexus && ts.nexusView[t.sess.key] > 0 || !ts.perNexus && len(ts.nexusView) > 0 {
			return true
		}
		for o := ts.head; o != nil && o != t; o = o.next {
			if !ts.perNexus || o.sess.key == t.sess.key {
				return true
			}
		}
		return false
	default: // SIMPLE, ACA
		if ts.nOrdHoQ == 0 {
			return false
		}
		for o := ts.head; o != nil; o = o.next {
			if o == t {
				continue
			}
			if ts.perNexus && o.sess.key != t.sess.key {
				continue
			}
			if o.attr == TaskHeadOfQueue || (o.attr == TaskOrdered && o.seq < t.seq) {
				return true
			}
		}
		return false
	}
}

// holdView counts one more command whose data-in is sent from the
// backstore's memory for the I_T nexus named key.
func (ts *taskSet) holdView(key string) {
	ts.mu.Lock()
	if ts.nexusView == nil {
		ts.nexusView = make(map[string]int)
	}
	ts.nexusView[key]++
	ts.mu.Unlock()
}

// releaseView ends a holdView(key) and wakes the waiting tasks when the
// nexus's count reaches 0.
func (ts *taskSet) releaseView(key string) {
	ts.mu.Lock()
	n := ts.nexusView[key] - 1
	if n == 0 {
		delete(ts.nexusView, key)
		if ts.waiting > 0 {
			ts.cond.Broadcast()
		}
	} else {
		ts.nexusView[key] = n
	}
	ts.mu.Unlock()
}

// linkBack appends t to the list (*head, *tail).
func linkBack(head, tail **task, t *task) {
	t.prev, t.next = *tail, nil
	if *tail != nil {
		(*tail).next = t
	}
	*tail = t
	if *head == nil {
		*head = t
	}
}

// unlink removes t from the list (*head, *tail).
func unlink(head, tail **task, t *task) {
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		*head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		*tail = t.prev
	}
	t.prev, t.next = nil, nil
}

// register puts t on the pending list. Called with the session's tag
// registration, so every task a TMF can name is also one abortMatching
// sees.
func (ts *taskSet) register(t *task) {
	ts.mu.Lock()
	linkBack(&ts.phead, &ts.ptail, t)
	ts.mu.Unlock()
}

// unregister ends a task that never entered the task set (it failed its
// checks): it leaves the pending list and counts as finished. It returns
// whether t was aborted meanwhile and whether that abort is reported as
// TASK ABORTED.
func (ts *taskSet) unregister(t *task) (aborted, report bool) {
	ts.mu.Lock()
	unlink(&ts.phead, &ts.ptail, t)
	t.finished = true
	aborted, report = t.aborted, t.reportAborted
	ts.cond.Broadcast()
	ts.mu.Unlock()
	return aborted, report
}

// enter moves t from the pending list into the task set and waits until it
// is enabled. enabled is false if t was aborted (by a TMF or ctx) before
// or while dormant; t stays in the set until leave either way. With
// mayWait false (a goroutine that must not block: Session.Submit's inline
// run) a t that would wait is left dormant instead (dormant true), for
// await to finish on another goroutine.
func (ts *taskSet) enter(ctx context.Context, t *task, mayWait bool) (enabled, dormant bool) {
	ts.mu.Lock()
	unlink(&ts.phead, &ts.ptail, t)
	ts.seq++
	t.seq = ts.seq
	// t.ts was set before t became visible to TMFs (session.tags), which
	// read it without ts.mu; it must not be written here.
	if t.attr == TaskHeadOfQueue {
		// Placed at the head of the task set (SAM-5 §8.6.4).
		t.next = ts.head
		if ts.head != nil {
			ts.head.prev = t
		}
		ts.head = t
		if ts.tail == nil {
			ts.tail = t
		}
	} else {
		linkBack(&ts.head, &ts.tail, t)
	}
	ts.n++
	if t.attr == TaskOrdered || t.attr == TaskHeadOfQueue {
		ts.nOrdHoQ++
		ts.ordered.Store(int32(ts.nOrdHoQ))
	}
	if !ts.blockedLocked(t) || t.aborted {
		t.enabled = !t.aborted
		ts.mu.Unlock()
		return t.enabled, false
	}
	if !mayWait {
		// Dormant in the task set, as a waiting task is; await waits.
		ts.mu.Unlock()
		return false, true
	}
	return ts.awaitLocked(ctx, t), false
}

// await waits, on a goroutine that may block, until the task that enter
// left dormant (mayWait false) is enabled or aborted, and reports whether
// it may run.
func (ts *taskSet) await(ctx context.Context, t *task) bool {
	ts.mu.Lock()
	return ts.awaitLocked(ctx, t)
}

// awaitLocked is await with ts.mu held; it unlocks ts.mu.
func (ts *taskSet) awaitLocked(ctx context.Context, t *task) bool {
	stop := context.AfterFunc(ctx, func() {
		ts.mu.Lock()
		t.aborted = true
		ts.cond.Broadcast()
		ts.mu.Unlock()
	})
	ts.waiting++
	for ts.blockedLocked(t) && !t.aborted {
		ts.cond.Wait()
	}
	ts.waiting--
	t.enabled = !t.aborted
	en := t.enabled
	ts.mu.Unlock()
	stop()
	return en
}

// leave removes t from the task set and wakes waiters. It returns whether t
// was aborted and whether the abort must be reported as TASK ABORTED.
func (ts *taskSet) leave(t *task) (aborted, report bool) {
	ts.mu.Lock()
	unlink(&ts.head, &ts.tail, t)
	ts.n--
	if t.attr == TaskOrdered || t.attr == TaskHeadOfQueue {
		ts.nOrdHoQ--
		ts.ordered.Store(int32(ts.nOrdHoQ))
	}
	t.finished = true
	aborted, report = t.aborted, t.reportAborted
	ts.cond.Broadcast()
	ts.mu.Unlock()
	return aborted, report
}

// abort marks t aborted; report selects TASK ABORTED status (TAS=1, abort
// caused by another nexus) over a silent abort. A dormant task wakes up.
func (ts *taskSet) abort(t *task, report bool) {
	ts.mu.Lock()
	if !t.finished && !t.aborted {
		t.aborted = true
		t.reportAborted = report
		ts.cond.Broadcast()
	}
	ts.mu.Unlock()
}

// waitDone blocks until t has left the task set or ctx ends.
func (ts *taskSet) waitDone(ctx context.Context, t *task) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t.finished {
		return true
	}
	stop := context.AfterFunc(ctx, func() {
		ts.mu.Lock()
		ts.cond.Broadcast()
		ts.mu.Unlock()
	})
	defer stop()
	for !t.finished && ctx.Err() == nil {
		ts.cond.Wait()
	}
	return t.finished
}

// abortMatching aborts every task, in the task set or pending, for which
// match returns true and returns them. report(t) chooses TASK ABORTED versus
// silent for each.
func (ts *taskSet) abortMatching(match func(*task) bool, report func(*task) bool) []*task {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var out []*task
	for _, l := range [2]*task{ts.head, ts.phead} {
		for t := l; t != nil; t = t.next {
			if match(t) && !t.aborted {
				t.aborted = true
				t.reportAborted = report(t)
				out = append(out, t)
			}
		}
	}
	if len(out) > 0 {
		ts.cond.Broadcast()
	}
	return out
}

// anyLive reports whether a task, in the task set or pending, matches and
// is neither aborted nor finished (QUERY TASK SET).
func (ts *taskSet) anyLive(match func(*task) bool) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, l := range [2]*task{ts.head, ts.phead} {
		for t := l; t != nil; t = t.next {
			if match(t) && !t.aborted && !t.finished {
				return true
			}
		}
	}
	return false
}

// live reports whether t is neither aborted nor finished (QUERY TASK).
func (ts *taskSet) live(t *task) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return !t.aborted && !t.finished
}
