"""A linearizability checker for histories of catalog requests.

A history is a list of `Op`s: what was asked, when the request started and ended, and what
came back. `check` searches for one sequential order of the operations, consistent with
real time (an operation that ended before another started comes first), that explains
every answer, using the model of the catalog below. The search is Wing & Gong's, with
Lowe's memoisation of (operations done, state) pairs.

- An operation whose outcome is unknown (a 503, a timeout, a connection lost after the
  request was sent, a gateway killed) has no end: it may take effect at any point after it
  started, or never.
- A listing is not a snapshot (it reads the store a page at a time), so it is checked as
  two points, a start and an end, both within the request: every name it lists existed at
  some moment between them, and every name that existed throughout them is listed (within
  the page's range of names).
- Names are ordered as their records' keys are in the store (`list_order`), the order
  pages follow: the same as the names' own order except where a name continues a shorter
  one with `-` or an escaped character.
- A paged walk (ListTables with a limit, following page tokens) is a sequence of such
  requests, each checked over its own time span and its own range: after its token, up to
  its last name when it hands out a token (which must be that last name), to the end when
  it does not. The walk as a whole is no snapshot: a table renamed from ahead of the walk to
  behind it between two pages is listed by neither, one renamed the other way by both. But
  the ranges of a walk's pages cover every name, so a name that existed throughout the walk
  is listed by some page.

The model: a set of namespaces (all directly under the root) and a map of tables
`(namespace, name) -> location` (a location is `None` when the create's answer was lost;
the first read of the table fixes it).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

# The spec's error codes the workload may see.
NS_NOT_FOUND, NS_EXISTS, NS_NOT_EMPTY, TABLE_NOT_FOUND, TABLE_EXISTS = 1, 2, 3, 4, 5
INVALID, CONFLICT, UNAVAILABLE = 13, 14, 17


@dataclass
class Op:
    id: int
    proc: int
    kind: str
    args: tuple
    call: float
    ret: float | None  # None: the outcome is unknown
    status: int | None = None
    code: int | None = None
    body: dict = field(default_factory=dict)

    def __str__(self) -> str:
        end = "?" if self.ret is None else f"{self.ret:.4f}"
        answer = "unknown" if self.ret is None else f"{self.status} code={self.code} {short(self.body)}"
        return f"#{self.id} p{self.proc} [{self.call:.4f}, {end}] {self.kind}{self.args} -> {answer}"


def short(body: dict) -> str:
    keep = {k: body[k] for k in ("location", "tables", "namespaces", "page_token", "request_id") if k in body}
    return str(keep) if keep else ""


class State:
    """An immutable model state: namespaces, tables, folders whose dataset a drop deleted,
    and the open listings' accumulators."""

    __slots__ = ("namespaces", "tables", "dead", "lists", "_hash", "_names")

    def __init__(self, namespaces: frozenset, tables: tuple, lists: tuple = (), dead: frozenset = frozenset(),
                 _names: dict | None = None):
        self.namespaces = namespaces
        self.tables = tables  # sorted tuple of (ns, name, location)
        self.dead = dead
        self.lists = lists  # sorted tuple of (op id, target, ever, always)
        self._hash = hash((namespaces, tables, lists, dead))
        # The names in each namespace, worked out once for these tables (shared by the
        # states that differ only in their listings).
        self._names = {} if _names is None else _names

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return (self.namespaces, self.tables, self.lists, self.dead) == (
            other.namespaces,
            other.tables,
            other.lists,
            other.dead,
        )

    def table(self, ns: str, name: str):
        for t in self.tables:
            if t[0] == ns and t[1] == name:
                return t
        return None

    def names_in(self, ns: str) -> frozenset:
        names = self._names.get(ns)
        if names is None:
            names = self._names[ns] = frozenset(t[1] for t in self.tables if t[0] == ns)
        return names

    def locations(self) -> set:
        return {t[2] for t in self.tables}

    def with_tables(self, tables) -> "State":
        ordered = tuple(sorted(tables, key=lambda t: (t[0], t[1], t[2] or "")))
        return State(self.namespaces, ordered, self.lists, self.dead)

    def with_namespaces(self, namespaces) -> "State":
        return State(frozenset(namespaces), self.tables, self.lists, self.dead)

    def with_lists(self, lists) -> "State":
        return State(self.namespaces, self.tables, tuple(sorted(lists, key=lambda l: l[0])), self.dead, self._names)

    def with_dead(self, folder) -> "State":
        return State(self.namespaces, self.tables, self.lists, self.dead | {folder}, self._names)


def present(state: State, target) -> frozenset:
    """What a listing of `target` sees in `state`: table names of a namespace, or (for the
    root, `None`) the namespaces."""
    if target is None:
        return state.namespaces
    return state.names_in(target)


def after_change(state: State) -> State:
    """Folds a change into every open listing: `ever` gains what is there now, `always`
    keeps only what is still there."""
    if not state.lists:
        return state
    lists = []
    for lid, target, ever, always in state.lists:
        now = present(state, target)
        lists.append((lid, target, ever | now, always & now))
    return state.with_lists(lists)


def step(state: State, op: Op, phase: str | None = None) -> list[State]:
    """The states `op` may lead to from `state` given its answer; empty when the answer
    cannot be explained from `state`. Unknown outcomes lead to the state where the op took
    effect (not taking effect is the op never being placed)."""
    k, a, known = op.kind, op.args, op.ret is not None
    ok = known and op.status == 200
    code = op.code

    def unknown_or(pred_ok, apply):
        if not known:
            return [after_change(apply())] if pred_ok else []
        return None

    if k == "create_ns":
        (ns,) = a
        there = ns in state.namespaces
        r = unknown_or(not there, lambda: state.with_namespaces(state.namespaces | {ns}))
        if r is not None:
            return r
        if ok:
            return [after_change(state.with_namespaces(state.namespaces | {ns}))] if not there else []
        if code == NS_EXISTS:
            return [state] if there else []
        return bad(op)
    if k == "drop_ns":
        (ns,) = a
        there, empty = ns in state.namespaces, not state.names_in(ns)
        r = unknown_or(there and empty, lambda: state.with_namespaces(state.namespaces - {ns}))
        if r is not None:
            return r
        if ok:
            return [after_change(state.with_namespaces(state.namespaces - {ns}))] if there and empty else []
        if code == NS_NOT_FOUND:
            return [state] if not there else []
        if code == NS_NOT_EMPTY:
            return [state] if there and not empty else []
        return bad(op)
    if k in ("declare", "register"):
        ns, name = a[0], a[1]
        folder = a[2] if k == "register" else None
        ns_there, t = ns in state.namespaces, state.table(ns, name)
        free = folder is None or folder not in state.locations()
        # A register refuses a folder whose dataset a drop deleted, once the namespace
        # exists and the name is free.
        dead = folder is not None and folder in state.dead
        can = ns_there and t is None and free and not dead

        def created(location):
            return after_change(state.with_tables(state.tables + ((ns, name, location),)))

        r = unknown_or(can, lambda: created(folder))
        if r is not None:
            return r
        if ok:
            location = op.body.get("location")
            if folder is not None and location != folder:
                return []
            return [created(location)] if can else []
        if code == INVALID and folder is not None:
            return [state] if ns_there and t is None and (dead or not free) else []
        if code == TABLE_EXISTS:
            return [state] if t is not None else []
        if code == NS_NOT_FOUND:
            return [state] if not ns_there else []
        return bad(op)
    if k in ("drop", "deregister"):
        ns, name = a
        t = state.table(ns, name)

        def removed():
            rest = state.with_tables([x for x in state.tables if x is not t])
            return rest.with_dead(t[2]) if k == "drop" and t[2] is not None else rest

        r = unknown_or(t is not None, removed)
        if r is not None:
            return r
        if ok:
            if t is None:
                return []
            if t[2] is not None and op.body.get("location") not in (None, t[2]):
                return []
            return [after_change(removed())]
        if code == TABLE_NOT_FOUND:
            return [state] if t is None and ns in state.namespaces else []
        if code == NS_NOT_FOUND:
            return [state] if ns not in state.namespaces else []
        return bad(op)
    if k == "rename":
        ns, name, ns2, name2 = a
        t, t2 = state.table(ns, name), state.table(ns2, name2)
        can = t is not None and t2 is None and ns2 in state.namespaces

        def moved():
            rest = [x for x in state.tables if x is not t]
            return after_change(state.with_tables(rest + [(ns2, name2, t[2])]))

        r = unknown_or(can, moved)
        if r is not None:
            return r
        if ok:
            return [moved()] if can else []
        if code == TABLE_NOT_FOUND:
            return [state] if t is None and ns in state.namespaces else []
        if code == NS_NOT_FOUND:
            return [state] if ns not in state.namespaces or (t is not None and ns2 not in state.namespaces) else []
        if code == TABLE_EXISTS:
            return [state] if t is not None and t2 is not None else []
        return bad(op)
    if k in ("describe", "exists"):
        if not known:
            return []
        ns, name = a
        t = state.table(ns, name)
        if ok:
            if t is None:
                return []
            location = op.body.get("location") if k == "describe" else None
            if location is None or t[2] == location:
                return [state]
            if t[2] is None:  # the first read fixes a location whose create answer was lost
                fixed = [x for x in state.tables if x is not t] + [(ns, name, location)]
                return [state.with_tables(fixed)]
            return []
        if code == TABLE_NOT_FOUND:
            return [state] if t is None and ns in state.namespaces else []
        if code == NS_NOT_FOUND:
            return [state] if ns not in state.namespaces else []
        return bad(op)
    if k == "describe_ns":
        if not known:
            return []
        (ns,) = a
        if ok:
            return [state] if ns in state.namespaces else []
        if code == NS_NOT_FOUND:
            return [state] if ns not in state.namespaces else []
        return bad(op)
    if k in ("list_tables", "list_ns"):
        if not known:
            return []
        target = a[0] if k == "list_tables" else None
        if phase == "begin":
            if k == "list_tables":
                if ok != (target in state.namespaces):
                    return []
                if not ok and code != NS_NOT_FOUND:
                    return bad(op)
            now = present(state, target)
            return [state.with_lists(state.lists + ((op.id, target, now, now),))]
        opened = [l for l in state.lists if l[0] == op.id]
        if not opened:
            return []
        rest = state.with_lists([l for l in state.lists if l[0] != op.id])
        if not ok:
            return [rest]
        _, _, ever, always = opened[0]
        # The search asks again after every step placed elsewhere; most leave the
        # listing's accumulators as they were.
        key = (op.id, ever, always)
        explained = _PAGES.get(key)
        if explained is None:
            explained = _PAGES[key] = page_explained(op, ever, always)
        return [rest] if explained else []
    raise ValueError(f"unknown op kind {k}")


def key_segment(name: str) -> str:
    """A name as the catalog encodes it into one key segment (ASCII letters, digits, - and _
    kept, everything else percent-encoded)."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "".join(f"%{b:02X}" for b in c.encode())
                   for c in name)


def list_order(name: str) -> str:
    """Where a name sorts in a listing: where its record's key sorts in the store (the name
    as one key segment, then `.json`), the order listings page through with start-after.
    For most names it is the order of the names; not when a name continues a shorter one
    with `-` or an escaped character (`t-1.json` sorts before `t.json`)."""
    return key_segment(name) + ".json"


# Pages already judged against given accumulators, by (op id, ever, always); `check`
# starts each search with it empty.
_PAGES: dict = {}


def page_explained(op: Op, ever: frozenset, always: frozenset) -> bool:
    """A listed page: names in order, each one existing at some point, and every name that
    existed throughout within the page's range present. `args[1:]` = (token, limit, scope):
    `scope` keeps only names the workload owns (the root lists other rounds' namespaces)."""
    _, token, limit, scope = op.args
    raw = op.body.get("tables", op.body.get("namespaces", [])) or []
    if limit is not None and len(raw) > limit:
        return False
    # The range a full page covers ends at its last name, whatever the scope; the token
    # that lets the next page go on is that name (else the next page's range would skip
    # names no page is checked for).
    token_out = op.body.get("page_token")
    if token_out and (not raw or token_out != raw[-1]):
        return False
    upper = raw[-1] if token_out and raw else None
    items = [n for n in raw if scope is None or n.startswith(scope)]
    ever = {n for n in ever if scope is None or n.startswith(scope)}
    always = {n for n in always if scope is None or n.startswith(scope)}
    order = [list_order(n) for n in items]
    if order != sorted(order) or len(set(items)) != len(items):
        return False
    after = list_order(token) if token else None
    if (after is not None and any(o <= after for o in order)) or not set(items) <= ever:
        return False
    last = list_order(upper) if upper is not None else None
    in_range = {n for n in always
                if (after is None or list_order(n) > after) and (last is None or list_order(n) <= last)}
    return in_range <= set(items)


def bad(op: Op) -> list:
    raise Unexplainable(f"an answer the model has no rule for: {op}")


class Unexplainable(Exception):
    pass


@dataclass
class Result:
    ok: bool
    explanation: str = ""
    linearized: int = 0
    # When ok: the order found, as (op, phase, state after it), for reading a history.
    order: list = field(default_factory=list)


class _Entry:
    """One call or return in the doubly linked list the search lifts entries out of."""

    __slots__ = ("op", "phase", "is_call", "match", "prev", "next", "index")

    def __init__(self, op, phase, is_call, index):
        self.op, self.phase, self.is_call, self.index = op, phase, is_call, index
        self.match = self.prev = self.next = None


def same_model(a: State, b: State) -> bool:
    """Whether two states differ at most in their open listings."""
    return (a.namespaces, a.tables, a.dead) == (b.namespaces, b.tables, b.dead)


def check(ops: list[Op], initial: State, budget: int = 5_000_000) -> Result:
    """Searches for a linearization of `ops` from `initial`.

    A step that changes nothing but the open listings (a read, a refusal, the start or the
    end of a listing) is placed as soon as it can be and never tried later instead: moving
    such a step earlier, to where it can already be placed, leaves every other step's state
    as it was, and starting a listing earlier or ending it as soon as its page is explained
    only widens what the page may show. Without this, a long request (one that waited two
    seconds for a rival) beside many short listings makes the search try every place for it
    among them."""
    _PAGES.clear()
    units = []  # (op, phase): a listing is two units
    for op in ops:
        if op.kind in ("list_tables", "list_ns"):
            units += [(op, "begin"), (op, "end")]
        else:
            units.append((op, None))
    events = []
    for i, (op, phase) in enumerate(units):
        call = _Entry(op, phase, True, i)
        events.append((op.call, 0, i, call))
        if op.ret is not None:
            ret = _Entry(op, phase, False, i)
            call.match, ret.match = ret, call
            events.append((op.ret, 1, i, ret))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    head = _Entry(None, None, False, -1)
    prev = head
    for _, _, _, e in events:
        prev.next, e.prev = e, prev
        prev = e
    known_left = sum(1 for op, _ in units if op.ret is not None)

    def lift(e):
        e.prev.next = e.next
        if e.next:
            e.next.prev = e.prev
        if e.match:
            m = e.match
            m.prev.next = m.next
            if m.next:
                m.next.prev = m.prev

    def unlift(e):
        if e.match:
            m = e.match
            m.prev.next = m
            if m.next:
                m.next.prev = m
        e.prev.next = e
        if e.next:
            e.next.prev = e

    state, done, cache, stack = initial, 0, set(), []
    entry = head.next
    deepest, stuck, steps = -1, None, 0
    # Whether to place the steps that change nothing but listings before trying others.
    sweep = True

    def place(e, nxt):
        nonlocal state, done, known_left
        state, done = nxt, done | (1 << e.index)
        if e.op.ret is not None:
            known_left -= 1
        lift(e)

    while True:
        if known_left == 0:
            afters = [before for _, before, _, _, _ in stack[1:]] + [state]
            order = [(e.op, e.phase, after) for (e, _, _, _, _), after in zip(stack, afters)]
            return Result(True, linearized=bin(done).count("1"), order=order)
        steps += 1
        if steps > budget:
            return Result(False, "the search ran out of budget (the history is too concurrent to decide)")
        dead_end = False
        if sweep:
            # Every step that may come next and changes nothing but listings is placed now,
            # wherever it is among them (see above); what is left to choose is the order of
            # the changes.
            sweep = False
            e = head.next
            while e is not None and e.is_call and known_left:
                steps += 1
                candidates = step(state, e.op, e.phase)
                if len(candidates) == 1 and same_model(candidates[0], state):
                    key = (done | (1 << e.index), candidates[0])
                    if key in cache:
                        # Explored from here before, in vain: so is this state.
                        dead_end = True
                        break
                    cache.add(key)
                    stack.append((e, state, candidates, 0, True))
                    place(e, candidates[0])
                    e = head.next
                else:
                    e = e.next
            entry = head.next
            if not dead_end:
                continue
        if not dead_end and entry is not None and entry.is_call:
            candidates = step(state, entry.op, entry.phase)
            for j, nxt in enumerate(candidates):
                key = (done | (1 << entry.index), nxt)
                if key not in cache:
                    cache.add(key)
                    forced = len(candidates) == 1 and same_model(nxt, state)
                    stack.append((entry, state, candidates, j, forced))
                    place(entry, nxt)
                    entry, sweep = head.next, True
                    break
            else:
                entry = entry.next
            continue
        # The return of an op not placed yet: undo choices until another one can be tried.
        if not dead_end and entry is not None and len(stack) >= deepest:
            deepest, stuck = len(stack), entry.op
        entry = None
        while entry is None:
            if not stack:
                where = f"; the search got stuck at {stuck}" if stuck else ""
                return Result(False, "no order of the operations explains every answer" + where, 0)
            e, before, candidates, j, forced = stack.pop()
            state, done = before, done & ~(1 << e.index)
            if e.op.ret is not None:
                known_left += 1
            unlift(e)
            if forced:
                # Placed where it first could be: placing it later explains nothing more.
                continue
            for jj in range(j + 1, len(candidates)):
                key = (done | (1 << e.index), candidates[jj])
                if key not in cache:
                    cache.add(key)
                    stack.append((e, before, candidates, jj, False))
                    place(e, candidates[jj])
                    entry, sweep = head.next, True
                    break
            else:
                entry = e.next
                if entry is None:
                    continue


def around(ops: list[Op], stuck: Op | None, width: float = 0.5) -> str:
    """The operations near the one the search got stuck at, for a failure message."""
    if stuck is None:
        return "\n".join(str(o) for o in ops[-40:])
    lo, hi = stuck.call - width, (stuck.ret or stuck.call) + width
    near = [o for o in ops if o.call <= hi and (o.ret is None or o.ret >= lo)]
    return "\n".join(str(o) for o in sorted(near, key=lambda o: o.call)[:80])
