// The operator's page (reseller admins): /console/api/cluster every few seconds; request
// rates are drawn from the differences between two reports' counters.
import { session, sizeText } from "./api.js";
import { h, clear, table, append } from "./dom.js";

const EVERY_MS = 5000;
const KEEP = 60;  // samples on a chart: five minutes
const COLORS = ["#1f6feb", "#2e7d32", "#b26a00", "#c62828", "#6f42c1", "#00838f", "#5c6576"];
let timer = null;
let gen = 0;  // a report that comes back after the page was left draws nothing
let history = [];  // [{t, requests: {GET: n}, p50, p99, errors}]

export function stopOps() { gen++; if (timer) clearTimeout(timer); timer = null; }

async function report() {
  const resp = await fetch("/console/api/cluster", {
    headers: { "X-Auth-Token": session.load().token }, cache: "no-store", credentials: "omit" });
  if (!resp.ok) throw new Error(`${resp.status}`);
  return resp.json();
}

function chart(title, series, unit) {
  const W = 420, H = 160, L = 44, B = 18;
  const all = series.flatMap((s) => s.points.map((p) => p[1])).filter((v) => v !== null && isFinite(v));
  const max = Math.max(1, ...all) * 1.1;
  const fmt = (v) => (v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(1) : v.toPrecision(2));
  const t0 = Math.min(...series.flatMap((s) => s.points.map((p) => p[0])), Date.now());
  const t1 = Math.max(t0 + 1, ...series.flatMap((s) => s.points.map((p) => p[0])));
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("class", "chart");
  const add = (tag, attrs, text) => {
    const el = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (text !== undefined) el.textContent = text;
    svg.append(el);
  };
  for (const f of [0, 0.5, 1]) {
    const y = H - B - f * (H - B - 8);
    add("line", { x1: L, x2: W, y1: y, y2: y, stroke: "#eef0f3" });
    add("text", { x: 2, y: y + 3 }, fmt(max / 1.1 * f));
  }
  add("text", { x: L, y: H - 4 }, `${Math.round((t1 - t0) / 1000)} s · ${unit}`);
  series.forEach((s, i) => {
    const pts = s.points.filter((p) => p[1] !== null && isFinite(p[1]))
      .map(([t, v]) => `${(L + (t - t0) / (t1 - t0) * (W - L - 4)).toFixed(1)},${(H - B - v / max * (H - B - 8)).toFixed(1)}`);
    if (pts.length) add("polyline", { points: pts.join(" "), fill: "none", stroke: COLORS[i % COLORS.length], "stroke-width": 1.6 });
  });
  return h("div", { class: "panel" }, h("h3", {}, title),
    h("div", { class: "legend" }, series.map((s, i) => h("span", {}, h("i", { style: `background:${COLORS[i % COLORS.length]}` }), s.name))),
    svg);
}

function rates() {
  const methods = new Set();
  for (const s of history) Object.keys(s.requests).forEach((m) => methods.add(m));
  const out = [...methods].sort().map((m) => ({ name: m, points: [] }));
  const errs = { name: "5xx", points: [] };
  for (let i = 1; i < history.length; i++) {
    const a = history[i - 1], b = history[i], dt = (b.t - a.t) / 1000;
    if (dt <= 0) continue;
    for (const s of out) s.points.push([b.t, Math.max(0, ((b.requests[s.name] || 0) - (a.requests[s.name] || 0)) / dt)]);
    errs.points.push([b.t, Math.max(0, (b.errors - a.errors) / dt)]);
  }
  return [...out, errs];
}

function usage(d) {
  if (d.total == null) return h("small", {}, "unknown");
  const pct = d.total ? 100 * d.used / d.total : 0;
  return h("div", { title: `${sizeText(d.used)} of ${sizeText(d.total)}` },
    h("div", { class: "bar" + (pct > 90 ? " full" : "") }, h("div", { style: `width:${pct.toFixed(1)}%` })),
    h("small", {}, `${pct.toFixed(1)}% of ${sizeText(d.total)}`));
}

function render(main, doc) {
  clear(main);
  const servers = doc.servers || [];
  const devices = servers.flatMap((s) => (s.devices || []).map((d) => ({ ...d, host: s.host })));
  const pending = devices.reduce((n, d) => n + (d.async_pending || 0), 0);
  const quarantined = devices.reduce((n, d) => n + (d.quarantined || 0), 0);
  const m = doc.metrics || {};
  const card = (k, v, cls = "") => h("div", { class: "card " + cls }, h("div", { class: "v" }, v), h("div", { class: "k" }, k));
  const daemonRows = servers.flatMap((s) => (s.daemons || []).map((d) => h("tr", {},
    h("td", {}, s.host), h("td", {}, d.name),
    h("td", {}, h("span", { class: "pill " + (d.alive ? "ok" : "bad") }, d.alive ? (d.running_for != null ? "running" : "idle") : "down")),
    h("td", { class: "num" }, d.last_pass_age != null ? `${Math.round(d.last_pass_age)} s ago` : "never"),
    h("td", { class: "num" }, d.last_duration != null ? `${d.last_duration.toFixed(1)} s` : ""),
    h("td", { class: "num" }, d.failures || 0), h("td", {}, d.progress || ""))));
  append(main,
    h("h2", {}, "Cluster"),
    h("div", { class: "cards", id: "ops-cards" },
      card("servers answering", `${servers.filter((s) => s.ok).length} / ${servers.length}`,
        servers.every((s) => s.ok) ? "" : "bad"),
      card("devices", devices.length),
      card("problems", (doc.problems || []).length),
      card("async pendings", pending.toLocaleString()),
      card("quarantined", quarantined.toLocaleString()),
      card("error-limited nodes", (doc.error_limited || []).filter((e) => e.limited).length),
      card("latency p50 / p99", `${m.latency_ms?.p50 ?? "–"} / ${m.latency_ms?.p99 ?? "–"} ms`)),
    (doc.problems || []).length ? h("div", { class: "panel", id: "ops-problems" }, h("h3", {}, "Problems"),
      h("ul", {}, doc.problems.map((p) => h("li", { class: "error" }, p)))) : null,
    h("div", { class: "charts" },
      chart("Requests per second", rates(), "req/s"),
      chart("Latency", [{ name: "p50", points: history.map((s) => [s.t, s.p50]) },
        { name: "p99", points: history.map((s) => [s.t, s.p99]) }], "ms")),
    h("h3", {}, "Servers"),
    table(["Server", "Roles", "State", "Devices"], servers.map((s) => h("tr", { class: "server", dataset: { host: s.host } },
      h("td", {}, s.host), h("td", {}, (s.roles || []).join(", ")),
      h("td", {}, h("span", { class: "pill " + (s.ok ? "ok" : "bad") }, s.ok ? "up" : "down"), s.error ? ` ${s.error}` : ""),
      h("td", { class: "num" }, (s.devices || []).length))), { id: "ops-servers" }),
    h("h3", {}, "Devices"),
    table(["Server", "Device", "Mounted", "Usage", "Partitions", "Weight", "Async pendings", "Quarantined"],
      devices.map((d) => h("tr", {}, h("td", {}, d.host), h("td", {}, d.kind === "meta" ? `meta/${d.name}` : d.name),
        h("td", {}, d.mounted == null ? h("span", { class: "pill" }, "?") :
          h("span", { class: "pill " + (d.mounted ? "ok" : "bad"), title: d.error || "" }, d.mounted ? "yes" : "no")),
        h("td", {}, usage(d)),
        h("td", {}, Object.entries(d.partitions || {}).map(([k, v]) => `${k} ${v}`).join(", ")),
        h("td", { class: "num" }, d.weight ?? ""), h("td", { class: "num" }, d.async_pending ?? "?"),
        h("td", { class: "num" }, d.quarantined ?? "?"))), { id: "ops-devices" }),
    h("h3", {}, "Rings"),
    table(["Ring", "Policy", "Replicas", "Partitions", "Devices", "Zones", "Balance"], (doc.rings || []).map((r) =>
      h("tr", {}, h("td", {}, r.name), h("td", {}, r.policy || ""), h("td", { class: "num" }, r.replicas),
        h("td", { class: "num" }, (r.partitions || 0).toLocaleString()), h("td", { class: "num" }, r.devices),
        h("td", { class: "num" }, r.zones), h("td", { class: "num" }, r.balance != null ? `${Number(r.balance).toFixed(2)}%` : ""))),
    { id: "ops-rings" }),
    h("h3", {}, "Background daemons"),
    daemonRows.length ? table(["Server", "Daemon", "State", "Last pass", "Took", "Failures", "Progress"], daemonRows, { id: "ops-daemons" })
      : h("p", {}, "No daemon has reported on any server."),
    h("h3", {}, "Error-limited nodes (this proxy worker)"),
    (doc.error_limited || []).length ? table(["Node", "Errors", "Limited", "Until"], doc.error_limited.map((e) =>
      h("tr", {}, h("td", {}, e.node), h("td", { class: "num" }, e.errors), h("td", {}, e.limited ? "yes" : "no"),
        h("td", {}, e.until ? new Date(e.until * 1000).toLocaleTimeString() : "")))) : h("p", {}, "None."),
    h("p", { class: "muted" }, `Updated ${new Date(doc.generated * 1000).toLocaleTimeString()}; every ${EVERY_MS / 1000} s.`));
}

export async function showOps(main, who) {
  if (!who.reseller_admin) {
    main.append(h("p", { class: "error" }, "The cluster's state is for reseller admins."));
    return;
  }
  main.append(h("p", {}, "Asking every server…"));
  stopOps();
  const mine = gen;
  const tick = async () => {
    if (mine !== gen) return;
    try {
      const doc = await report();
      const m = doc.metrics || {};
      history.push({ t: doc.generated * 1000, requests: m.requests || {}, p50: m.latency_ms?.p50 ?? null,
        p99: m.latency_ms?.p99 ?? null, errors: m.errors?.["5xx"] || 0 });
      history = history.slice(-KEEP);
      if (mine !== gen) return;
      render(main, doc);
    } catch (err) {
      if (mine !== gen) return;
      main.prepend(h("p", { class: "error" }, `The cluster report failed: ${err.message}`));
    }
    if (mine === gen) timer = setTimeout(tick, EVERY_MS);
  };
  await tick();
}
