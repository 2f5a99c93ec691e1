"""The web console in a real browser: Debian's headless Chromium, driven by Selenium through
Debian's chromedriver (nothing is downloaded), against the built binary with API keys and
grants. What the page shows is checked against what pylance reads.

Screenshots of the main pages go to $CONSOLE_SCREENSHOTS (default: a temporary folder)."""

import json
import math
import os
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import lance
import lance_namespace as ln
import numpy as np
import pyarrow as pa
import pytest
from lance.namespace import RestNamespace
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

from conftest import free_port, start_gateway
from security import call, grants_toml, make_key, write
from test_metrics import scrape
from test_metrics import value as metrics_value

HOSTILE = "<img src=x onerror=alert(1)>"
DIM = 8


def rows(start, n):
    rng = np.random.default_rng(start)
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "text": [f"row {i}" for i in range(start, start + n)],
        "blob": pa.array([bytes(i % 7) for i in range(start, start + n)], pa.binary()),
        "vector": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal(n * DIM).astype(np.float32)), DIM),
    })


@pytest.fixture(scope="module")
def console():
    """A gateway with keys: `ops` administers everything, `viewer` reads ml/docs alone.
    Table ml/docs: 300 rows at version 1 (tagged `first`), 300 more appended at version 2;
    beside it a table named like markup, and one to drop."""
    work = tempfile.mkdtemp(prefix="console-")
    keys = {who: make_key(who) for who in ("ops", "viewer")}
    keys_file, grants_file = os.path.join(work, "keys"), os.path.join(work, "grants.toml")
    write(keys_file, "\n".join(line for _, line in keys.values()) + "\n")
    write(grants_file, grants_toml([
        ("principal", "ops", [], "admin"),
        ("principal", "viewer", ["ml", "docs"], "read"),
    ]))
    gw = start_gateway(["--warehouse", os.path.join(work, "wh"), "--api-keys", keys_file,
                        "--grants", grants_file, "--maintenance", "false"])
    ops = keys["ops"][0]
    ns = RestNamespace(uri=gw.uri, **{"headers.x-api-key": ops})
    ln.connect("rest", {"uri": gw.uri, "headers.x-api-key": ops}).create_namespace(
        ln.CreateNamespaceRequest(id=["ml"]))
    lance.write_dataset(rows(0, 300), namespace_client=ns, table_id=["ml", "docs"], mode="create")
    ds = lance.dataset(namespace_client=ns, table_id=["ml", "docs"])
    ds.tags.create("first", 1)
    lance.write_dataset(rows(300, 300), namespace_client=ns, table_id=["ml", "docs"], mode="append")
    # A full-text index built by pylance, and a scalar index built by the gateway (as a
    # transaction the console lists).
    lance.dataset(namespace_client=ns, table_id=["ml", "docs"]).create_scalar_index("text", "INVERTED")
    status, _, _ = call(gw.uri, "POST", "/v1/table/ml%24docs/create_scalar_index",
                        {"column": "id", "index_type": "BTREE"}, headers={"x-api-key": ops})
    assert status == 200
    lance.write_dataset(rows(0, 5), namespace_client=ns, table_id=["ml", HOSTILE], mode="create")
    lance.write_dataset(rows(0, 5), namespace_client=ns, table_id=["ml", "scratch"], mode="create")
    shots = os.environ.get("CONSOLE_SCREENSHOTS") or tempfile.mkdtemp(prefix="console-shots-")
    os.makedirs(shots, exist_ok=True)
    try:
        yield {"gw": gw, "keys": {k: v[0] for k, v in keys.items()}, "ns": ns, "shots": shots}
    finally:
        assert gw.stop() == 0


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    # Debian's driver, named: Selenium would otherwise look for (and try to fetch) one.
    driver = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver, condition, timeout=15):
    # A page being redrawn replaces the element a condition just found: look again.
    return WebDriverWait(driver, timeout, ignored_exceptions=(StaleElementReferenceException,)).until(condition)


def visible(driver, css, timeout=15):
    return wait(driver, EC.visibility_of_element_located((By.CSS_SELECTOR, css)), timeout)


def sign_in(driver, uri, key):
    # A fresh start: whatever an earlier test signed in with is forgotten.
    driver.get(f"{uri}/ui/")
    driver.execute_script("window.sessionStorage.clear()")
    driver.refresh()
    visible(driver, "#sign-in-value").send_keys(key)
    driver.find_element(By.CSS_SELECTOR, "#sign-in-submit").click()
    wait(driver, lambda d: d.find_element(By.ID, "who").text.startswith("signed in as"))


def table_text(driver, css="#rows"):
    """The shown table: its header, and each row's cells as text."""
    t = visible(driver, css)
    head = [th.text for th in t.find_elements(By.CSS_SELECTOR, "thead th")]
    body = [[td.text for td in tr.find_elements(By.CSS_SELECTOR, "td")]
            for tr in t.find_elements(By.CSS_SELECTOR, "tbody tr")]
    return head, body


def column(head, body, name):
    i = head.index(name)
    return [r[i] for r in body]


def go(driver, uri, fragment, ready_css):
    driver.get(f"{uri}/ui/#{fragment}")
    return visible(driver, ready_css)


def assert_no_alert(driver):
    try:
        text = driver.switch_to.alert.text
    except NoAlertPresentException:
        return
    raise AssertionError(f"a script ran: an alert says {text!r}")


def test_assets_are_light_safe_and_served_without_credentials(console):
    uri = console["gw"].uri
    total = 0
    for path in ("/ui/", "/ui/app.js", "/ui/app.css"):
        with urllib.request.urlopen(f"{uri}{path}") as r:
            body = r.read()
            total += len(body)
            assert r.headers["X-Content-Type-Options"] == "nosniff"
            csp = r.headers["Content-Security-Policy"]
            assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
            assert "unsafe-inline" not in csp
    assert total < 200 * 1024, f"the first load transfers {total} bytes"
    # The data behind them still asks who is calling.
    req = urllib.request.Request(f"{uri}/v1/whoami")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req)
    assert refused.value.code == 401


def test_sign_in_walk_rows_filter_and_versions(console, browser):
    uri, ns = console["gw"].uri, console["ns"]
    sign_in(browser, uri, console["keys"]["ops"])
    assert browser.find_element(By.ID, "who").text == "signed in as ops"
    # The tree shows ml with its table count; walk to the table from the namespace page.
    wait(browser, lambda d: "(3)" in d.find_element(By.ID, "tree").text)
    browser.find_element(By.LINK_TEXT, "ml").click()
    wait(browser, EC.element_to_be_clickable((By.LINK_TEXT, "docs"))).click()
    wait(browser, lambda d: d.find_element(By.ID, "num-rows").text == "600")
    overview = browser.find_element(By.ID, "view").text
    assert "fixed_size_list<float32>[8]" in overview and "first" in overview
    head, body = table_text(browser, "#indices")
    shown = {r[0]: r for r in body}
    assert shown["id_idx"][1:5] == ["BTREE", "id", "600", "0"], shown
    assert shown["text_idx"][1:3] == ["FTS", "text"], shown
    browser.save_screenshot(os.path.join(console["shots"], "table.png"))

    ds = lance.dataset(namespace_client=ns, table_id=["ml", "docs"])
    expected = ds.to_table(limit=25).to_pydict()
    go(browser, uri, "/table/ml%24docs/rows", "#rows")
    head, body = table_text(browser)
    assert head[:4] == ["id", "text", "blob", "vector"]
    assert column(head, body, "id") == [str(i) for i in expected["id"]]
    assert column(head, body, "text") == expected["text"]
    assert column(head, body, "blob") == [f"{len(b)} bytes" for b in expected["blob"]]
    # Vectors shortened: the first values, then how many there are.
    first = column(head, body, "vector")[0]
    assert first.endswith(f"… ({DIM})]") and first.startswith(f"[{float(np.float32(expected['vector'][0][0])):.4g}"[:5])
    browser.save_screenshot(os.path.join(console["shots"], "rows.png"))

    # A filter narrows them, to exactly the rows pylance finds.
    f = browser.find_element(By.NAME, "filter")
    f.send_keys("id >= 100 AND id < 105")
    browser.find_element(By.CSS_SELECTOR, "#rows-form button[type=submit]").click()
    wait(browser, lambda d: len(table_text(d)[1]) == 5)
    head, body = table_text(browser)
    assert column(head, body, "id") == [str(i) for i in ds.to_table(filter="id >= 100 AND id < 105")["id"].to_pylist()]

    # At version 1 (or its tag) the appended rows are not there.
    go(browser, uri, "/table/ml%24docs/rows?filter=id+%3E%3D+295", "#rows")
    assert len(table_text(browser)[1]) == 25
    for ref in ("v:1", "t:first"):
        Select(browser.find_element(By.NAME, "ref")).select_by_value(ref)
        browser.find_element(By.CSS_SELECTOR, "#rows-form button[type=submit]").click()
        wait(browser, lambda d: len(table_text(d)[1]) == 5)
        head, body = table_text(browser)
        assert column(head, body, "id") == ["295", "296", "297", "298", "299"]

    # The versions, newest first, with the operation that made each.
    go(browser, uri, "/table/ml%24docs/versions", "table")
    head, body = table_text(browser, "main table")
    assert column(head, body, "version") == ["4", "3", "2", "1"]
    assert column(head, body, "operation") == ["CreateIndex", "CreateIndex", "Append", "Overwrite"]

    # The index build the gateway ran, as a transaction of the table.
    go(browser, uri, "/table/ml%24docs/transactions", "main table")
    head, body = table_text(browser, "main table")
    assert column(head, body, "operation") == ["create_index id_idx"]
    assert column(head, body, "status") == ["Succeeded"]
    assert_no_alert(browser)


def test_vector_search_matches_pylance(console, browser):
    uri, ns = console["gw"].uri, console["ns"]
    sign_in(browser, uri, console["keys"]["ops"])
    go(browser, uri, "/table/ml%24docs/rows?filter=id+%3D+7", "#rows")
    # Take the query vector from a shown row.
    wait(browser, EC.element_to_be_clickable((By.CSS_SELECTOR, "button.search-like"))).click()
    visible(browser, "#search-form")
    vector = json.loads(browser.find_element(By.NAME, "vector").get_attribute("value"))
    k = browser.find_element(By.NAME, "k")
    k.clear()
    k.send_keys("5")
    browser.find_element(By.CSS_SELECTOR, "#search-form button[type=submit]").click()
    head, body = table_text(browser)
    wait(browser, lambda d: len(table_text(d)[1]) == 5)
    head, body = table_text(browser)
    browser.save_screenshot(os.path.join(console["shots"], "search.png"))

    ds = lance.dataset(namespace_client=ns, table_id=["ml", "docs"])
    exact = ds.to_table(nearest={"column": "vector", "q": np.array(vector, np.float32), "k": 5})
    assert column(head, body, "id") == [str(i) for i in exact["id"].to_pylist()]
    assert column(head, body, "id")[0] == "7"
    for shown, want in zip(column(head, body, "_distance"), exact["_distance"].to_pylist()):
        assert math.isclose(float(shown), want, rel_tol=1e-5, abs_tol=1e-6)


def test_full_text_search_matches_pylance(console, browser):
    uri, ns = console["gw"].uri, console["ns"]
    sign_in(browser, uri, console["keys"]["ops"])
    go(browser, uri, "/table/ml%24docs/search", "#fts-form")
    browser.find_element(By.NAME, "text").send_keys("42")
    browser.find_element(By.CSS_SELECTOR, "#fts-form button[type=submit]").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#rows tbody tr"))
    head, body = table_text(browser)
    ds = lance.dataset(namespace_client=ns, table_id=["ml", "docs"])
    want = ds.to_table(full_text_query="42", limit=10)["id"].to_pylist()
    assert column(head, body, "id") == [str(i) for i in want] and want == [42]


def test_hostile_names_render_as_text(console, browser):
    uri = console["gw"].uri
    sign_in(browser, uri, console["keys"]["ops"])
    go(browser, uri, "/ns/ml", "main table")
    wait(browser, lambda d: HOSTILE in d.find_element(By.ID, "view").text)
    browser.find_element(By.LINK_TEXT, HOSTILE).click()
    wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "main h1").text == f"ml / {HOSTILE}")
    visible(browser, "#num-rows")
    assert browser.find_elements(By.CSS_SELECTOR, "main img, nav img") == []
    assert_no_alert(browser)


def test_a_reader_sees_its_grants_and_no_controls(console, browser):
    uri = console["gw"].uri
    sign_in(browser, uri, console["keys"]["ops"])
    go(browser, uri, "/table/ml%24docs", "#num-rows")
    assert browser.find_elements(By.ID, "drop-table") and browser.find_elements(By.ID, "create-tag")
    # Sign out: the key is forgotten and the form is back.
    browser.find_element(By.ID, "sign-out").click()
    visible(browser, "#sign-in-value")
    assert browser.execute_script("return window.sessionStorage.length") == 0
    browser.refresh()
    visible(browser, "#sign-in-value")

    browser.find_element(By.ID, "sign-in-value").send_keys(console["keys"]["viewer"])
    browser.find_element(By.CSS_SELECTOR, "#sign-in-submit").click()
    wait(browser, lambda d: d.find_element(By.ID, "who").text == "signed in as viewer")
    go(browser, uri, "/ns/ml", "main table")
    wait(browser, lambda d: "docs" in d.find_element(By.ID, "view").text)
    shown = browser.find_element(By.ID, "view").text
    assert HOSTILE not in shown and "scratch" not in shown
    assert not browser.find_elements(By.ID, "create-namespace")
    go(browser, uri, "/table/ml%24docs", "#num-rows")
    assert not browser.find_elements(By.ID, "drop-table")
    assert not browser.find_elements(By.ID, "create-tag")
    # A table outside the grants is absent, exactly as from the API.
    go(browser, uri, "/table/ml%24scratch", ".error")
    assert "not found" in browser.find_element(By.CSS_SELECTOR, ".error").text
    # A wrong key brings the form back.
    browser.execute_script(
        "sessionStorage.setItem('lance-gateway.credential', JSON.stringify({kind: 'key', value: 'lgk_wrong'}))")
    browser.refresh()
    visible(browser, "#sign-in-value")
    assert "not accepted" in browser.find_element(By.ID, "sign-in-why").text


def test_create_namespace_tag_and_drop_table(console, browser):
    uri, ns = console["gw"].uri, console["ns"]
    sign_in(browser, uri, console["keys"]["ops"])
    go(browser, uri, "/ns/ml", "#create-namespace")
    browser.find_element(By.CSS_SELECTOR, "#create-namespace input").send_keys("made-in-browser")
    browser.find_element(By.CSS_SELECTOR, "#create-namespace button").click()
    wait(browser, lambda d: "made-in-browser" in d.find_element(By.ID, "view").text)
    client = ln.connect("rest", {"uri": uri, "headers.x-api-key": console["keys"]["ops"]})
    assert "made-in-browser" in client.list_namespaces(ln.ListNamespacesRequest(id=["ml"])).namespaces

    go(browser, uri, "/table/ml%24scratch", "#create-tag")
    browser.find_element(By.CSS_SELECTOR, "#create-tag input[name=tag]").send_keys("gold")
    browser.find_element(By.CSS_SELECTOR, "#create-tag button").click()
    wait(browser, lambda d: "gold" in d.find_element(By.ID, "view").text)
    assert "gold" in lance.dataset(namespace_client=ns, table_id=["ml", "scratch"]).tags.list()

    # Dropping asks for the table's name first.
    go(browser, uri, "/table/ml%24scratch", "#drop-table")
    browser.find_element(By.CSS_SELECTOR, "#drop-table button").click()
    visible(browser, "#drop-table .error")
    client.table_exists(ln.TableExistsRequest(id=["ml", "scratch"]))  # still there: raises if not
    browser.find_element(By.CSS_SELECTOR, "#drop-table input").send_keys("scratch")
    browser.find_element(By.CSS_SELECTOR, "#drop-table button").click()
    wait(browser, lambda d: "/ns/" in d.current_url)
    with pytest.raises(Exception):
        client.table_exists(ln.TableExistsRequest(id=["ml", "scratch"]))


def test_recently_dropped_tables_are_undropped_and_purged(console, browser):
    """A dropped table is listed under its namespace's "Recently dropped" (admins only), with
    who dropped it; Undrop brings it back whole, under its name or another; Purge asks for
    the name, then deletes the data for good."""
    uri, ns, ops = console["gw"].uri, console["ns"], console["keys"]["ops"]
    client = ln.connect("rest", {"uri": uri, "headers.x-api-key": ops})
    for name in ("keep_me", "lose_me"):
        lance.write_dataset(rows(0, 7), namespace_client=ns, table_id=["ml", name], mode="create")
        client.drop_table(ln.DropTableRequest(id=["ml", name]))
    sign_in(browser, uri, ops)
    go(browser, uri, "/ns/ml", "#dropped table")
    head, body = table_text(browser, "#dropped table")
    listed = dict(zip(column(head, body, "name"), column(head, body, "by")))
    assert listed.get("keep_me") == "ops" and listed.get("lose_me") == "ops", listed
    browser.save_screenshot(os.path.join(console["shots"], "recently-dropped.png"))

    # Undrop under another name: the rows come back, the listing loses it.
    row = browser.find_element(By.XPATH, "//section[@id='dropped']//tr[td[1]='keep_me']")
    row.find_element(By.CSS_SELECTOR, "input[name=as]").send_keys("kept_again")
    row.find_element(By.CSS_SELECTOR, "button.undrop").click()
    wait(browser, lambda d: "/table/ml%24kept_again" in d.current_url)
    assert lance.dataset(namespace_client=ns, table_id=["ml", "kept_again"]).count_rows() == 7

    # Purge wants the name typed; then the data is gone and so is the entry.
    go(browser, uri, "/ns/ml", "#dropped table")
    row = browser.find_element(By.XPATH, "//section[@id='dropped']//tr[td[1]='lose_me']")
    dropped = call(uri, "GET", "/v1/namespace/ml/dropped_tables", headers={"x-api-key": ops})[1]["dropped"]
    folder = next(d["location"] for d in dropped if d["id"] == ["ml", "lose_me"])
    row.find_element(By.CSS_SELECTOR, "button.purge").click()
    visible(browser, "#dropped .error")
    assert os.path.isdir(folder.removeprefix("file://")), "nothing purged before the name is typed"
    row.find_element(By.CSS_SELECTOR, "input[name=confirm]").send_keys("lose_me")
    row.find_element(By.CSS_SELECTOR, "button.purge").click()
    wait(browser, lambda d: "lose_me" not in d.find_element(By.ID, "dropped").text)
    assert not os.path.exists(folder.removeprefix("file://"))

    # A reader sees no such section.
    sign_in(browser, uri, console["keys"]["viewer"])
    go(browser, uri, "/ns/ml", "#view h1")
    assert not browser.find_elements(By.ID, "dropped")


def test_console_can_be_turned_off(tmp_path):
    gw = start_gateway(["--warehouse", str(tmp_path / "wh"), "--console", "false"])
    try:
        with pytest.raises(urllib.error.HTTPError) as gone:
            urllib.request.urlopen(f"{gw.uri}/ui/")
        assert gone.value.code == 404 or gone.value.code == 406
        assert "code" in json.loads(gone.value.read())
    finally:
        assert gw.stop() == 0


def store_requests(mport: int) -> float:
    return metrics_value(scrape(mport), "lance_gateway_store_operations_total")


def declare_all(uri: str, ids: list[list[str]]):
    """Declares every table, 8 at a time (each must answer 200)."""
    def one(tid):
        status, body, _ = call(uri, "POST", f"/v1/table/{'$'.join(tid)}/declare", {"id": tid})
        assert status == 200, body
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, ids))


def batch_declare(uri: str, ids: list[list[str]]) -> str:
    status, body, _ = call(uri, "POST", "/v1/table/batch-commit",
                           {"operations": [{"declare_table": {"id": tid}} for tid in ids]})
    assert status == 200, body
    return body["transaction_id"]


def test_console_views_cost_the_same_store_requests_however_full_the_warehouse(browser, tmp_path):
    """The console's warehouse view (each namespace with its table count), a namespace of
    many tables, and a table's transactions cost the same store requests, counted by the
    gateway's metrics, with 250 tables and 20 other batches as with 10 000 tables and 400
    other batches: nothing they show is found by reading the warehouse through."""
    mport = free_port()
    gw = start_gateway(["--warehouse", str(tmp_path / "wh"), "--maintenance", "false",
                        "--managed-versioning", "true", "--recovery-interval-secs", "3600",
                        "--metrics-listen", f"127.0.0.1:{mport}"])
    try:
        uri = gw.uri
        for ns in ("big", "small", "busy"):
            assert call(uri, "POST", f"/v1/namespace/{ns}/create", {"id": [ns]})[0] == 200
        # The table whose transactions are shown: declared second in a batch, so its
        # transaction's record names another table first.
        mine = batch_declare(uri, [["small", "first"], ["small", "t"]])
        big, others = 0, 0

        def fill(tables: int, batches: int):
            nonlocal big, others
            declare_all(uri, [["big", f"t{i:05}"] for i in range(big, tables)])
            for i in range(others, batches):
                batch_declare(uri, [["busy", f"b{i:04}"]])
            big, others = tables, batches

        views = [
            ("/", lambda d: "…" not in d.find_element(By.ID, "view").text
             and "busy" in d.find_element(By.ID, "view").text),
            ("/ns/big", lambda d: "more…" in d.find_element(By.ID, "view").text),
            ("/table/small%24t/transactions", lambda d: mine in d.find_element(By.ID, "view").text),
        ]

        def costs() -> dict:
            out = {}
            for fragment, ready in views:
                seen = []
                for _ in range(3):
                    browser.get("about:blank")
                    before = store_requests(mport)
                    browser.get(f"{uri}/ui/#{fragment}")
                    wait(browser, ready)
                    time.sleep(0.5)  # whatever the page still asks for, answered
                    seen.append(store_requests(mport) - before)
                # Background work (a registry write) only adds: the least is the view's.
                out[fragment] = min(seen)
            return out

        fill(250, 20)
        small_costs = costs()
        fill(10_000, 400)
        big_costs = costs()
        assert big_costs == small_costs, (small_costs, big_costs)

        # What the views show, with the warehouse full.
        browser.get(f"{uri}/ui/#/")
        wait(browser, views[0][1])
        head, body = table_text(browser, "#view table")
        counts = dict((r[0], r[1]) for r in body)
        assert counts == {"big": "200+", "busy": "200+", "small": "2"}, counts
        browser.get(f"{uri}/ui/#/ns/big")
        wait(browser, views[1][1])
        shown = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#view a[href^='#/table/big']")]
        assert shown == [f"t{i:05}" for i in range(50)], shown[:5]
        go(browser, uri, "/table/small%24t/transactions", "main table")
        wait(browser, views[2][1])
        head, body = table_text(browser, "main table")
        assert column(head, body, "transaction") == [mine]
        assert column(head, body, "operation") == ["batch_commit"]
        assert column(head, body, "status") == ["Succeeded"]
    finally:
        assert gw.stop() == 0
