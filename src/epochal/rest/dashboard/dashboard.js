// The epochal dashboard: plain JavaScript and inline SVG, nothing loaded from the network.
// It reads the REST API of the server that served it (the cookie carries the token) once a
// second: #/ lists the jobs, #/jobs/<id> shows one job.
"use strict";

const POLL_MS = 1000;
const SVG = "http://www.w3.org/2000/svg";
const state = { route: null, timer: null, plan: null, jobId: null, requests: new Map(), generation: 0 };

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
  element.textContent = ok ? "" : message;
  element.className = ok ? "connection" : "connection lost";
}

// ------------------------------------------------------------------ routing
function route() {
  clearTimeout(state.timer);
  state.generation += 1;
  const match = location.hash.match(/^#\/jobs\/([^/]+)/);
  const main = document.getElementById("main");
  main.replaceChildren();
  if (match) {
    state.jobId = decodeURIComponent(match[1]);
    state.plan = null;
    jobPage(main, state.generation);
  } else {
    state.jobId = null;
    jobList(main, state.generation);
  }
}

function every(generation, work) {
  const tick = async () => {
    if (generation !== state.generation) return;
    try {
      await work();
      connection(true);
    } catch (error) {
      connection(false, `not connected: ${error.message}`);
    }
    if (generation === state.generation) state.timer = setTimeout(tick, POLL_MS);
  };
  tick();
}

// ------------------------------------------------------------------ the job list
function jobList(main, generation) {
  const body = h("tbody", { id: "jobs" });
  main.append(h("section", {}, h("h1", {}, "Jobs"),
    h("table", {}, h("thead", {}, h("tr", {}, ["Name", "Status", "Kind", "Attempt", "Restarts", "Parallelism",
      "Started", "Duration", "Id"].map((t) => h("th", {}, t)))), body)));
  every(generation, async () => {
    const { jobs } = await api("/jobs/overview");
    body.replaceChildren(...jobs.slice().reverse().map((job) => h("tr", { class: "job-row", "data-job-id": job.id },
      h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(job.id)}` }, job.name)),
      h("td", {}, h("span", { class: `status ${job.status}` }, job.status)), h("td", {}, job.kind),
      h("td", { class: "num" }, job.attempt), h("td", { class: "num" }, job.restarts),
      h("td", { class: "num" }, job.parallelism), h("td", {}, clock(job.start_time)),
      h("td", {}, seconds(job.duration_s)), h("td", { class: "muted" }, job.id))));
    if (!jobs.length) body.append(h("tr", {}, h("td", { colspan: 9, class: "muted" }, "No job yet.")));
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
    checkpoints: h("section", { id: "checkpoints-section" }, h("h2", {}, "Checkpoints"), h("div", { id: "checkpoints" })),
    savepoints: h("section", { id: "savepoints-section" }, h("h2", {}, "Savepoints"), h("ul", { id: "savepoints" })),
    restarts: h("section", { id: "restarts-section" }, h("h2", {}, "Restarts"), h("div", { id: "restarts" })),
    kind: h("section", { id: "kind-section", hidden: true }, h("div", { class: "charts", id: "kind-charts" }),
      h("div", { id: "kind" })),
  };
  const actions = h("div", { class: "actions" },
    h("button", { id: "btn-savepoint", onclick: () => savepoint(id) }, "Savepoint"),
    h("button", { id: "btn-stop", onclick: () => stop(id) }, "Stop with savepoint"),
    h("button", { id: "btn-cancel", class: "danger", onclick: () => cancel(id) }, "Cancel"));
  sections.summary.append(h("h1", { id: "job-name" }, state.jobId), h("div", { class: "facts", id: "facts" }), actions,
    h("div", { id: "action-message" }));
  main.append(...Object.values(sections));
  every(generation, async () => {
    if (!state.plan) state.plan = await api(`/jobs/${id}/plan`);
    const [job, vertices, checkpoints, kind] = await Promise.all([api(`/jobs/${id}`), api(`/jobs/${id}/vertices`),
      api(`/jobs/${id}/checkpoints?history=60`), api(`/jobs/${id}/kind`)]);
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
    summary(job, vertices);
    graph(state.plan, vertices);
    vertexTable(vertices);
    // what changes only now and then is redrawn only when it changed
    const latest = checkpoints.history.length ? checkpoints.history[0].id : 0;
    if (changed("checkpoints", [checkpoints.counts.total, latest])) checkpointView(checkpoints);
    if (changed("savepoints", [latest, requests.map((r) => r.status)])) savepointList(checkpoints, requests);
    if (changed("restarts", [job.restart_history.length, job.restart_history.map((r) => r.recovered_s)])) {
      restartList(job);
    }
    if (changed("kind", kind.tables)) kindTables(kind);
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

function kindTables(kind) {
  const section = document.getElementById("kind-section");
  section.hidden = !kind.tables.length;
  const cell = (v) => (typeof v === "number" ? (Number.isInteger(v) ? number(v) : v.toFixed(3)) : v === null ? "–" : String(v));
  document.getElementById("kind").replaceChildren(...kind.tables.map((table) => h("div", { class: "kind-table", "data-title": table.title },
    h("h2", {}, `${table.title} (${kind.kind})`),
    table.rows.length ? h("table", {}, h("thead", {}, h("tr", {}, table.columns.map((c) => h("th", {}, c)))),
      h("tbody", {}, table.rows.slice(-50).reverse().map((row) => h("tr", {}, row.map((v) => h("td", {}, cell(v)))))))
      : h("p", { class: "muted" }, "None yet."))));
}

// The job kind's own numbers charted per worker (a CEC job's): metric name -> chart title.
const KIND_CHARTS = [["epochal_cec_g_checks", "G_checks per worker", "chart-cec-g-checks"],
  ["epochal_cec_extent_tuples", "Extent per worker (tuples)", "chart-cec-extent"],
  ["epochal_cec_replayed_tuples", "Replayed tuples per worker", "chart-cec-replayed"]];

function kindCharts(metrics) {
  const charts = KIND_CHARTS.map(([name, title, id]) => {
    const points = metrics.filter((m) => m.name === name).map((m) => ({ id: Number(m.labels.worker), value: m.value }));
    return points.length ? chart(title, points, (p) => p.value, number, id) : null;
  }).filter(Boolean);
  document.getElementById("kind-charts").replaceChildren(...charts);
}

function summary(job, vertices) {
  document.getElementById("job-name").replaceChildren(job.name, " ",
    h("span", { class: `status ${job.status}`, id: "job-status" }, job.status));
  const fact = (label, value, id) => h("div", {}, h("span", {}, label), h("b", { id }, value));
  const facts = [fact("id", job.id), fact("kind", job.kind), fact("attempt", job.attempt, "job-attempt"),
    fact("uptime", seconds(job.duration_s), "job-uptime"), fact("parallelism", job.parallelism),
    fact("workers", job.workers), fact("restarts", job.restarts, "job-restarts"),
    fact("records read", number(job.records_read), "job-records")];
  const sources = vertices.vertices.filter((v) => state.plan.edges.every((e) => e.target !== v.id || e.back_edge));
  const readRate = sources.reduce((sum, v) => sum + (v.records_out_per_s || 0), 0);
  facts.push(fact("read", rate(readRate), "job-rate"));
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
  if (share !== null) {
    facts.push(h("div", {}, h("span", {}, "sources"), h("progress", { id: "job-progress", max: 1, value: share, title }),
      h("span", { id: "job-progress-text" }, ` ${(share * 100).toFixed(0)}%`)));
  }
  if (job.error) facts.push(fact("error", job.error, "job-error"));
  document.getElementById("facts").replaceChildren(...facts);
  const ended = ["finished", "failed", "cancelled"].includes(job.status);
  for (const button of ["btn-savepoint", "btn-stop", "btn-cancel"]) document.getElementById(button).disabled = ended;
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

function graph(plan, vertices) {
  const svg = document.getElementById("graph");
  const { place, width, height } = layout(plan);
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const live = new Map(vertices.vertices.map((v) => [v.id, v]));
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
  const boxes = plan.vertices.map((vertex) => vertexBox(vertex, place.get(vertex.id), live.get(vertex.id)));
  svg.replaceChildren(s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7,
    markerHeight: 7, orient: "auto-start-reverse" }, s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#8893a0" }))),
  ...edges.filter(Boolean), ...boxes);
}

function vertexBox(vertex, at, live) {
  const level = live ? live.backpressure.level : "unknown";
  const group = s("g", { class: `vertex ${level}`, "data-vertex-id": vertex.id, transform: `translate(${at.x},${at.y})`,
    "data-records-in": live ? live.records_in : 0, "data-records-out": live ? live.records_out : 0,
    "data-records-in-per-s": live && live.records_in_per_s !== null ? live.records_in_per_s.toFixed(1) : "",
    "data-records-out-per-s": live && live.records_out_per_s !== null ? live.records_out_per_s.toFixed(1) : "" });
  group.append(s("title", {}, `${vertex.name}\n#${vertex.id}, parallelism ${vertex.parallelism}`));
  group.append(s("rect", { class: "box", width: BOX_W, height: at.h, rx: 6 }));
  group.append(s("text", { class: "title", x: 10, y: 18 }, short(vertex.name, 26), s("tspan", { class: "parallelism", dx: 6,
    "font-weight": 400 }, `×${vertex.parallelism}`)));
  vertex.operators.forEach((operator, i) => {
    group.append(s("text", { class: "operator", x: 14, y: 34 + 14 * i }, `${i ? "→ " : ""}${short(operator.name, 34)}`));
  });
  const y = 38 + 14 * vertex.operators.length;
  group.append(s("text", { class: "rates", x: 10, y },
    `in ${live ? rate(live.records_in_per_s) : "–"}  ·  out ${live ? rate(live.records_out_per_s) : "–"}`));
  const watermark = live && live.watermark !== null ? number(live.watermark) : "–";
  group.append(s("text", { class: "health", x: 10, y: y + 15 },
    `busy ${live ? percent(live.busy_ratio_max) : "–"} · backpressure ${level} · wm ${watermark}`));
  const subtasks = live ? live.subtasks : [];
  const width = Math.min(18, (BOX_W - 20) / Math.max(vertex.parallelism, 1) - 2);
  for (let i = 0; i < vertex.parallelism; i += 1) {
    const sub = subtasks.find((t) => t.index === i);
    const x = 10 + i * (width + 2);
    const cell = s("g", { class: "subtask-cell", "data-subtask": i });
    cell.append(s("title", {}, sub ? `subtask ${i} (worker ${sub.worker}): in ${rate(sub.records_in_per_s)}, out ` +
      `${rate(sub.records_out_per_s)}, busy ${percent(sub.busy_ratio)}, ${sub.backpressured ? "backpressured" : "no backpressure"}, ` +
      `watermark ${sub.watermark === null ? "–" : number(sub.watermark)}` : `subtask ${i}: no report yet`));
    cell.append(s("rect", { class: sub && sub.backpressured ? "subtask bp" : "subtask", x, y: at.h - 16, width, height: 10 }));
    if (sub && sub.busy_ratio !== null) {
      cell.append(s("rect", { class: "busy", x, y: at.h - 6 - 10 * sub.busy_ratio, width, height: 10 * sub.busy_ratio }));
    }
    group.append(cell);
  }
  return group;
}

function vertexTable(vertices) {
  const rows = [];
  for (const v of vertices.vertices) {
    rows.push(h("tr", { class: "vertex-row", "data-vertex-id": v.id }, h("td", {}, h("b", {}, `#${v.id} ${v.name}`)),
      h("td", { class: "num" }, v.parallelism), h("td", { class: "num" }, number(v.records_in)),
      h("td", { class: "num" }, rate(v.records_in_per_s)), h("td", { class: "num" }, number(v.records_out)),
      h("td", { class: "num" }, rate(v.records_out_per_s)), h("td", { class: "num" }, percent(v.busy_ratio_max)),
      h("td", {}, v.backpressure.level), h("td", { class: "num" }, v.watermark === null ? "–" : number(v.watermark)),
      h("td", { class: "num" }, bytes(v.operators.reduce((sum, o) => (o.state_bytes === null ? sum : (sum || 0) + o.state_bytes), null)))));
    for (const t of v.subtasks) {
      rows.push(h("tr", { class: "subtask" }, h("td", {}, `  subtask ${t.index} · worker ${t.worker}`), h("td", {}),
        h("td", { class: "num" }, number(t.records_in)), h("td", { class: "num" }, rate(t.records_in_per_s)),
        h("td", { class: "num" }, number(t.records_out)), h("td", { class: "num" }, rate(t.records_out_per_s)),
        h("td", { class: "num" }, percent(t.busy_ratio)), h("td", {}, t.backpressured ? "backpressured" : "ok"),
        h("td", { class: "num" }, t.watermark === null ? "–" : number(t.watermark)), h("td", {})));
    }
  }
  const head = ["Vertex", "Parallelism", "Records in", "In/s", "Records out", "Out/s", "Busy", "Backpressure",
    "Watermark", "State"].map((t, i) => h("th", { class: i && i !== 7 ? "num" : "" }, t));
  document.getElementById("vertices").replaceChildren(h("table", {}, h("thead", {}, h("tr", {}, head)), h("tbody", {}, rows)));
}

// ------------------------------------------------------------------ checkpoints
function chart(title, points, value, format, id) {
  const W = 320; const H = 110; const left = 54; const bottom = 16;
  const values = points.map(value);
  const max = Math.max(...values.filter((x) => x !== null), 0) || 1;
  const bar = Math.max(Math.min((W - left) / Math.max(points.length, 1) - 1, 14), 1);
  const svg = s("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, id });
  svg.append(s("line", { x1: left, y1: H - bottom, x2: W, y2: H - bottom }), s("line", { x1: left, y1: 4, x2: W, y2: 4 }));
  svg.append(s("text", { class: "axis", x: left - 4, y: 10, "text-anchor": "end" }, format(max)));
  svg.append(s("text", { class: "axis", x: left - 4, y: H - bottom, "text-anchor": "end" }, "0"));
  points.forEach((point, i) => {
    const v = values[i];
    if (v === null) return;
    const height = ((H - bottom - 4) * v) / max;
    svg.append(s("rect", { class: point.savepoint ? "bar savepoint" : "bar", x: left + 1 + i * (bar + 1),
      y: H - bottom - height, width: bar, height: Math.max(height, 0.5) }, s("title", {}, `#${point.id}: ${format(v)}`)));
  });
  if (points.length) {
    svg.append(s("text", { class: "axis", x: left, y: H - 3 }, `#${points[0].id}`));
    svg.append(s("text", { class: "axis", x: W - 2, y: H - 3, "text-anchor": "end" }, `#${points[points.length - 1].id}`));
  }
  return h("div", { class: "chart" }, h("h3", {}, title), svg);
}

function checkpointView(data) {
  const c = data.counts;
  const completed = data.history.filter((e) => e.status === "completed").reverse().slice(-60);
  const counts = h("div", { class: "facts" },
    h("div", {}, h("span", {}, "completed"), h("b", { id: "checkpoint-completed" }, c.completed)),
    h("div", {}, h("span", {}, "failed"), h("b", { id: "checkpoint-failed" }, c.failed)),
    h("div", {}, h("span", {}, "savepoints"), h("b", { id: "checkpoint-savepoints" }, c.savepoints)),
    h("div", {}, h("span", {}, "duration avg / max"), h("b", {}, `${seconds(data.summary.duration_s.avg)} / ${seconds(data.summary.duration_s.max)}`)),
    h("div", {}, h("span", {}, "size avg"), h("b", {}, bytes(data.summary.bytes.avg))),
    h("div", {}, h("span", {}, "storage"), h("b", { class: "savepoint-path" }, data.checkpoint_path || "none")));
  const charts = h("div", { class: "charts" },
    chart("Duration", completed, (e) => e.duration_s, seconds, "chart-duration"),
    chart("Size", completed, (e) => e.bytes, bytes, "chart-size"),
    chart("Alignment (slowest subtask)", completed, (e) => e.alignment_s_max, seconds, "chart-alignment"),
    chart("Synchronous stall (slowest subtask)", completed, (e) => e.sync_s_max, seconds, "chart-sync"));
  const rows = data.history.slice(0, 30).map((e) => h("tr", { class: e.status, "data-checkpoint-id": e.id },
    h("td", { class: "num" }, e.id), h("td", {}, e.savepoint ? `savepoint (${e.status})` : e.status),
    h("td", {}, clock(e.trigger_time)), h("td", { class: "num" }, seconds(e.duration_s)),
    h("td", { class: "num" }, bytes(e.bytes)), h("td", { class: "num" }, seconds(e.alignment_s_max)),
    h("td", { class: "num" }, seconds(e.sync_s_max)), h("td", { class: "num" }, seconds(e.async_s_max)),
    h("td", {}, e.reason || e.savepoint || "")));
  const head = ["Id", "Status", "Triggered", "Duration", "Size", "Alignment", "Sync", "Async", "Reason / path"]
    .map((t) => h("th", {}, t));
  document.getElementById("checkpoints").replaceChildren(counts, charts,
    h("table", { id: "checkpoint-history" }, h("thead", {}, h("tr", {}, head)), h("tbody", {}, rows)));
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
