"""The history checker itself: it accepts histories some order explains and rejects the
ones the issue describes (a resurrected table, a rival told "exists" while readers see
nothing, a listing that misses a table). Without these, a checker that accepts everything
would pass every run of the workload."""

from linearizability import (
    NS_NOT_EMPTY,
    TABLE_EXISTS,
    TABLE_NOT_FOUND,
    Op,
    State,
    check,
)

START = State(frozenset({"a"}), ())


class History:
    def __init__(self):
        self.ops = []

    def add(self, kind, args, call, ret, status=200, code=None, **body):
        self.ops.append(Op(len(self.ops), len(self.ops), kind, tuple(args), call, ret, status, code, body))
        return self

    def ok(self, initial=START):
        result = check(self.ops, initial)
        return result.ok


def test_sequential_history_passes():
    h = History()
    h.add("declare", ("a", "t"), 0, 1, location="L1")
    h.add("describe", ("a", "t"), 2, 3, location="L1")
    h.add("rename", ("a", "t", "a", "u"), 4, 5)
    h.add("describe", ("a", "u"), 6, 7, location="L1")
    h.add("describe", ("a", "t"), 8, 9, 404, TABLE_NOT_FOUND)
    assert h.ok()


def test_concurrent_requests_may_take_effect_in_either_order():
    h = History()
    h.add("declare", ("a", "t"), 0, 10, location="L1")
    h.add("describe", ("a", "t"), 1, 2, 404, TABLE_NOT_FOUND)
    h.add("describe", ("a", "t"), 3, 4, location="L1")
    assert h.ok()


def test_resurrected_table_is_caught():
    # Deregistered with 200, then described again: nothing brought it back.
    h = History()
    h.add("declare", ("a", "t0"), 0, 1, location="L1")
    h.add("deregister", ("a", "t0"), 2, 3, location="L1")
    h.add("describe", ("a", "t3"), 4, 5, location="L1")
    assert not h.ok()


def test_rival_told_exists_while_readers_see_nothing_is_caught():
    # The point 3: a create in flight, a rival answered "exists", a read after that
    # answer says "not found", and only then does the first create succeed.
    h = History()
    h.add("declare", ("a", "t"), 0, 10, location="L1")
    h.add("declare", ("a", "t"), 1, 2, 409, TABLE_EXISTS)
    h.add("exists", ("a", "t"), 3, 4, 404, TABLE_NOT_FOUND)
    assert not h.ok()


def test_unknown_outcome_may_or_may_not_happen():
    h = History()
    h.add("declare", ("a", "t"), 0, None)
    h.add("describe", ("a", "t"), 1, 2, 404, TABLE_NOT_FOUND)
    h.add("describe", ("a", "t"), 3, 4, location="Lx")
    h.add("describe", ("a", "t"), 5, 6, location="Lx")
    assert h.ok()
    h.add("describe", ("a", "t"), 7, 8, location="Ly")
    assert not h.ok(), "a table cannot change its location"


def test_an_unknown_drop_cannot_undo_itself():
    h = History()
    h.add("declare", ("a", "t"), 0, 1, location="L1")
    h.add("drop", ("a", "t"), 2, None)
    h.add("describe", ("a", "t"), 3, 4, 404, TABLE_NOT_FOUND)
    h.add("describe", ("a", "t"), 5, 6, location="L1")
    assert not h.ok()


def test_two_names_for_one_table_are_caught():
    h = History()
    h.add("declare", ("a", "t"), 0, 1, location="L1")
    h.add("rename", ("a", "t", "a", "u"), 2, None)
    h.add("rename", ("a", "t", "a", "v"), 2, 3)
    h.add("describe", ("a", "u"), 4, 5, location="L1")
    h.add("describe", ("a", "v"), 6, 7, location="L1")
    assert not h.ok()


def test_register_of_a_claimed_folder_is_refused_only_while_claimed():
    h = History()
    h.add("register", ("a", "t", "F"), 0, 1, location="F")
    h.add("register", ("a", "u", "F"), 2, 3, 400, 13)
    h.add("deregister", ("a", "t"), 4, 5)
    h.add("register", ("a", "u", "F"), 6, 7, location="F")
    assert h.ok()
    h.add("register", ("a", "v", "F"), 8, 9, location="F")
    assert not h.ok(), "two tables on one folder"


def test_namespace_drop_needs_an_empty_namespace():
    h = History()
    h.add("declare", ("a", "t"), 0, 1, location="L")
    h.add("drop_ns", ("a",), 2, 3)
    assert not h.ok()
    h = History()
    h.add("declare", ("a", "t"), 0, 1, location="L")
    h.add("drop_ns", ("a",), 2, 3, 409, NS_NOT_EMPTY)
    h.add("drop", ("a", "t"), 4, 5)
    h.add("drop_ns", ("a",), 6, 7)
    h.add("declare", ("a", "u"), 8, 9, 404, 1)
    assert h.ok()


def test_a_listing_must_show_what_existed_throughout():
    h = History()
    h.add("declare", ("a", "t1"), 0, 1, location="L1")
    h.add("declare", ("a", "t2"), 0, 1, location="L2")
    h.add("list_tables", ("a", None, None, None), 2, 3, tables=["t1"])
    assert not h.ok()


def test_a_listing_may_show_what_changed_during_it():
    h = History()
    h.add("declare", ("a", "t1"), 0, 1, location="L1")
    h.add("list_tables", ("a", None, None, None), 2, 6, tables=["t1", "t2"])
    h.add("declare", ("a", "t2"), 3, 4, location="L2")
    h.add("drop", ("a", "t1"), 3, 5)
    assert h.ok()


def test_a_listing_must_not_show_what_never_existed_during_it():
    h = History()
    h.add("declare", ("a", "t1"), 0, 1, location="L1")
    h.add("drop", ("a", "t1"), 2, 3)
    h.add("list_tables", ("a", None, None, None), 4, 5, tables=["t1"])
    assert not h.ok()


def test_a_page_covers_only_its_range():
    h = History()
    for i, n in enumerate(["t1", "t2", "t3"]):
        h.add("declare", ("a", n), 0, 1, location=f"L{i}")
    h.add("list_tables", ("a", None, 2, None), 2, 3, tables=["t1", "t2"], page_token="t2")
    h.add("list_tables", ("a", "t2", 2, None), 4, 5, tables=["t3"])
    assert h.ok()
    h.add("list_tables", ("a", "t1", 2, None), 6, 7, tables=["t3"])
    assert not h.ok(), "t2 is in the range after t1 and existed throughout"


def test_a_listing_of_a_missing_namespace():
    h = History()
    h.add("drop_ns", ("a",), 0, 1)
    h.add("list_tables", ("a", None, None, None), 2, 3, 404, 1)
    assert h.ok()
    h.add("list_tables", ("a", None, None, None), 4, 5, tables=[])
    assert not h.ok()


def test_a_dropped_folder_holds_no_dataset_to_register():
    h = History()
    h.add("register", ("a", "t", "F"), 0, 1, location="F")
    h.add("drop", ("a", "t"), 2, 3, location="F")
    h.add("register", ("a", "u", "F"), 4, 5, 400, 13)
    assert h.ok()
    h.add("register", ("a", "v", "F"), 6, 7, location="F")
    assert not h.ok()


def four_tables(names=("t0", "t1", "t2", "t3")):
    h = History()
    for i, n in enumerate(names):
        h.add("declare", ("a", n), 0, 1, location=f"L{i}")
    return h


def test_each_page_of_a_walk_is_checked_over_its_own_request():
    # The reported shape: four tables, a walk with limit 1 that answers one table. Its second
    # page claims the end of the namespace while t1..t3 existed throughout that request.
    h = four_tables()
    h.add("list_tables", ("a", None, 1, None), 2, 3, tables=["t0"], page_token="t0")
    h.add("list_tables", ("a", "t0", 1, None), 4, 5, tables=[])
    assert not h.ok()
    # The same walk with limit 2: its second page misses t2 and t3.
    h = four_tables()
    h.add("list_tables", ("a", None, 2, None), 2, 3, tables=["t0", "t1"], page_token="t1")
    h.add("list_tables", ("a", "t1", 2, None), 4, 5, tables=[])
    assert not h.ok()


def test_a_walk_is_no_snapshot():
    # The three tables ahead of the walk are renamed behind it between its pages: the walk
    # answers one table while four are present throughout, and every page is right.
    h = four_tables(("b", "c", "d", "e"))
    h.add("list_tables", ("a", None, 1, None), 2, 3, tables=["b"], page_token="b")
    for i, (src, dst) in enumerate([("c", "a1"), ("d", "a2"), ("e", "a3")]):
        h.add("rename", ("a", src, "a", dst), 3.1 + i * 0.2, 3.2 + i * 0.2)
    h.add("list_tables", ("a", "b", 1, None), 4, 5, tables=[])
    assert h.ok()
    # A table renamed ahead of the walk is listed twice.
    h = four_tables()
    h.add("list_tables", ("a", None, 2, None), 2, 3, tables=["t0", "t1"], page_token="t1")
    h.add("rename", ("a", "t0", "a", "t9"), 3.2, 3.4)
    h.add("list_tables", ("a", "t1", 2, None), 4, 5, tables=["t2", "t3"], page_token="t3")
    h.add("list_tables", ("a", "t3", 2, None), 6, 7, tables=["t9"])
    assert h.ok()


def test_a_page_overlapping_a_rename_may_miss_both_names_but_a_later_one_may_not():
    h = four_tables()
    h.add("list_tables", ("a", None, 2, None), 2, 3, tables=["t0", "t1"], page_token="t1")
    h.add("rename", ("a", "t2", "a", "t5"), 3.5, 4.5)
    h.add("list_tables", ("a", "t1", 2, None), 4, 5, tables=["t3"])
    assert h.ok(), "the page overlapped the rename: neither name existed throughout it"
    h.add("list_tables", ("a", "t1", 2, None), 6, 7, tables=["t3"])
    assert not h.ok(), "t5 existed throughout the later page"


def test_a_page_token_is_the_last_name_of_its_page():
    # A token beyond the page's last name would let the next page skip names unchecked.
    h = four_tables()
    h.add("list_tables", ("a", None, 1, None), 2, 3, tables=["t0"], page_token="t2")
    h.add("list_tables", ("a", "t2", 1, None), 4, 5, tables=["t3"])
    assert not h.ok()
    h = four_tables()
    h.add("list_tables", ("a", None, 1, None), 2, 3, tables=[], page_token="t0")
    assert not h.ok()


def test_pages_are_in_the_order_of_the_keys():
    # "t-1.json" sorts before "t.json": a walk lists t-1 before t, and a page after the token
    # "t-1" that lists t is within its range.
    h = History()
    for i, n in enumerate(["t", "t-1", "u"]):
        h.add("declare", ("a", n), 0, 1, location=f"L{i}")
    h.add("list_tables", ("a", None, 1, None), 2, 3, tables=["t-1"], page_token="t-1")
    h.add("list_tables", ("a", "t-1", 1, None), 4, 5, tables=["t"], page_token="t")
    h.add("list_tables", ("a", "t", 1, None), 6, 7, tables=["u"])
    h.add("list_tables", ("a", None, None, None), 8, 9, tables=["t-1", "t", "u"])
    assert h.ok()
    # What the gateway answers today: a page in the names' order, the next one after its
    # token in the keys' order (t listed twice, and out of order).
    h = History()
    for i, n in enumerate(["t", "t-1", "u"]):
        h.add("declare", ("a", n), 0, 1, location=f"L{i}")
    h.add("list_tables", ("a", None, 2, None), 2, 3, tables=["t", "t-1"], page_token="t-1")
    assert not h.ok()
    # A page after the token "t" that leaves out t-1 misses nothing: t-1 sorts before t.
    h = History()
    for i, n in enumerate(["t", "t-1", "u"]):
        h.add("declare", ("a", n), 0, 1, location=f"L{i}")
    h.add("list_tables", ("a", "t", 2, None), 2, 3, tables=["u"])
    assert h.ok()
    h.add("list_tables", ("a", "t-1", 2, None), 4, 5, tables=["u"])
    assert not h.ok(), "t sorts after t-1 and existed throughout"
