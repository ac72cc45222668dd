// The epochal dashboard: plain JavaScript, inline SVG and canvas, nothing loaded from the network.
// It reads the REST API of the server that served it (the cookie carries the token) every few
// seconds while shown: #/ lists the jobs, #/jobs/<id> shows one job, updated in place.
"use strict";

// How often the page polls while it is shown: every 3 s by default (Flink's web UI refreshes as
// often), 1 s or 10 s as chosen in the header (kept in the browser). Each poll costs the browser
// layout, paint and software raster of what changed: on a machine whose cores the job fills,
// the refresh rate is what a watching browser costs the job (docs/operating.md).
const REFRESH_CHOICES = [1000, 3000, 10000];
const DEFAULT_REFRESH_MS = 3000;
let POLL_MS = refreshMs();
function refreshMs() {
  const chosen = Number(localStorage.getItem("epochal.refresh_ms"));
  return REFRESH_CHOICES.includes(chosen) ? chosen : DEFAULT_REFRESH_MS;
}
// how often the page polls while it is hidden
const HIDDEN_POLL_MS = 30000;
// a job kind that showed no tables of its own is asked for them once in this many polls
const KIND_IDLE_POLLS = 10;
const SVG = "http://www.w3.org/2000/svg";
const state = { route: null, timer: null, tick: null, plan: null, graph: null, jobId: null, requests: new Map(),
  generation: 0 };

// ------------------------------------------------------------------ helpers
function h(tag, attrs, ...children) {
  const element = document.createElement(tag);
  setAttrs(element, attrs);
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

function s(tag, attrs, ...children) {
  const element = document.createElementNS(SVG, tag);
  setAttrs(element, attrs);
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

function setAttrs(element, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else element.setAttribute(key, value === true ? "" : String(value));
  }
}

async function api(path, options = {}) {
  const headers = { "X-Epochal-Dashboard": "1" };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { credentials: "same-origin", ...options, headers });
  let body = {};
  try { body = await response.json(); } catch (error) { body = {}; }
  if (!response.ok) throw new Error(body.detail || `HTTP ${response.status}`);
  return body;
}

const number = (n) => (n === null || n === undefined ? "–" : Math.round(n).toLocaleString("en-US"));
function rate(n) {
  if (n === null || n === undefined) return "–";
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)} M/s`;
  if (n >= 1e4) return `${(n / 1e3).toFixed(1)} k/s`;
  return `${n < 10 ? n.toFixed(1) : Math.round(n).toLocaleString("en-US")}/s`;
}
function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${i ? n.toFixed(1) : Math.round(n)} ${units[i]}`;
}
function seconds(n) {
  if (n === null || n === undefined) return "–";
  if (n < 1) return `${Math.round(n * 1000)} ms`;
  if (n < 60) return `${n.toFixed(n < 10 ? 2 : 1)} s`;
  const m = Math.floor(n / 60);
  return m < 60 ? `${m}m ${Math.floor(n % 60)}s` : `${Math.floor(m / 60)}h ${m % 60}m`;
}
const clock = (t) => (t ? new Date(t * 1000).toLocaleTimeString() : "–");
const percent = (r) => (r === null || r === undefined ? "–" : `${Math.round(r * 100)}%`);
const short = (text, n) => (text.length > n ? `${text.slice(0, n - 1)}…` : text);

function connection(ok, message) {
  const element = document.getElementById("connection");
  text(element, ok ? "" : message);
  attr(element, "class", ok ? "connection" : "connection lost");
}

// ------------------------------------------------------------------ updating in place
// A poll changes numbers, seldom structure: elements are made once, and a poll sets only the
// texts and attributes that differ from what is shown (nothing else is laid out or painted again).
function text(element, value) {
  const t = value === null || value === undefined ? "" : String(value);
  if (element.epochalText !== t) {
    element.textContent = t;
    element.epochalText = t;
  }
}

function attr(element, name, value) {
  const v = String(value);
  if (element.getAttribute(name) !== v) element.setAttribute(name, v);
}

function show(element, visible) {
  if (element.hidden === visible) element.hidden = !visible;
}

// The rows of ``body`` for ``items``, in their order: one row per key, made by ``make`` when its
// key first appears and passed to ``update`` (if given) on every call; the rows of keys gone go.
function keyed(body, items, key, make, update) {
  const rows = body.epochalRows || (body.epochalRows = new Map());
  const wanted = new Set();
  let at = body.firstChild;
  for (const item of items) {
    const k = key(item);
    wanted.add(k);
    let row = rows.get(k);
    if (!row) {
      row = make(item);
      rows.set(k, row);
    }
    if (update) update(row, item);
    if (row === at) at = at.nextSibling;
    else body.insertBefore(row, at);
  }
  for (const [k, row] of rows) {
    if (!wanted.has(k)) {
      row.remove();
      rows.delete(k);
    }
  }
}

// ``rows`` (arrays of cell values) into the table section ``body``, its rows and cells reused by position.
function fill(body, rows, tag = "td") {
  while (body.rows.length > rows.length) body.lastChild.remove();
  rows.forEach((cells, i) => {
    const tr = body.rows[i] || body.appendChild(document.createElement("tr"));
    while (tr.cells.length > cells.length) tr.lastChild.remove();
    cells.forEach((value, j) => text(tr.cells[j] || tr.appendChild(document.createElement(tag)), value));
  });
}

// ------------------------------------------------------------------ routing
function route() {
  clearTimeout(state.timer);
  state.generation += 1;
  state.tick = null;
  const match = location.hash.match(/^#\/jobs\/([^/]+)/);
  const main = document.getElementById("main");
  main.replaceChildren();
  if (match) {
    state.jobId = decodeURIComponent(match[1]);
    state.plan = null;
    state.graph = null;
    jobPage(main, state.generation);
  } else {
    state.jobId = null;
    jobList(main, state.generation);
  }
}

// ``work`` now and then every POLL_MS while the page is shown; while it is hidden (another tab,
// a minimised window) every HIDDEN_POLL_MS, and at once when it is shown again.
function every(generation, work) {
  let busy = false;
  const tick = async () => {
    if (generation !== state.generation || busy) return;
    clearTimeout(state.timer);
    busy = true;
    try {
      await work();
      connection(true);
    } catch (error) {
      connection(false, `not connected: ${error.message}`);
    } finally {
      busy = false;
    }
    if (generation === state.generation) state.timer = setTimeout(tick, document.hidden ? HIDDEN_POLL_MS : POLL_MS);
  };
  state.tick = tick;
  tick();
}

(() => {
  const select = document.getElementById("refresh");
  if (!select) return;
  select.value = String(POLL_MS);
  select.addEventListener("change", () => {
    POLL_MS = Number(select.value);
    localStorage.setItem("epochal.refresh_ms", select.value);
    if (state.tick) state.tick();
  });
})();

document.addEventListener("visibilitychange", () => {
  if (!document.hidden && state.tick) state.tick();
});

// ------------------------------------------------------------------ the job list
function jobList(main, generation) {
  const body = h("tbody", { id: "jobs" });
  main.append(h("section", {}, h("h1", {}, "Jobs"),
    h("table", {}, h("thead", {}, h("tr", {}, ["Name", "Status", "Kind", "Attempt", "Restarts", "Parallelism",
      "Started", "Duration", "Id"].map((t) => h("th", {}, t)))), body)));
  const make = (job) => {
    if (job === null) return h("tr", {}, h("td", { colspan: 9, class: "muted" }, "No job yet."));
    const cells = [h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(job.id)}` }, job.name)),
      h("td", {}, h("span", { class: "status" })), h("td", {}, job.kind), h("td", { class: "num" }),
      h("td", { class: "num" }), h("td", { class: "num" }, job.parallelism), h("td", {}, clock(job.start_time)),
      h("td", {}), h("td", { class: "muted" }, job.id)];
    return h("tr", { class: "job-row", "data-job-id": job.id }, cells);
  };
  const update = (row, job) => {
    if (job === null) return;
    const [, status, , attempt, restarts, , , duration] = row.cells;
    text(status.firstChild, job.status);
    attr(status.firstChild, "class", `status ${job.status}`);
    text(attempt, job.attempt);
    text(restarts, job.restarts);
    text(duration, seconds(job.duration_s));
  };
  every(generation, async () => {
    const { jobs } = await api("/jobs/overview");
    const items = jobs.length ? jobs.slice().reverse() : [null];
    keyed(body, items, (job) => (job === null ? "" : job.id), make, update);
  });
}

// ------------------------------------------------------------------ one job
function jobPage(main, generation) {
  const id = encodeURIComponent(state.jobId);
  const sections = {
    summary: h("section", { id: "summary" }),
    graph: h("section", { id: "graph-section" }, h("h2", {}, "Job graph"), h("div", { class: "graph-wrap" },
      s("svg", { id: "graph", width: 10, height: 10 }))),
    vertices: h("section", { id: "vertices-section" }, h("h2", {}, "Vertices and subtasks"), h("div", { id: "vertices" })),
    checkpoints: h("section", { id: "checkpoints-section" }, h("h2", {}, "Checkpoints"), checkpointSkeleton()),
    savepoints: h("section", { id: "savepoints-section" }, h("h2", {}, "Savepoints"), h("ul", { id: "savepoints" })),
    restarts: h("section", { id: "restarts-section" }, h("h2", {}, "Restarts"), h("div", { id: "restarts" })),
    kind: h("section", { id: "kind-section", hidden: true }, h("div", { class: "charts", id: "kind-charts", hidden: true },
      KIND_CHARTS.map(([, title, chartId]) => chart(title, chartId, number, true))), h("div", { id: "kind" })),
  };
  const actions = h("div", { class: "actions" },
    h("button", { id: "btn-savepoint", onclick: () => savepoint(id) }, "Savepoint"),
    h("button", { id: "btn-stop", onclick: () => stop(id) }, "Stop with savepoint"),
    h("button", { id: "btn-cancel", class: "danger", onclick: () => cancel(id) }, "Cancel"));
  sections.summary.append(h("h1", { id: "job-name" }, h("span", { id: "job-title" }), " ",
    h("span", { class: "status", id: "job-status" })), summarySkeleton(), actions, h("div", { id: "action-message" }));
  main.append(...Object.values(sections));
  let polls = 0;
  let kindTablesShown = false;
  every(generation, async () => {
    if (!state.plan) state.plan = await api(`/jobs/${id}/plan`);
    // a kind that shows no tables of its own (a dataflow job's) is asked again only now and then
    const askKind = kindTablesShown || polls % KIND_IDLE_POLLS === 0;
    polls += 1;
    const [job, vertices, checkpoints, kind] = await Promise.all([api(`/jobs/${id}`), api(`/jobs/${id}/vertices`),
      api(`/jobs/${id}/checkpoints?history=60`), askKind ? api(`/jobs/${id}/kind`) : null]);
    const requests = [...state.requests.values()].filter((r) => r.job === state.jobId);
    await Promise.all(requests.filter((r) => r.status === "IN_PROGRESS").map(async (r) => {
      try {
        Object.assign(r, await api(`/jobs/${id}/savepoints/${encodeURIComponent(r.request_id)}`));
      } catch (error) {
        r.status = "FAILED";
        r.error = error.message;
      }
    }));
    if (generation !== state.generation) return;
    if (!state.graph) {
      state.graph = { picture: graph(state.plan), table: vertexTable(state.plan) };
      const hasVertices = state.plan.vertices.length > 0; // (a graph job has none: no empty sections)
      show(document.getElementById("graph-section"), hasVertices);
      show(document.getElementById("vertices-section"), hasVertices);
    }
    summary(job, vertices);
    updateGraph(state.graph.picture, vertices);
    updateVertexTable(state.graph.table, vertices);
    // what changes only now and then is looked at only when it changed
    const latest = checkpoints.history.length ? checkpoints.history[0].id : 0;
    if (changed("checkpoints", [checkpoints.counts, latest, checkpoints.checkpoint_path])) checkpointView(checkpoints);
    if (changed("savepoints", [latest, requests.map((r) => r.status)])) savepointList(checkpoints, requests);
    if (changed("restarts", [job.restart_history.length, job.restart_history.map((r) => r.recovered_s)])) {
      restartList(job);
    }
    if (kind !== null) {
      kindTablesShown = kind.tables.length > 0;
      if (changed("kind", kind.tables)) kindTables(kind);
    }
    if (changed("kind-metrics", job.kind_metrics)) kindCharts(job.kind_metrics);
  });
}

const seen = new Map();
function changed(part, value) {
  const key = `${state.generation}:${part}`;
  const text = JSON.stringify(value);
  if (seen.get(key) === text) return false;
  seen.set(key, text);
  return true;
}

// The job kind's own tables (a graph job's supersteps, a CEC job's workers), one per title, their
// rows and cells reused; the newest row first, at most 50.
function kindTables(kind) {
  show(document.getElementById("kind-section"), kind.tables.length > 0);
  const cell = (v) => (typeof v === "number" ? (Number.isInteger(v) ? number(v) : v.toFixed(3)) : v === null ? "–" : String(v));
  const make = (table) => {
    const head = h("thead", {}, h("tr"));
    const body = h("tbody");
    const element = h("div", { class: "kind-table", "data-title": table.title }, h("h2"),
      h("table", {}, head, body), h("p", { class: "muted" }, "None yet."));
    element.epochal = { title: element.firstChild, table: element.children[1], head, body, none: element.lastChild };
    return element;
  };
  const update = (element, table) => {
    const parts = element.epochal;
    text(parts.title, `${table.title} (${kind.kind})`);
    show(parts.table, table.rows.length > 0);
    show(parts.none, table.rows.length === 0);
    fill(parts.head, [table.columns], "th");
    fill(parts.body, table.rows.slice(-50).reverse().map((row) => row.map(cell)));
  };
  keyed(document.getElementById("kind"), kind.tables, (table) => table.title, make, update);
}

// The job kind's own numbers charted per worker (a CEC job's): metric name -> chart title.
const KIND_CHARTS = [["epochal_cec_g_checks", "G_checks per worker", "chart-cec-g-checks"],
  ["epochal_cec_extent_tuples", "Extent per worker (tuples)", "chart-cec-extent"],
  ["epochal_cec_replayed_tuples", "Replayed tuples per worker", "chart-cec-replayed"]];

function kindCharts(metrics) {
  let any = false;
  for (const [name, , id] of KIND_CHARTS) {
    const points = metrics.filter((m) => m.name === name).map((m) => ({ id: Number(m.labels.worker), value: m.value }));
    const canvas = document.getElementById(id);
    show(canvas.parentElement, points.length > 0);
    if (points.length) draw(canvas, points, (p) => p.value);
    any = any || points.length > 0;
  }
  show(document.getElementById("kind-charts"), any);
}

function summarySkeleton() {
  const fact = (label, id, value) => h("div", { id: `fact-${id}` }, h("span", {}, label), h("b", { id }, value));
  return h("div", { class: "facts", id: "facts" }, fact("id", "job-id", state.jobId), fact("kind", "job-kind"),
    fact("attempt", "job-attempt"), fact("uptime", "job-uptime"), fact("parallelism", "job-parallelism"),
    fact("workers", "job-workers"), fact("restarts", "job-restarts"), fact("records read", "job-records"),
    fact("read", "job-rate"),
    h("div", { id: "fact-job-progress", hidden: true }, h("span", {}, "sources"),
      h("progress", { id: "job-progress", max: 1, value: 0 }), h("span", { id: "job-progress-text" })),
    fact("error", "job-error"));
}

function summary(job, vertices) {
  const byId = (id) => document.getElementById(id);
  text(byId("job-title"), job.name);
  text(byId("job-status"), job.status);
  attr(byId("job-status"), "class", `status ${job.status}`);
  text(byId("job-kind"), job.kind);
  text(byId("job-attempt"), job.attempt);
  text(byId("job-uptime"), seconds(job.duration_s));
  text(byId("job-parallelism"), job.parallelism);
  text(byId("job-workers"), job.workers);
  text(byId("job-restarts"), job.restarts);
  text(byId("job-records"), number(job.records_read));
  const sources = vertices.vertices.filter((v) => state.plan.edges.every((e) => e.target !== v.id || e.back_edge));
  text(byId("job-rate"), rate(sources.reduce((sum, v) => sum + (v.records_out_per_s || 0), 0)));
  // how far the sources are: records of what they will read, or each source's own unit (a file's bytes)
  const progress = sources.map((v) => v.source_progress);
  let share = null;
  let title = "";
  if (state.plan.source_records) {
    share = Math.min(job.records_read / state.plan.source_records, 1);
    title = `${number(job.records_read)} of ${number(state.plan.source_records)} records`;
  } else if (progress.length && progress.every((p) => p)) {
    share = progress.reduce((sum, p) => sum + p.share, 0) / progress.length;
    title = progress.map((p) => (p.unit === "bytes" ? `${bytes(p.done)} of ${bytes(p.total)}`
      : `${number(p.done)} of ${number(p.total)} ${p.unit}`)).join(", ");
  }
  show(byId("fact-job-progress"), share !== null);
  if (share !== null) {
    attr(byId("job-progress"), "value", share);
    attr(byId("job-progress"), "title", title);
    text(byId("job-progress-text"), ` ${(share * 100).toFixed(0)}%`);
  }
  show(byId("fact-job-error"), Boolean(job.error));
  text(byId("job-error"), job.error || "");
  const ended = ["finished", "failed", "cancelled"].includes(job.status);
  for (const button of ["btn-savepoint", "btn-stop", "btn-cancel"]) {
    if (byId(button).disabled !== ended) byId(button).disabled = ended;
  }
  // a kind that takes no savepoints (graph, CEC) gets no buttons for them; cancel stays
  for (const button of ["btn-savepoint", "btn-stop"]) show(byId(button), job.takes_savepoints);
}

// ------------------------------------------------------------------ the job graph
const BOX_W = 250;
const GAP_X = 90;
const GAP_Y = 28;

function layout(plan) {
  const layer = new Map(plan.vertices.map((v) => [v.id, 0]));
  const forward = plan.edges.filter((e) => !e.back_edge && e.source !== e.target);
  for (let round = 0; round < plan.vertices.length; round += 1) {
    let moved = false;
    for (const edge of forward) {
      if (layer.get(edge.target) < layer.get(edge.source) + 1) {
        layer.set(edge.target, layer.get(edge.source) + 1);
        moved = true;
      }
    }
    if (!moved) break;
  }
  const heights = new Map(plan.vertices.map((v) => [v.id, 82 + 14 * v.operators.length]));
  const columns = new Map();
  for (const vertex of plan.vertices) {
    const column = layer.get(vertex.id);
    if (!columns.has(column)) columns.set(column, []);
    columns.get(column).push(vertex.id);
  }
  const place = new Map();
  let height = 0;
  for (const [column, ids] of columns) {
    let y = 10;
    for (const vid of ids) {
      place.set(vid, { x: 10 + column * (BOX_W + GAP_X), y, h: heights.get(vid) });
      y += heights.get(vid) + GAP_Y;
    }
    height = Math.max(height, y);
  }
  const width = 20 + Math.max(...[...columns.keys()], 0) * (BOX_W + GAP_X) + BOX_W;
  return { place, width, height };
}

// The picture is drawn once per plan (its shape); a poll sets the numbers of its boxes in place.
function graph(plan) {
  const svg = document.getElementById("graph");
  const { place, width, height } = layout(plan);
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const edges = plan.edges.map((edge) => {
    const a = place.get(edge.source);
    const b = place.get(edge.target);
    if (!a || !b) return null;
    let d;
    if (edge.back_edge) {
      const top = Math.min(a.y, b.y) - 4;
      d = `M${a.x + BOX_W / 2},${a.y} C${a.x + BOX_W / 2},${top - 30} ${b.x + BOX_W / 2},${top - 30} ${b.x + BOX_W / 2},${b.y}`;
    } else {
      const x1 = a.x + BOX_W; const y1 = a.y + a.h / 2; const x2 = b.x; const y2 = b.y + b.h / 2;
      d = `M${x1},${y1} C${x1 + GAP_X / 2},${y1} ${x2 - GAP_X / 2},${y2} ${x2 - 6},${y2}`;
    }
    const label = edge.partitioning + (edge.side_output ? ` [${edge.side_output}]` : "");
    const lx = edge.back_edge ? (a.x + b.x + BOX_W) / 2 : (a.x + BOX_W + b.x) / 2;
    const ly = edge.back_edge ? Math.min(a.y, b.y) - 12 : (a.y + a.h / 2 + b.y + b.h / 2) / 2 - 6;
    return s("g", { class: "edge-group", "data-source": edge.source, "data-target": edge.target },
      s("path", { class: edge.back_edge ? "edge back" : "edge", d, "marker-end": "url(#arrow)" }),
      s("text", { class: "edge-label", x: lx, y: ly, "text-anchor": "middle" }, label));
  });
  const boxes = new Map(plan.vertices.map((vertex) => [vertex.id, vertexBox(vertex, place.get(vertex.id))]));
  svg.replaceChildren(s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7,
    markerHeight: 7, orient: "auto-start-reverse" }, s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#8893a0" }))),
  ...edges.filter(Boolean), ...[...boxes.values()].map((box) => box.group));
  return boxes;
}

// One vertex's box, its numbers empty; the parts a poll sets.
function vertexBox(vertex, at) {
  const group = s("g", { class: "vertex unknown", "data-vertex-id": vertex.id, transform: `translate(${at.x},${at.y})`,
    "data-records-in": 0, "data-records-out": 0, "data-records-in-per-s": "", "data-records-out-per-s": "" });
  group.append(s("title", {}, `${vertex.name}\n#${vertex.id}, parallelism ${vertex.parallelism}`));
  group.append(s("rect", { class: "box", width: BOX_W, height: at.h, rx: 6 }));
  group.append(s("text", { class: "title", x: 10, y: 18 }, short(vertex.name, 26), s("tspan", { class: "parallelism", dx: 6,
    "font-weight": 400 }, `×${vertex.parallelism}`)));
  vertex.operators.forEach((operator, i) => {
    group.append(s("text", { class: "operator", x: 14, y: 34 + 14 * i }, `${i ? "→ " : ""}${short(operator.name, 34)}`));
  });
  const y = 38 + 14 * vertex.operators.length;
  const rates = s("text", { class: "rates", x: 10, y });
  const health = s("text", { class: "health", x: 10, y: y + 15 });
  group.append(rates, health);
  const width = Math.min(18, (BOX_W - 20) / Math.max(vertex.parallelism, 1) - 2);
  const cells = [];
  for (let i = 0; i < vertex.parallelism; i += 1) {
    const x = 10 + i * (width + 2);
    const title = s("title");
    const cell = s("rect", { class: "subtask", x, y: at.h - 16, width, height: 10 });
    const busy = s("rect", { class: "busy", x, y: at.h - 6, width, height: 0 });
    group.append(s("g", { class: "subtask-cell", "data-subtask": i }, title, cell, busy));
    cells.push({ title, cell, busy, bottom: at.h - 6 });
  }
  return { group, rates, health, cells };
}

function updateGraph(boxes, vertices) {
  const live = new Map(vertices.vertices.map((v) => [v.id, v]));
  for (const [id, box] of boxes) {
    const v = live.get(id);
    const level = v ? v.backpressure.level : "unknown";
    attr(box.group, "class", `vertex ${level}`);
    attr(box.group, "data-records-in", v ? v.records_in : 0);
    attr(box.group, "data-records-out", v ? v.records_out : 0);
    attr(box.group, "data-records-in-per-s", v && v.records_in_per_s !== null ? v.records_in_per_s.toFixed(1) : "");
    attr(box.group, "data-records-out-per-s", v && v.records_out_per_s !== null ? v.records_out_per_s.toFixed(1) : "");
    text(box.rates, `in ${v ? rate(v.records_in_per_s) : "–"}  ·  out ${v ? rate(v.records_out_per_s) : "–"}`);
    const watermark = v && v.watermark !== null ? number(v.watermark) : "–";
    text(box.health, `busy ${v ? percent(v.busy_ratio_max) : "–"} · backpressure ${level} · wm ${watermark}`);
    const subtasks = new Map((v ? v.subtasks : []).map((t) => [t.index, t]));
    box.cells.forEach((parts, i) => {
      const sub = subtasks.get(i);
      text(parts.title, sub ? `subtask ${i} (worker ${sub.worker}): in ${rate(sub.records_in_per_s)}, out ` +
        `${rate(sub.records_out_per_s)}, busy ${percent(sub.busy_ratio)}, ${level === "unknown" ? "backpressure unknown"
        : sub.backpressured ? "backpressured" : "no backpressure"}, ` +
        `watermark ${sub.watermark === null ? "–" : number(sub.watermark)}` : `subtask ${i}: no report yet`);
      attr(parts.cell, "class", sub && sub.backpressured ? "subtask bp" : "subtask");
      const busy = sub && sub.busy_ratio !== null ? 10 * sub.busy_ratio : 0;
      attr(parts.busy, "y", (parts.bottom - busy).toFixed(1));
      attr(parts.busy, "height", busy.toFixed(1));
    });
  }
}

// The vertices' table: a row per vertex and per subtask, made once per plan; a subtask's row shows
// once its worker reported it.
function vertexTable(plan) {
  const rows = new Map();
  const body = h("tbody");
  const cells = (n) => Array.from({ length: n }, (_, i) => h("td", { class: i && i !== 7 ? "num" : "" }));
  for (const v of plan.vertices) {
    const vertexCells = cells(10);
    vertexCells[0].append(h("b", {}, `#${v.id} ${v.name}`));
    text(vertexCells[1], v.parallelism);
    body.append(h("tr", { class: "vertex-row", "data-vertex-id": v.id }, vertexCells));
    const subtasks = [];
    for (let i = 0; i < v.parallelism; i += 1) {
      const subtaskCells = cells(10);
      const row = h("tr", { class: "subtask", hidden: true }, subtaskCells);
      body.append(row);
      subtasks.push({ row, cells: subtaskCells });
    }
    rows.set(v.id, { cells: vertexCells, subtasks });
  }
  const head = ["Vertex", "Parallelism", "Records in", "In/s", "Records out", "Out/s", "Busy", "Backpressure",
    "Watermark", "State"].map((t, i) => h("th", { class: i && i !== 7 ? "num" : "" }, t));
  document.getElementById("vertices").replaceChildren(h("table", {}, h("thead", {}, h("tr", {}, head)), body));
  return rows;
}

function updateVertexTable(rows, vertices) {
  for (const v of vertices.vertices) {
    const row = rows.get(v.id);
    if (!row) continue;
    const c = row.cells;
    text(c[2], number(v.records_in));
    text(c[3], rate(v.records_in_per_s));
    text(c[4], number(v.records_out));
    text(c[5], rate(v.records_out_per_s));
    text(c[6], percent(v.busy_ratio_max));
    text(c[7], v.backpressure.level);
    text(c[8], v.watermark === null ? "–" : number(v.watermark));
    text(c[9], bytes(v.operators.reduce((sum, o) => (o.state_bytes === null ? sum : (sum || 0) + o.state_bytes), null)));
    const reported = new Map(v.subtasks.map((t) => [t.index, t]));
    const sampled = v.backpressure.level !== "unknown";  // a CEC stage samples no backpressure
    row.subtasks.forEach((sub, i) => {
      const t = reported.get(i);
      show(sub.row, Boolean(t));
      if (!t) return;
      const d = sub.cells;
      text(d[0], `  subtask ${t.index} · worker ${t.worker}`);
      text(d[2], number(t.records_in));
      text(d[3], rate(t.records_in_per_s));
      text(d[4], number(t.records_out));
      text(d[5], rate(t.records_out_per_s));
      text(d[6], percent(t.busy_ratio));
      text(d[7], sampled ? (t.backpressured ? "backpressured" : "ok") : "–");
      text(d[8], t.watermark === null ? "–" : number(t.watermark));
    });
  }
}

// ------------------------------------------------------------------ checkpoints
// A bar chart on a canvas: drawn again only when its points changed, at most CHART_POINTS bars;
// ``data-points`` says how many bars it shows, and hovering a bar names it.
const CHART_W = 320;
const CHART_H = 110;
const CHART_LEFT = 54;
const CHART_BOTTOM = 16;
const CHART_POINTS = 60;
const COLORS = { bar: "#2b5797", savepoint: "#d08a00", line: "#d9dee5", axis: "#6b7380" };

function chart(title, id, format, hidden = false) {
  const canvas = h("canvas", { id, class: "chart-canvas", "data-points": 0 });
  canvas.epochal = { format, points: [], values: [], key: null, bar: 1 };
  const ratio = window.devicePixelRatio || 1;
  canvas.width = CHART_W * ratio;
  canvas.height = CHART_H * ratio;
  canvas.style.width = `${CHART_W}px`;
  canvas.style.height = `${CHART_H}px`;
  canvas.addEventListener("mousemove", (event) => {
    const { points, values, bar } = canvas.epochal;
    const i = Math.floor((event.offsetX - CHART_LEFT - 1) / (bar + 1));
    const tip = i >= 0 && i < points.length && values[i] !== null ? `#${points[i].id}: ${format(values[i])}` : "";
    if (canvas.title !== tip) canvas.title = tip;
  });
  return h("div", { class: "chart", hidden }, h("h3", {}, title), canvas);
}

function draw(canvas, all, value) {
  const points = all.slice(-CHART_POINTS);
  const values = points.map(value);
  const key = JSON.stringify([points.map((p) => [p.id, Boolean(p.savepoint)]), values]);
  const memory = canvas.epochal;
  if (memory.key === key) return;
  const W = CHART_W; const H = CHART_H; const left = CHART_LEFT; const bottom = CHART_BOTTOM;
  const max = Math.max(...values.filter((x) => x !== null), 0) || 1;
  const bar = Math.max(Math.min((W - left) / Math.max(points.length, 1) - 1, 14), 1);
  Object.assign(memory, { points, values, key, bar });
  canvas.dataset.points = values.filter((v) => v !== null).length;
  const ratio = canvas.width / W;
  const g = canvas.getContext("2d");
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.clearRect(0, 0, W, H);
  g.fillStyle = COLORS.line;
  g.fillRect(left, H - bottom, W - left, 1);
  g.fillRect(left, 4, W - left, 1);
  g.font = "10px system-ui, sans-serif";
  g.fillStyle = COLORS.axis;
  g.textAlign = "end";
  g.fillText(memory.format(max), left - 4, 10);
  g.fillText("0", left - 4, H - bottom);
  points.forEach((point, i) => {
    const v = values[i];
    if (v === null) return;
    const height = Math.max(((H - bottom - 4) * v) / max, 0.5);
    g.fillStyle = point.savepoint ? COLORS.savepoint : COLORS.bar;
    g.fillRect(left + 1 + i * (bar + 1), H - bottom - height, bar, height);
  });
  if (points.length) {
    g.fillStyle = COLORS.axis;
    g.textAlign = "start";
    g.fillText(`#${points[0].id}`, left, H - 3);
    g.textAlign = "end";
    g.fillText(`#${points[points.length - 1].id}`, W - 2, H - 3);
  }
}

const CHECKPOINT_CHARTS = [["Duration", "chart-duration", (e) => e.duration_s, seconds],
  ["Size", "chart-size", (e) => e.bytes, bytes],
  ["Alignment (slowest subtask)", "chart-alignment", (e) => e.alignment_s_max, seconds],
  ["Synchronous stall (slowest subtask)", "chart-sync", (e) => e.sync_s_max, seconds]];

function checkpointSkeleton() {
  const fact = (label, id, attrs = {}) => h("div", {}, h("span", {}, label), h("b", { id, ...attrs }));
  const head = ["Id", "Status", "Triggered", "Duration", "Size", "Alignment", "Sync", "Async", "Reason / path"]
    .map((t) => h("th", {}, t));
  return h("div", { id: "checkpoints" },
    h("div", { class: "facts" }, fact("completed", "checkpoint-completed"), fact("failed", "checkpoint-failed"),
      fact("savepoints", "checkpoint-savepoints"), fact("duration avg / max", "checkpoint-duration"),
      fact("size avg", "checkpoint-size"), fact("storage", "checkpoint-storage", { class: "savepoint-path" })),
    h("div", { class: "charts" }, CHECKPOINT_CHARTS.map(([title, id, , format]) => chart(title, id, format))),
    h("table", { id: "checkpoint-history" }, h("thead", {}, h("tr", {}, head)), h("tbody")));
}

function checkpointView(data) {
  const c = data.counts;
  const byId = (id) => document.getElementById(id);
  text(byId("checkpoint-completed"), c.completed);
  text(byId("checkpoint-failed"), c.failed);
  text(byId("checkpoint-savepoints"), c.savepoints);
  text(byId("checkpoint-duration"), `${seconds(data.summary.duration_s.avg)} / ${seconds(data.summary.duration_s.max)}`);
  text(byId("checkpoint-size"), bytes(data.summary.bytes.avg));
  text(byId("checkpoint-storage"), data.checkpoint_path || "none");
  const completed = data.history.filter((e) => e.status === "completed").reverse();
  for (const [, id, value] of CHECKPOINT_CHARTS) draw(byId(id), completed, value);
  // an ended checkpoint does not change: its row is made once
  keyed(byId("checkpoint-history").tBodies[0], data.history.slice(0, 30), (e) => e.id, (e) => h("tr",
    { class: e.status, "data-checkpoint-id": e.id },
    h("td", { class: "num" }, e.id), h("td", {}, e.savepoint ? `savepoint (${e.status})` : e.status),
    h("td", {}, clock(e.trigger_time)), h("td", { class: "num" }, seconds(e.duration_s)),
    h("td", { class: "num" }, bytes(e.bytes)), h("td", { class: "num" }, seconds(e.alignment_s_max)),
    h("td", { class: "num" }, seconds(e.sync_s_max)), h("td", { class: "num" }, seconds(e.async_s_max)),
    h("td", {}, e.reason || e.savepoint || "")));
}

function savepointList(checkpoints, requests) {
  const items = [];
  const taken = new Set();
  for (const r of requests.slice().reverse()) {
    taken.add(r.location);
    const text = r.status === "COMPLETED" ? "completed" : r.status === "FAILED" ? `failed: ${r.error || ""}` : "in progress";
    items.push(h("li", { class: `savepoint ${r.status.toLowerCase()}`, "data-request-id": r.request_id },
      h("span", { class: "savepoint-path" }, r.location), ` · ${r.stop ? "stop with savepoint" : "savepoint"} · ${text}`));
  }
  for (const e of checkpoints.history.filter((x) => x.savepoint && x.status === "completed")) {
    if (taken.has(e.savepoint)) continue;
    items.push(h("li", { class: "savepoint completed" }, h("span", { class: "savepoint-path" }, e.savepoint),
      ` · completed ${clock(e.trigger_time)}, ${bytes(e.bytes)}`));
  }
  if (!items.length) items.push(h("li", { class: "muted" }, "None yet."));
  document.getElementById("savepoints").replaceChildren(...items);
}

function restartList(job) {
  const items = job.restart_history.slice().reverse().map((r) => h("div", { class: "restart", "data-attempt": r.attempt },
    h("div", {}, h("b", {}, `attempt ${r.attempt} failed`), ` at ${clock(r.time)}`, r.category ? ` · ${r.category}` : "",
      r.recovered_s !== null ? ` · recovered in ${seconds(r.recovered_s)}` : " · recovering"),
    h("div", { class: "cause" }, r.cause),
    r.message ? h("details", {}, h("summary", {}, "the whole error"), h("pre", {}, r.message)) : null));
  document.getElementById("restarts").replaceChildren(...(items.length ? items : [h("p", { class: "muted" }, "None.")]));
}

// ------------------------------------------------------------------ actions
function confirmAction(text, drain) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-drain-label").hidden = !drain;
  document.getElementById("confirm-drain").checked = false;
  return new Promise((resolve) => {
    const done = (ok) => () => {
      dialog.close();
      ok_.removeEventListener("click", yes);
      no_.removeEventListener("click", no);
      resolve(ok ? { drain: document.getElementById("confirm-drain").checked } : null);
    };
    const ok_ = document.getElementById("confirm-ok");
    const no_ = document.getElementById("confirm-cancel");
    const yes = done(true);
    const no = done(false);
    ok_.addEventListener("click", yes);
    no_.addEventListener("click", no);
    dialog.showModal();
  });
}

function message(text, error) {
  const element = document.getElementById("action-message");
  element.textContent = text;
  element.className = error ? "error" : "";
}

async function savepoint(id) {
  if (!(await confirmAction(`Take a savepoint of job '${state.jobId}' now? It keeps running.`))) return;
  try {
    const accepted = await api(`/jobs/${id}/savepoints`, { method: "POST", body: "{}" });
    state.requests.set(accepted.request_id, { ...accepted, job: state.jobId, status: "IN_PROGRESS", stop: false });
    message(`Savepoint requested: ${accepted.location}`);
  } catch (error) {
    message(`Savepoint refused: ${error.message}`, true);
  }
}

async function stop(id) {
  const answer = await confirmAction(`Take a savepoint of job '${state.jobId}' and stop it there?`, true);
  if (!answer) return;
  try {
    const accepted = await api(`/jobs/${id}/stop`, { method: "POST", body: JSON.stringify({ drain: answer.drain }) });
    state.requests.set(accepted.request_id, { ...accepted, job: state.jobId, status: "IN_PROGRESS", stop: true });
    message(`Stopping with a savepoint at ${accepted.location}`);
  } catch (error) {
    message(`Stop refused: ${error.message}`, true);
  }
}

async function cancel(id) {
  if (!(await confirmAction(`Cancel job '${state.jobId}'? Its workers stop and nothing is saved.`))) return;
  try {
    await api(`/jobs/${id}?mode=cancel`, { method: "PATCH" });
    message("Cancelling.");
  } catch (error) {
    message(`Cancel refused: ${error.message}`, true);
  }
}

window.addEventListener("hashchange", route);
route();
