// LanceDB's Node client (@lancedb/lancedb 0.31.0, apache-arrow 18.1.0), driven one call at a
// time by tests/interop/test_node.py against lance-gateway.
//
// A line of JSON on stdin is one command, `{"op": "<name>", "seq": <n>, ...arguments}`; a
// line of JSON on stdout is its answer, `{"seq": <n>, "ok": true, "result": ...}` or
// `{"seq": <n>, "ok": false, "error": "<message>", "name": "<error class>"}`. The pytest side checks every answer against what pylance reads
// from the table's location directly, so this script only calls the client and reports what
// it answered; it asserts nothing itself.
//
// One connection per process: `connect` with `mode` "namespace" (connectNamespace("rest",
// {uri, headers}): catalog routes on the gateway, data read and written by the client) or
// "remote" (connect("db://<name>", {apiKey, hostOverride}): every data operation sent to
// the gateway). Tables once created or opened are kept by their `handle` (default: their
// name) for the later commands that name it.
//
// Rows are made here from {n, start, seed} (a seeded generator, so a command names its data
// in a few bytes): id int64, text utf8 (every other row says "cats", the rest "dogs"),
// category utf8 ("a", "b", "c" in turn), score float64 (null on every seventh row) and
// vector fixed_size_list<float32>[8].
//
// Modules are found by Node's CommonJS resolution, so NODE_PATH may point at the installed
// node_modules (scripts/install-node-deps prints where they are). By hand:
//
//   NODE_PATH="$(scripts/install-node-deps | tail -n 1)/node_modules" \
//     node tests/interop/node/driver.mjs
//   {"op": "connect", "mode": "remote", "uri": "http://127.0.0.1:2333", "apiKey": "lgk_..."}
//   {"op": "createTable", "name": "docs", "ns": [], "data": {"n": 10}}
//   {"op": "query", "table": "docs", "where": "id < 3", "select": ["id", "text"]}
import { createRequire } from "node:module";
import * as readline from "node:readline";

const require = createRequire(import.meta.url);
const lancedb = require("@lancedb/lancedb");
const arrow = require("apache-arrow");

export const DIM = 8;

function schemaOf(withVector = true) {
  const fields = [
    new arrow.Field("id", new arrow.Int64(), true),
    new arrow.Field("text", new arrow.Utf8(), true),
    new arrow.Field("category", new arrow.Utf8(), true),
    new arrow.Field("score", new arrow.Float64(), true),
  ];
  if (withVector) {
    fields.push(
      new arrow.Field(
        "vector",
        new arrow.FixedSizeList(DIM, new arrow.Field("item", new arrow.Float32(), true)),
        true,
      ),
    );
  }
  return new arrow.Schema(fields);
}

// mulberry32: a small seeded generator, so the same {n, start, seed} makes the same rows.
function generator(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function rowsOf({ n, start = 0, seed = 0, text }) {
  const next = generator(seed * 7919 + 17);
  const rows = [];
  for (let i = start; i < start + n; i++) {
    const vector = [];
    for (let d = 0; d < DIM; d++) vector.push(Math.fround(next()));
    rows.push({
      id: i,
      text: text ?? `item ${i} ${i % 2 ? "cats" : "dogs"}`,
      category: ["a", "b", "c"][i % 3],
      score: i % 7 === 0 ? null : Math.round(next() * 1000) / 10,
      vector,
    });
  }
  return rows;
}

function dataOf(spec) {
  return lancedb.makeArrowTable(rowsOf(spec), { schema: schemaOf() });
}

// An Arrow value as plain JSON: int64 as a number, vectors as arrays, dates as ISO text.
function plain(value) {
  if (value === null || value === undefined) return null;
  if (typeof value === "bigint") return Number(value);
  if (value instanceof Date) return value.toISOString();
  if (ArrayBuffer.isView(value)) return Array.from(value, plain);
  if (Array.isArray(value)) return value.map(plain);
  if (typeof value === "object") {
    if (typeof value.toArray === "function" && "length" in value) {
      return Array.from(value.toArray(), plain);
    }
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = plain(v);
    return out;
  }
  return value;
}

// An Arrow type named in a command: {"arrow": "Float32"} and the like.
function arrowType(spec) {
  const types = {
    Float32: () => new arrow.Float32(),
    Float64: () => new arrow.Float64(),
    Int32: () => new arrow.Int32(),
    Int64: () => new arrow.Int64(),
    Utf8: () => new arrow.Utf8(),
  };
  const make = types[spec.arrow];
  if (!make) throw new Error(`driver: unknown arrow type ${spec.arrow}`);
  return make();
}

function tableRows(table) {
  return table.toArray().map((row) => plain(row.toJSON()));
}

function schemaJson(schema) {
  return schema.fields.map((f) => ({ name: f.name, type: String(f.type), nullable: f.nullable }));
}

let db = null;
const tables = new Map();

function tableOf(cmd) {
  const t = tables.get(cmd.table);
  if (!t) throw new Error(`driver: no table handle '${cmd.table}' (create or open it first)`);
  return t;
}

function indexOf(config = {}) {
  const { type, ...options } = config;
  switch ((type ?? "").toLowerCase()) {
    case "ivf_pq":
      return lancedb.Index.ivfPq(options);
    case "ivf_flat":
      return lancedb.Index.ivfFlat(options);
    case "hnsw_sq":
      return lancedb.Index.hnswSq(options);
    case "btree":
      return lancedb.Index.btree();
    case "bitmap":
      return lancedb.Index.bitmap();
    case "label_list":
      return lancedb.Index.labelList();
    case "fts":
      return lancedb.Index.fts(options);
    case "":
      return undefined;
    default:
      throw new Error(`driver: unknown index type ${type}`);
  }
}

// A structured full-text query: {match: {query, column, ...options}}, {phrase: {query,
// column, slop}}, {multiMatch: {query, columns}}, {boost: {positive, negative,
// negativeBoost}}, {boolean: [[occur, query], ...]}.
function ftsQuery(spec) {
  if (spec.match) {
    const { query, column, ...options } = spec.match;
    return new lancedb.MatchQuery(query, column, options);
  }
  if (spec.phrase) return new lancedb.PhraseQuery(spec.phrase.query, spec.phrase.column, { slop: spec.phrase.slop });
  if (spec.multiMatch) return new lancedb.MultiMatchQuery(spec.multiMatch.query, spec.multiMatch.columns);
  if (spec.boost) {
    return new lancedb.BoostQuery(ftsQuery(spec.boost.positive), ftsQuery(spec.boost.negative), {
      negativeBoost: spec.boost.negativeBoost,
    });
  }
  if (spec.boolean) return new lancedb.BooleanQuery(spec.boolean.map(([occur, q]) => [occur, ftsQuery(q)]));
  throw new Error(`driver: unknown full-text query ${JSON.stringify(spec)}`);
}

// The common tail of a query: projection, filter, limit, offset, order, row ids.
function shape(q, cmd) {
  if (cmd.where !== undefined) q = q.where(cmd.where);
  if (cmd.select !== undefined) q = q.select(cmd.select);
  if (cmd.limit !== undefined) q = q.limit(cmd.limit);
  if (cmd.offset !== undefined) q = q.offset(cmd.offset);
  if (cmd.orderBy !== undefined) q = q.orderBy(cmd.orderBy);
  if (cmd.withRowId) q = q.withRowId();
  if (cmd.fastSearch) q = q.fastSearch();
  return q;
}

async function rowsAndSchema(q) {
  const result = await q.toArrow();
  return { rows: tableRows(result), schema: schemaJson(result.schema) };
}

const ops = {
  async connect(cmd) {
    if (cmd.mode === "namespace") {
      const config = { uri: cmd.uri };
      if (cmd.headers) config.headers = cmd.headers;
      const options = {};
      if (cmd.storageOptions) options.storageOptions = cmd.storageOptions;
      if (cmd.readConsistencyInterval !== undefined) {
        options.readConsistencyInterval = cmd.readConsistencyInterval;
      }
      db = await lancedb.connectNamespace("rest", config, options);
    } else if (cmd.mode === "remote") {
      // The client's own retry and timeout settings unless a command names others: what it
      // retries (and how the gateway's answers make it retry) is part of what is tested.
      const options = { apiKey: cmd.apiKey, hostOverride: cmd.uri, region: "us-east-1" };
      if (cmd.clientConfig) options.clientConfig = cmd.clientConfig;
      db = await lancedb.connect(`db://${cmd.database ?? "gateway"}`, options);
    } else {
      throw new Error(`driver: unknown mode ${cmd.mode}`);
    }
    tables.clear();
    return { display: db.display() };
  },

  // ------------------------------------------------------------------ namespaces
  async createNamespace(cmd) {
    const options = {};
    if (cmd.mode) options.mode = cmd.mode;
    if (cmd.properties) options.properties = cmd.properties;
    return plain(await db.createNamespace(cmd.path, options));
  },
  async listNamespaces(cmd) {
    const options = {};
    if (cmd.limit !== undefined) options.limit = cmd.limit;
    if (cmd.pageToken !== undefined) options.pageToken = cmd.pageToken;
    return plain(await db.listNamespaces(cmd.path, options));
  },
  async describeNamespace(cmd) {
    return plain(await db.describeNamespace(cmd.path));
  },
  async dropNamespace(cmd) {
    const options = {};
    if (cmd.mode) options.mode = cmd.mode;
    if (cmd.behavior) options.behavior = cmd.behavior;
    return plain(await db.dropNamespace(cmd.path, options));
  },

  // ---------------------------------------------------------------------- tables
  async createTable(cmd) {
    const options = {};
    if (cmd.mode) options.mode = cmd.mode;
    if (cmd.existOk) options.existOk = true;
    if (cmd.storageOptions) options.storageOptions = cmd.storageOptions;
    let data;
    if (cmd.objects) {
      // Plain JS objects with an explicit schema: the path most Node users take.
      data = rowsOf(cmd.data);
      options.schema = schemaOf();
    } else {
      data = dataOf(cmd.data);
    }
    const table = await db.createTable(cmd.name, data, cmd.ns ?? [], options);
    tables.set(cmd.handle ?? cmd.name, table);
    return { name: table.name, version: await table.version() };
  },
  async createEmptyTable(cmd) {
    const options = {};
    if (cmd.mode) options.mode = cmd.mode;
    if (cmd.existOk) options.existOk = true;
    const table = await db.createEmptyTable(cmd.name, schemaOf(cmd.vector ?? true), cmd.ns ?? [], options);
    tables.set(cmd.handle ?? cmd.name, table);
    return { name: table.name, version: await table.version() };
  },
  async openTable(cmd) {
    const options = {};
    if (cmd.storageOptions) options.storageOptions = cmd.storageOptions;
    if (cmd.version !== undefined) options.version = cmd.version;
    const table = await db.openTable(cmd.name, cmd.ns ?? [], options);
    tables.set(cmd.handle ?? cmd.name, table);
    return { name: table.name, version: await table.version() };
  },
  async tableNames(cmd) {
    const options = {};
    if (cmd.limit !== undefined) options.limit = cmd.limit;
    if (cmd.startAfter !== undefined) options.startAfter = cmd.startAfter;
    if (cmd.ns === undefined) return await db.tableNames(options);
    return await db.tableNames(cmd.ns, options);
  },
  async dropAllTables(cmd) {
    await db.dropAllTables(cmd.ns ?? []);
    return null;
  },
  async cloneTable(cmd) {
    const table = await db.cloneTable(cmd.name, cmd.sourceUri, cmd.options ?? {});
    tables.set(cmd.handle ?? cmd.name, table);
    return { name: table.name, version: await table.version() };
  },
  // Any other method of a table, called with JSON arguments (for the calls that take and
  // answer plain values: prewarmIndex, prewarmData, setUnenforcedPrimaryKey, ...).
  async callTable(cmd) {
    const table = tableOf(cmd);
    if (typeof table[cmd.method] !== "function") throw new Error(`driver: no method ${cmd.method}`);
    return plain((await table[cmd.method](...(cmd.args ?? []))) ?? null);
  },
  async dropTable(cmd) {
    await db.dropTable(cmd.name, cmd.ns ?? []);
    return null;
  },
  async renameTable(cmd) {
    const options = {};
    if (cmd.ns !== undefined) options.namespacePath = cmd.ns;
    if (cmd.newNs !== undefined) options.newNamespacePath = cmd.newNs;
    await db.renameTable(cmd.name, cmd.newName, options);
    return null;
  },

  // -------------------------------------------------------------- table: writes
  async add(cmd) {
    const table = tableOf(cmd);
    const options = {};
    if (cmd.mode) options.mode = cmd.mode;
    return plain(await table.add(dataOf(cmd.data), options));
  },
  async update(cmd) {
    const table = tableOf(cmd);
    const opts = {};
    if (cmd.where !== undefined) opts.where = cmd.where;
    if (cmd.values) opts.values = cmd.values;
    if (cmd.valuesSql) opts.valuesSql = cmd.valuesSql;
    return plain(await table.update(opts));
  },
  async delete(cmd) {
    return plain(await tableOf(cmd).delete(cmd.where));
  },
  async mergeInsert(cmd) {
    let builder = tableOf(cmd).mergeInsert(cmd.on);
    if (cmd.whenMatchedUpdateAll) {
      builder = builder.whenMatchedUpdateAll(
        typeof cmd.whenMatchedUpdateAll === "string" ? { where: cmd.whenMatchedUpdateAll } : undefined,
      );
    }
    if (cmd.whenNotMatchedInsertAll) builder = builder.whenNotMatchedInsertAll();
    if (cmd.whenNotMatchedBySourceDelete) {
      builder = builder.whenNotMatchedBySourceDelete(
        typeof cmd.whenNotMatchedBySourceDelete === "string"
          ? { where: cmd.whenNotMatchedBySourceDelete }
          : undefined,
      );
    }
    return plain(await builder.execute(dataOf(cmd.data)));
  },

  // --------------------------------------------------------------- table: reads
  async countRows(cmd) {
    return await tableOf(cmd).countRows(cmd.filter);
  },
  async query(cmd) {
    return await rowsAndSchema(shape(tableOf(cmd).query(), cmd));
  },
  async toArrow(cmd) {
    const result = await tableOf(cmd).toArrow();
    return { rows: tableRows(result), schema: schemaJson(result.schema) };
  },
  async vectorSearch(cmd) {
    let q = tableOf(cmd).vectorSearch(cmd.vector);
    for (const more of cmd.moreVectors ?? []) q = q.addQueryVector(more);
    if (cmd.column) q = q.column(cmd.column);
    if (cmd.minimumNprobes !== undefined) q = q.minimumNprobes(cmd.minimumNprobes);
    if (cmd.maximumNprobes !== undefined) q = q.maximumNprobes(cmd.maximumNprobes);
    if (cmd.distanceRange) q = q.distanceRange(cmd.distanceRange[0] ?? undefined, cmd.distanceRange[1] ?? undefined);
    if (cmd.ef !== undefined) q = q.ef(cmd.ef);
    if (cmd.distanceType) q = q.distanceType(cmd.distanceType);
    if (cmd.nprobes !== undefined) q = q.nprobes(cmd.nprobes);
    if (cmd.refineFactor !== undefined) q = q.refineFactor(cmd.refineFactor);
    if (cmd.bypassVectorIndex) q = q.bypassVectorIndex();
    if (cmd.postfilter) q = q.postfilter();
    return await rowsAndSchema(shape(q, cmd));
  },
  async fullTextSearch(cmd) {
    const query = cmd.structured ? ftsQuery(cmd.structured) : cmd.query;
    let q = tableOf(cmd).search(query, "fts", cmd.columns);
    return await rowsAndSchema(shape(q, cmd));
  },
  async take(cmd) {
    const table = tableOf(cmd);
    let q = cmd.rowIds ? table.takeRowIds(cmd.rowIds) : table.takeOffsets(cmd.offsets);
    if (cmd.select !== undefined) q = q.select(cmd.select);
    if (cmd.withRowId) q = q.withRowId();
    return await rowsAndSchema(q);
  },
  async explainPlan(cmd) {
    return await shape(tableOf(cmd).query(), cmd).explainPlan(cmd.verbose ?? false);
  },
  async analyzePlan(cmd) {
    return await shape(tableOf(cmd).query(), cmd).analyzePlan();
  },
  async outputSchema(cmd) {
    return schemaJson(await shape(tableOf(cmd).query(), cmd).outputSchema());
  },
  async schema(cmd) {
    return schemaJson(await tableOf(cmd).schema());
  },
  async stats(cmd) {
    return plain(await tableOf(cmd).stats());
  },

  // ------------------------------------------------------------- table: indices
  async createIndex(cmd) {
    const options = {};
    const config = indexOf(cmd.config);
    if (config) options.config = config;
    if (cmd.name) options.name = cmd.name;
    if (cmd.replace !== undefined) options.replace = cmd.replace;
    await tableOf(cmd).createIndex(cmd.column, options);
    return null;
  },
  async listIndices(cmd) {
    return plain(await tableOf(cmd).listIndices());
  },
  async indexStats(cmd) {
    return plain((await tableOf(cmd).indexStats(cmd.name)) ?? null);
  },
  async waitForIndex(cmd) {
    await tableOf(cmd).waitForIndex(cmd.names, cmd.timeout ?? 30);
    return null;
  },
  async dropIndex(cmd) {
    await tableOf(cmd).dropIndex(cmd.name);
    return null;
  },

  // -------------------------------------------------------------- table: schema
  async addColumns(cmd) {
    // SQL expressions ({name, valueSql}), or new all-null fields ({name, arrow}).
    const fields = cmd.columns.filter((c) => c.arrow);
    const columns = fields.length
      ? fields.map((c) => new arrow.Field(c.name, arrowType(c), true))
      : cmd.columns;
    return plain(await tableOf(cmd).addColumns(columns));
  },
  async alterColumns(cmd) {
    // A dataType given as {"arrow": ...} is passed as an Arrow type, a string as it is.
    const alterations = cmd.alterations.map((a) =>
      a.dataType && typeof a.dataType === "object" ? { ...a, dataType: arrowType(a.dataType) } : a,
    );
    return plain(await tableOf(cmd).alterColumns(alterations));
  },
  async updateFieldMetadata(cmd) {
    return plain(await tableOf(cmd).updateFieldMetadata(cmd.updates));
  },
  async dropColumns(cmd) {
    return plain(await tableOf(cmd).dropColumns(cmd.columns));
  },

  // ---------------------------------------------------- table: versions and tags
  async version(cmd) {
    return await tableOf(cmd).version();
  },
  async listVersions(cmd) {
    return plain(await tableOf(cmd).listVersions());
  },
  async checkout(cmd) {
    await tableOf(cmd).checkout(cmd.version);
    return await tableOf(cmd).version();
  },
  async checkoutLatest(cmd) {
    await tableOf(cmd).checkoutLatest();
    return await tableOf(cmd).version();
  },
  async restore(cmd) {
    await tableOf(cmd).restore();
    return await tableOf(cmd).version();
  },
  async tags(cmd) {
    const tags = await tableOf(cmd).tags();
    switch (cmd.action) {
      case "list": {
        // TagContents are native objects whose fields are getters: copied by name.
        const out = {};
        for (const [name, t] of Object.entries(await tags.list())) {
          out[name] = { version: t.version, manifestSize: t.manifestSize };
        }
        return out;
      }
      case "create":
        await tags.create(cmd.tag, cmd.version);
        return null;
      case "update":
        await tags.update(cmd.tag, cmd.version);
        return null;
      case "getVersion":
        return await tags.getVersion(cmd.tag);
      case "delete":
        await tags.delete(cmd.tag);
        return null;
      default:
        throw new Error(`driver: unknown tags action ${cmd.action}`);
    }
  },
  async branches(cmd) {
    const branches = await tableOf(cmd).branches();
    switch (cmd.action) {
      case "list": {
        const out = {};
        for (const [name, b] of Object.entries(await branches.list())) {
          out[name] = { parentBranch: b.parentBranch ?? null, parentVersion: b.parentVersion };
        }
        return out;
      }
      case "create": {
        const table = await branches.create(cmd.name, cmd.fromRef, cmd.fromVersion);
        tables.set(cmd.handle ?? cmd.name, table);
        return { version: await table.version() };
      }
      case "checkout": {
        const table = await branches.checkout(cmd.name, cmd.version);
        tables.set(cmd.handle ?? cmd.name, table);
        return { version: await table.version() };
      }
      case "delete":
        await branches.delete(cmd.name);
        return null;
      default:
        throw new Error(`driver: unknown branches action ${cmd.action}`);
    }
  },
  async optimize(cmd) {
    return plain(await tableOf(cmd).optimize(cmd.options ?? {}));
  },
};

async function run(cmd) {
  const op = ops[cmd.op];
  if (!op) throw new Error(`driver: unknown op ${cmd.op}`);
  return await op(cmd);
}

const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  let answer;
  let seq = null;
  try {
    const { seq: n, ...cmd } = JSON.parse(line);
    seq = n ?? null;
    answer = { seq, ok: true, result: (await run(cmd)) ?? null };
  } catch (e) {
    answer = { seq, ok: false, error: String(e?.message ?? e), name: e?.constructor?.name ?? "Error" };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}
