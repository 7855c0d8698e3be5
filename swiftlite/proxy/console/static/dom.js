// Building the page from data without ever parsing data as HTML (names are text, always).
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "style") el.style.cssText = v;  // CSSOM: allowed by the CSP, an attribute is not
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el) { while (el.firstChild) el.firstChild.remove(); return el; }

let toastTimer;
export function toast(text) {
  const t = document.getElementById("toast");
  t.textContent = text;
  t.classList.add("show");
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => t.classList.remove("show"), 3500);
}

export function when(date) {
  if (!date) return "";
  const d = new Date(typeof date === "number" ? date * 1000 : date.endsWith("Z") || date.includes("+") ? date : date + "Z");
  return isNaN(d) ? String(date) : d.toLocaleString();
}

export function table(headers, rows, attrs = {}) {
  return h("table", attrs,
    h("thead", {}, h("tr", {}, headers.map((x) => typeof x === "string" ? h("th", {}, x) : x))),
    h("tbody", {}, rows));
}

// Element.append would write a skipped part (null) as the text "null".
export function append(el, ...parts) {
  el.append(...parts.flat(Infinity).filter((p) => p !== null && p !== undefined && p !== false));
  return el;
}
