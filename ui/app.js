// lance-gateway's console: a page over the gateway's public REST routes, nothing else.
// Every name and value from the server is put into the page as text (textContent), never
// as markup. The credential, if any, is kept in this tab's sessionStorage and sent as a
// header; no cookie is ever set.
"use strict";

const DELIM = "$";
const PAGE = 50;
const ROWS_PAGE = 25;

// ---------- page building: text only ----------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function show(...children) {
  const view = document.getElementById("view");
  view.replaceChildren(...children.flat());
  return view;
}

function errorBox(e) {
  return el("p", { class: "error", role: "alert" }, e && e.message ? e.message : String(e));
}

function table(headers, rows, attrs) {
  return el("table", attrs || {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows.map((r) => el("tr", {}, r.map((c) =>
      c instanceof Node && c.tagName === "TD" ? c : el("td", typeof c === "number" ? { class: "num" } : {}, c))))
      : el("tr", {}, el("td", { class: "muted", colspan: headers.length }, "none"))));
}

function fmtBytes(n) {
  if (n === undefined || n === null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${i ? v.toFixed(1) : v} ${units[i]}`;
}

function fmtTime(ms) {
  return ms ? new Date(Number(ms)).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "";
}

// ---------- the credential, for this tab only ----------

const credential = {
  get() {
    try { return JSON.parse(sessionStorage.getItem("lance-gateway.credential")); } catch { return null; }
  },
  set(kind, value) { sessionStorage.setItem("lance-gateway.credential", JSON.stringify({ kind, value })); },
  clear() { sessionStorage.removeItem("lance-gateway.credential"); },
};

class ApiError extends Error {
  constructor(message, status, code) { super(message); this.status = status; this.code = code; }
}

async function api(method, path, body, accept) {
  const headers = { accept: accept || "application/json" };
  if (body !== undefined) headers["content-type"] = "application/json";
  const c = credential.get();
  if (c && c.kind === "key") headers["x-api-key"] = c.value;
  if (c && c.kind === "bearer") headers.authorization = `Bearer ${c.value}`;
  const resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await resp.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = null; }
  if (resp.status === 401) {
    signIn(c ? "That credential was not accepted." : "This gateway asks who you are.");
    throw new ApiError("sign in to go on", 401);
  }
  if (!resp.ok) {
    const message = (json && (json.error || json.message)) || `${resp.status} ${resp.statusText}`;
    throw new ApiError(`${message}${json && json.code !== undefined ? ` (code ${json.code})` : ""}`, resp.status, json && json.code);
  }
  return json;
}

const idPath = (id) => encodeURIComponent(id.join(DELIM));
const nsRoute = (id, op) => (id.length ? `/v1/namespace/${idPath(id)}/${op}` : `/v1/namespace/${op}`);
const tableRoute = (id, op) => `/v1/table/${idPath(id)}/${op}`;
const qs = (params) => {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") p.set(k, v);
  const s = p.toString();
  return s ? `?${s}` : "";
};

// What the caller may do on an object: "none", "read", "write" or "admin".
const ORDER = ["none", "read", "write", "admin"];
async function level(id) {
  const me = await api("GET", `/v1/whoami${qs({ id: id.join(DELIM) })}`);
  return me.level || "none";
}
const atLeast = (have, need) => ORDER.indexOf(have) >= ORDER.indexOf(need);

// ---------- sign-in ----------

function signIn(why) {
  const dialog = document.getElementById("sign-in");
  document.getElementById("sign-in-why").textContent = why || "";
  document.getElementById("sign-in-value").value = "";
  if (!dialog.open) dialog.showModal();
}

function setupSignIn() {
  document.getElementById("sign-in-form").addEventListener("submit", () => {
    credential.set(document.getElementById("sign-in-kind").value, document.getElementById("sign-in-value").value);
    start();
  });
  document.getElementById("sign-out").addEventListener("click", () => {
    credential.clear();
    document.getElementById("tree").replaceChildren();
    show(el("p", {}, "Signed out."));
    document.getElementById("who").textContent = "";
    document.getElementById("sign-out").hidden = true;
    signIn("Signed out.");
  });
}

// ---------- the namespace tree (lazy, paged) ----------

async function listPage(path, key, token, limit) {
  const answer = await api("GET", `${path}${qs({ page_token: token, limit: limit || PAGE })}`);
  return { items: answer[key] || [], token: answer.page_token || null };
}

// Counts a namespace's tables from one page of its listing: exact up to `cap`, "cap+"
// beyond, so a count costs one request however many tables the namespace holds.
async function countTables(id, cap = 200) {
  const page = await listPage(nsRoute(id, "table/list"), "tables", null, cap);
  return page.token ? `${page.items.length}+` : String(page.items.length);
}

function treeNode(id) {
  const children = el("ul", { hidden: true });
  const count = el("span", { class: "muted" });
  let loaded = false;
  const toggle = el("button", { class: "toggle", type: "button", "aria-label": "expand" }, "▸");
  toggle.addEventListener("click", async () => {
    children.hidden = !children.hidden;
    toggle.textContent = children.hidden ? "▸" : "▾";
    if (!loaded) { loaded = true; await fillTree(children, id); }
  });
  countTables(id).then((n) => { count.textContent = ` (${n})`; }, () => {});
  return el("li", {}, toggle, el("a", { href: `#/ns/${idPath(id)}` }, id[id.length - 1]), count, children);
}

async function fillTree(list, id, token) {
  try {
    const page = await listPage(nsRoute(id, "list"), "namespaces", token);
    for (const name of page.items) list.append(treeNode([...id, name]));
    if (page.token) {
      const more = el("li", {}, el("button", { type: "button", onclick: () => { more.remove(); fillTree(list, id, page.token); } }, "more…"));
      list.append(more);
    }
  } catch (e) {
    list.append(el("li", {}, errorBox(e)));
  }
}

// ---------- a namespace ----------

async function namespaceView(id) {
  const title = id.length ? id.join(" / ") : "Warehouse";
  const tables = el("tbody");
  const namespaces = el("tbody");
  const view = show(el("h1", {}, title));
  try {
    if (id.length) {
      const described = await api("POST", nsRoute(id, "describe"), { id });
      const props = Object.entries(described.properties || {});
      if (props.length) view.append(el("h2", {}, "Properties"), table(["property", "value"], props));
    }
    view.append(el("h2", {}, "Namespaces"), el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "name"), el("th", {}, "tables"))), namespaces));
    await pagedRows(namespaces, nsRoute(id, "list"), "namespaces", (name) => {
      const child = [...id, name];
      const n = el("td", { class: "num" }, "…");
      countTables(child).then((c) => { n.textContent = c; }, () => { n.textContent = "?"; });
      return el("tr", {}, el("td", {}, el("a", { href: `#/ns/${idPath(child)}` }, name)), n);
    });
    view.append(el("h2", {}, "Tables"), el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "name"))), tables));
    await pagedRows(tables, nsRoute(id, "table/list"), "tables", (name) =>
      el("tr", {}, el("td", {}, el("a", { href: `#/table/${idPath([...id, name])}` }, name))));
    // Creating a namespace needs admin on it, which grants on its parent give; so does
    // seeing, undropping and purging the tables dropped from it.
    if (atLeast(await level(id), "admin")) {
      view.append(createNamespaceForm(id));
      if (id.length) view.append(await droppedView(id));
    }
  } catch (e) {
    view.append(errorBox(e));
  }
}

// Tables dropped from namespace `id` and kept for undrop (format 3 warehouses): each can be
// undropped under its name (or another) or purged, which deletes its data (name typed).
async function droppedView(id) {
  const section = el("section", { id: "dropped" }, el("h2", {}, "Recently dropped"));
  try {
    const answer = await api("GET", nsRoute(id, "dropped_tables"));
    const dropped = answer.dropped || [];
    if (!dropped.length) {
      section.append(el("p", { class: "muted" }, "No dropped table is kept here."));
      return section;
    }
    const rows = dropped.map((d) => {
      const name = d.id[d.id.length - 1];
      const out = el("span");
      const as = el("input", { name: "as", placeholder: name, autocomplete: "off", size: 12 });
      const confirmName = el("input", { name: "confirm", placeholder: `type ${name} to purge`, autocomplete: "off", size: 14 });
      const undrop = el("button", { type: "button", class: "undrop", onclick: async () => {
        const body = { drop_id: d.drop_id };
        if (as.value && as.value !== name) body.new_id = [...d.id.slice(0, -1), as.value];
        try {
          await api("POST", tableRoute(d.id, "undrop"), body);
          location.hash = `#/table/${idPath(body.new_id || d.id)}`;
        } catch (e) { out.replaceChildren(errorBox(e)); }
      } }, "Undrop");
      const purge = el("button", { type: "button", class: "danger purge", onclick: async () => {
        if (confirmName.value !== name) {
          out.replaceChildren(errorBox(`Type the table's name, ${name}, to purge it.`));
          return;
        }
        try {
          await api("POST", tableRoute(d.id, "purge"), { drop_id: d.drop_id });
          route();
        } catch (e) { out.replaceChildren(errorBox(e)); }
      } }, "Purge");
      const size = d.bytes === undefined ? "" : `${fmtBytes(d.bytes)} in ${d.objects} objects`;
      return el("tr", { "data-drop-id": d.drop_id },
        el("td", {}, name), el("td", {}, fmtTime(d.dropped_at_ms)), el("td", {}, d.dropped_by || ""),
        el("td", {}, fmtTime(d.purge_after_ms)), el("td", { class: "num" }, size),
        el("td", {}, el("label", {}, "as ", as), undrop, " ", confirmName, purge, out));
    });
    const headers = ["name", "dropped", "by", "purged after", "size", ""];
    section.append(el("table", {}, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
      el("tbody", {}, rows)));
  } catch (e) {
    section.append(errorBox(e));
  }
  return section;
}

async function pagedRows(body, path, key, row, token) {
  const page = await listPage(path, key, token);
  for (const item of page.items) body.append(row(item));
  if (!page.items.length && !token) body.append(el("tr", {}, el("td", { class: "muted" }, "none")));
  if (page.token) {
    const more = el("tr", {}, el("td", {}, el("button", {
      type: "button", onclick: () => { more.remove(); pagedRows(body, path, key, row, page.token); },
    }, "more…")));
    body.append(more);
  }
}

function createNamespaceForm(parent) {
  const name = el("input", { name: "name", required: true, placeholder: "name" });
  const out = el("span");
  return el("form", {
    class: "inline", id: "create-namespace",
    onsubmit: async (ev) => {
      ev.preventDefault();
      try {
        await api("POST", `/v1/namespace/${idPath([...parent, name.value])}/create`, { id: [...parent, name.value] });
        route();
      } catch (e) { out.replaceChildren(errorBox(e)); }
    },
  }, el("label", {}, "New namespace", name), el("button", { type: "submit" }, "Create namespace"), out);
}

// ---------- a table ----------

const TABS = ["overview", "rows", "search", "versions", "transactions"];

async function tableView(id, tab, params) {
  const tabs = el("div", { class: "tabs" }, TABS.map((t) =>
    el("a", { href: `#/table/${idPath(id)}/${t}`, class: t === tab ? "on" : "" }, t[0].toUpperCase() + t.slice(1))));
  const body = el("div");
  show(el("h1", {}, id.join(" / ")), tabs, body);
  try {
    const described = await api("POST", `${tableRoute(id, "describe")}?load_detailed_metadata=true`, { id, vend_credentials: false });
    const views = { overview: overview, rows: rowsView, search: searchView, versions: versionsView, transactions: transactionsView };
    await (views[tab] || overview)(id, described, body, params);
  } catch (e) {
    body.append(errorBox(e));
  }
}

// Storage option keys whose values are secrets (never shown, even if a policy vends them).
const SECRET = /secret|token|password|session|credential|key_id|access_key/i;

function schemaRows(fields, depth = 0) {
  const rows = [];
  for (const f of fields || []) {
    rows.push([el("td", { class: "mono" }, `${"  ".repeat(depth)}${f.name}`), typeName(f.type), f.nullable ? "yes" : "no"]);
    // A struct's fields below it; a list's item type is part of the list's name.
    if (f.type && f.type.type === "struct") rows.push(...schemaRows(f.type.fields, depth + 1));
  }
  return rows;
}

function typeName(t) {
  if (!t) return "";
  const name = t.type || "";
  if (name === "fixed_size_list" || name === "list" || name === "large_list") {
    const item = t.fields && t.fields[0] ? typeName(t.fields[0].type) : "?";
    return `${name}<${item}>${t.length !== undefined && t.length !== null ? `[${t.length}]` : ""}`;
  }
  if (name === "struct") return "struct";
  return t.length !== undefined && t.length !== null ? `${name}(${t.length})` : name;
}

// Vector columns: fixed-size lists of floats.
function vectorColumns(schema) {
  return ((schema && schema.fields) || [])
    .filter((f) => f.type && f.type.type === "fixed_size_list" && f.type.fields && /float|half|double/.test(f.type.fields[0].type.type))
    .map((f) => f.name);
}

async function overview(id, described, body) {
  const [stats, indices, tags, branches, access] = await Promise.all([
    api("POST", tableRoute(id, "stats"), { id }).catch((e) => e),
    api("POST", tableRoute(id, "index/list"), { id }).catch((e) => e),
    api("POST", tableRoute(id, "tags/list"), { id }).catch((e) => e),
    api("POST", tableRoute(id, "branches/list"), { id }).catch((e) => e),
    level(id).catch(() => "none"),
  ]);
  const options = Object.entries(described.storage_options || {})
    .map(([k, v]) => [k, SECRET.test(k) ? "(hidden)" : v]);
  body.append(
    el("dl", {},
      el("dt", {}, "location"), el("dd", { class: "mono" }, described.location || ""),
      el("dt", {}, "version"), el("dd", {}, described.version ?? ""),
      el("dt", {}, "managed versioning"), el("dd", {}, described.managed_versioning ? "on" : "off"),
      ...(stats instanceof Error ? [el("dt", {}, "stats"), el("dd", {}, errorBox(stats))] : [
        el("dt", {}, "rows"), el("dd", { id: "num-rows" }, stats.num_rows),
        el("dt", {}, "size"), el("dd", {}, fmtBytes(stats.total_bytes)),
        el("dt", {}, "fragments"), el("dd", {}, `${stats.fragment_stats.num_fragments} (${stats.fragment_stats.num_small_fragments} small)`),
      ])),
    el("h2", {}, "Schema"),
    table(["column", "type", "nullable"], schemaRows(described.schema && described.schema.fields)),
    el("h2", {}, "Properties"),
    table(["property", "value"], Object.entries(described.properties || {})),
    el("h2", {}, "Storage options"),
    options.length ? table(["option", "value"], options) : el("p", { class: "muted" }, "none vended"),
  );
  body.append(el("h2", {}, "Indices"));
  if (indices instanceof Error) body.append(errorBox(indices));
  else {
    body.append(table(["name", "type", "columns", "indexed rows", "unindexed rows", "status"],
      (indices.indexes || []).map((i) => [i.index_name, i.index_type || "", (i.columns || []).join(", "),
        i.num_indexed_rows ?? "", i.num_unindexed_rows ?? "", i.status || ""]), { id: "indices" }));
  }
  body.append(el("h2", {}, "Tags"));
  if (tags instanceof Error) body.append(errorBox(tags));
  else body.append(table(["tag", "version", "branch"], Object.entries(tags.tags || {}).map(([n, t]) => [n, t.version, t.branch || ""])));
  if (atLeast(access, "write")) body.append(createTagForm(id, described.version));
  body.append(el("h2", {}, "Branches"));
  if (branches instanceof Error) body.append(errorBox(branches));
  else body.append(table(["branch", "from", "created"], Object.entries(branches.branches || {}).map(([n, b]) =>
    [n, `${b.parentBranch || "main"} @ ${b.parentVersion}`, fmtTime(b.createAt * 1000)])));
  const m = described.maintenance;
  if (m) {
    body.append(el("h2", {}, "Maintenance"), table(["task", "enabled", "last run", "outcome", "transaction"],
      ["compaction", "index", "cleanup"].map((t) => {
        const task = m[t] || {};
        const last = task.last_run || {};
        return [t, task.enabled ? "yes" : "no", task.last_run_at || "never", last.outcome || "", last.transaction_id || ""];
      })), m.running_on ? el("p", {}, `running now on ${m.running_on}`) : "");
  }
  if (atLeast(access, "admin")) body.append(dropTableForm(id));
}

function createTagForm(id, version) {
  const name = el("input", { name: "tag", required: true, placeholder: "tag" });
  const v = el("input", { name: "version", type: "number", min: 1, value: version ?? 1, required: true });
  const out = el("span");
  return el("form", {
    class: "inline", id: "create-tag",
    onsubmit: async (ev) => {
      ev.preventDefault();
      try {
        await api("POST", tableRoute(id, "tags/create"), { id, tag: name.value, version: Number(v.value) });
        route();
      } catch (e) { out.replaceChildren(errorBox(e)); }
    },
  }, el("label", {}, "New tag", name), el("label", {}, "at version", v), el("button", { type: "submit" }, "Create tag"), out);
}

function dropTableForm(id) {
  const name = id[id.length - 1];
  const confirmName = el("input", { name: "confirm", placeholder: name, autocomplete: "off" });
  const out = el("span");
  return el("form", {
    class: "inline", id: "drop-table",
    onsubmit: async (ev) => {
      ev.preventDefault();
      if (confirmName.value !== name) {
        out.replaceChildren(errorBox(`Type the table's name, ${name}, to drop it.`));
        return;
      }
      try {
        await api("POST", tableRoute(id, "drop"), { id });
        location.hash = `#/ns/${idPath(id.slice(0, -1))}`;
      } catch (e) { out.replaceChildren(errorBox(e)); }
    },
  }, el("h2", {}, "Drop"), el("label", {}, `Type ${name} to drop this table (kept for undrop under its namespace's Recently dropped, where the warehouse keeps drops)`, confirmName),
  el("button", { type: "submit", class: "danger" }, "Drop table"), out);
}

// ---------- rows and search: the query route's JSON view ----------

// A value as the page shows it: vectors shortened, binary as its size.
function cell(v) {
  if (v === null || v === undefined) return el("td", { class: "muted" }, "null");
  if (Array.isArray(v)) {
    const shown = v.slice(0, 4).map((x) => (typeof x === "number" ? Number(x.toPrecision(4)) : JSON.stringify(x)));
    return el("td", { class: "mono", title: `${v.length} values` }, `[${shown.join(", ")}${v.length > 4 ? `, … (${v.length})` : ""}]`);
  }
  if (typeof v === "object" && v.bytes !== undefined && Object.keys(v).length === 1) return el("td", { class: "muted" }, `${v.bytes} bytes`);
  if (typeof v === "object") return el("td", { class: "mono" }, JSON.stringify(v));
  return el("td", typeof v === "number" ? { class: "num" } : {}, String(v));
}

function resultTable(answer, extra) {
  const cols = answer.columns.map((c) => c.name);
  return el("table", { id: "rows" },
    el("thead", {}, el("tr", {}, cols.map((c) => el("th", {}, c)), extra ? el("th", {}) : "")),
    el("tbody", {}, answer.rows.map((r) => el("tr", {}, cols.map((c) => cell(r[c])), extra ? el("td", {}, extra(r)) : ""))));
}

async function refOptions(id) {
  const [versions, tags] = await Promise.all([
    api("POST", `${tableRoute(id, "version/list")}${qs({ descending: true, limit: 20 })}`, { id }),
    api("POST", tableRoute(id, "tags/list"), { id }).catch(() => ({ tags: {} })),
  ]);
  return { versions: versions.versions || [], tags: Object.entries(tags.tags || {}) };
}

// version / tag / branch chooser: answers { version, branch } for the query.
function refChooser(refs, params) {
  const select = el("select", { name: "ref" },
    el("option", { value: "" }, "latest"),
    refs.versions.map((v) => el("option", { value: `v:${v.version}` }, `version ${v.version}`)),
    refs.tags.map(([n, t]) => el("option", { value: `t:${n}` }, `tag ${n} (v${t.version})`)));
  const branch = el("input", { name: "branch", placeholder: "main" });
  if (params.ref) select.value = params.ref;
  if (params.branch) branch.value = params.branch;
  const resolve = () => {
    const [kind, value] = [select.value.slice(0, 2), select.value.slice(2)];
    const at = {};
    if (kind === "v:") at.version = Number(value);
    if (kind === "t:") at.version = Object.fromEntries(refs.tags)[value].version;
    if (branch.value) at.branch = branch.value;
    return at;
  };
  return { nodes: [el("label", {}, "Version or tag", select), el("label", {}, "Branch", branch)], resolve, select, branch };
}

async function rowsView(id, described, body, params) {
  const fields = ((described.schema && described.schema.fields) || []).map((f) => f.name);
  const refs = await refOptions(id);
  const chooser = refChooser(refs, params);
  const filter = el("input", { name: "filter", size: 40, placeholder: "SQL filter, e.g. id > 10", value: params.filter || "" });
  const chosen = params.columns ? params.columns.split(",") : fields;
  const boxes = fields.map((f) => el("label", {}, el("input", { type: "checkbox", name: "column", value: f, checked: chosen.includes(f) }), ` ${f}`));
  const offset = Number(params.offset || 0);
  const out = el("div", { id: "rows-out" });
  const go = (newOffset) => {
    const at = chooser.resolve();
    const cols = boxes.map((b) => b.firstChild).filter((b) => b.checked).map((b) => b.value);
    location.hash = `#/table/${idPath(id)}/rows${qs({
      ref: chooser.select.value, branch: chooser.branch.value, filter: filter.value,
      columns: cols.length === fields.length ? "" : cols.join(","), offset: newOffset || "",
    })}`;
    return at;
  };
  body.append(el("form", { class: "inline", id: "rows-form", onsubmit: (ev) => { ev.preventDefault(); go(0); } },
    ...chooser.nodes, el("label", {}, "Filter", filter), el("button", { type: "submit" }, "Show")),
  el("div", { class: "columns" }, boxes), out);
  const at = chooser.resolve();
  const query = { id, k: ROWS_PAGE, offset, columns: chosen, ...at };
  if (params.filter) query.filter = params.filter;
  try {
    const answer = await api("POST", tableRoute(id, "query"), query, "application/json");
    const vectors = vectorColumns(described.schema);
    out.append(resultTable(answer, vectors.length ? (r) => (Array.isArray(r[vectors[0]]) ? el("button", {
      type: "button", class: "search-like",
      onclick: () => { sessionStorage.setItem("lance-gateway.query-vector", JSON.stringify(r[vectors[0]])); location.hash = `#/table/${idPath(id)}/search`; },
    }, "search like this") : "") : null),
    el("p", { class: "muted" }, `rows ${offset + 1}–${offset + answer.rows.length}`),
    offset > 0 ? el("button", { type: "button", onclick: () => go(Math.max(0, offset - ROWS_PAGE)) }, "previous") : "",
    answer.rows.length === ROWS_PAGE ? el("button", { type: "button", id: "next-rows", onclick: () => go(offset + ROWS_PAGE) }, "next") : "");
  } catch (e) {
    out.append(errorBox(e));
  }
}

async function searchView(id, described, body) {
  const vectors = vectorColumns(described.schema);
  const indices = await api("POST", tableRoute(id, "index/list"), { id }).catch(() => ({ indexes: [] }));
  const fts = (indices.indexes || []).filter((i) => /inverted|fts/i.test(i.index_type || ""));
  const column = el("select", { name: "vector_column" }, vectors.map((v) => el("option", { value: v }, v)));
  const vector = el("textarea", { name: "vector", placeholder: "[0.1, 0.2, …]" }, sessionStorage.getItem("lance-gateway.query-vector") || "");
  const k = el("input", { name: "k", type: "number", min: 1, max: 1000, value: 10 });
  const distance = el("select", { name: "distance_type" }, ["l2", "cosine", "dot"].map((d) => el("option", { value: d }, d)));
  const filter = el("input", { name: "filter", size: 30, placeholder: "optional SQL filter" });
  const out = el("div", { id: "search-out" });
  const run = async (query) => {
    out.replaceChildren(el("p", { class: "muted" }, "searching…"));
    try {
      const answer = await api("POST", tableRoute(id, "query"), query, "application/json");
      out.replaceChildren(resultTable(answer));
    } catch (e) { out.replaceChildren(errorBox(e)); }
  };
  if (vectors.length) {
    body.append(el("form", {
      id: "search-form",
      onsubmit: (ev) => {
        ev.preventDefault();
        let v;
        try { v = JSON.parse(vector.value); } catch { out.replaceChildren(errorBox("The vector is not a JSON array of numbers.")); return; }
        if (!Array.isArray(v) || v.some((x) => typeof x !== "number")) { out.replaceChildren(errorBox("The vector is not a JSON array of numbers.")); return; }
        const q = { id, vector: v, vector_column: column.value, k: Number(k.value), distance_type: distance.value };
        if (filter.value) q.filter = filter.value;
        run(q);
      },
    }, el("h2", {}, "Vector search"), el("label", {}, "Vector (JSON)", vector),
    el("div", { class: "inline" }, el("label", {}, "Column", column), el("label", {}, "k", k), el("label", {}, "Distance", distance),
      el("label", {}, "Filter", filter), el("button", { type: "submit" }, "Search"))));
  } else {
    body.append(el("p", { class: "muted" }, "This table has no vector column."));
  }
  if (fts.length) {
    const text = el("input", { name: "text", size: 30, placeholder: "words" });
    body.append(el("form", {
      class: "inline", id: "fts-form",
      onsubmit: (ev) => {
        ev.preventDefault();
        run({ id, k: Number(k.value), full_text_query: { string_query: { query: text.value, columns: fts.flatMap((i) => i.columns || []) } } });
      },
    }, el("h2", {}, "Full-text search"), el("label", {}, `Text (in ${fts.flatMap((i) => i.columns || []).join(", ")})`, text),
    el("button", { type: "submit" }, "Search text")));
  }
  body.append(out);
}

async function versionsView(id, described, body, params) {
  const answer = await api("POST", `${tableRoute(id, "version/list")}${qs({ descending: true, limit: 20, page_token: params.after })}`, { id });
  body.append(table(["version", "time", "operation", "rows", "fragments"], (answer.versions || []).map((v) => {
    const m = v.metadata || {};
    return [v.version, fmtTime(v.timestamp_millis), m.operation || "", m.total_rows ?? "", m.total_fragments ?? ""];
  })));
  if (answer.page_token) body.append(el("a", { href: `#/table/${idPath(id)}/versions${qs({ after: answer.page_token })}` }, "older…"));
}

async function transactionsView(id, described, body) {
  const answer = await api("GET", `${tableRoute(id, "transaction/list")}${qs({ limit: PAGE })}`);
  body.append(table(["transaction", "operation", "status", "started", "details"], (answer.transactions || []).map((t) => {
    const p = t.properties || {};
    const details = Object.entries(p).filter(([k]) => !/\.(operation|started_at_ms|updated_at_ms|table|target)$/.test(k))
      .map(([k, v]) => `${k.replace(/^lance_gateway\./, "")}=${v}`);
    return [el("td", { class: "mono" }, t.id), `${p["lance_gateway.operation"] || ""} ${p["lance_gateway.target"] || ""}`.trim(),
      t.status, fmtTime(p["lance_gateway.started_at_ms"]), details.sort().join(" ")];
  })));
  if (!(answer.transactions || []).length) body.append(el("p", { class: "muted" }, "No transaction of this table in the last day."));
}

// ---------- routing ----------

function parseHash() {
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const parts = path.split("/").filter(Boolean);
  return { parts, params: Object.fromEntries(new URLSearchParams(query || "")) };
}

function decodeId(part) {
  return decodeURIComponent(part).split(DELIM).filter((s) => s !== "");
}

async function route() {
  const { parts, params } = parseHash();
  if (parts[0] === "table" && parts[1]) return tableView(decodeId(parts[1]), parts[2] || "overview", params);
  return namespaceView(parts[0] === "ns" && parts[1] ? decodeId(parts[1]) : []);
}

async function start() {
  let me;
  try {
    me = await api("GET", "/v1/whoami");
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) show(errorBox(e));
    return;
  }
  document.getElementById("sign-in").close();
  document.getElementById("who").textContent = me.principal ? `signed in as ${me.principal}` : "";
  document.getElementById("sign-out").hidden = !credential.get();
  const tree = el("ul");
  document.getElementById("tree").replaceChildren(el("a", { href: "#/" }, "Warehouse"), tree);
  fillTree(tree, []);
  route();
}

window.addEventListener("hashchange", route);
setupSignIn();
start();
