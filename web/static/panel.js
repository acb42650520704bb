// agentgw panel: small vanilla JavaScript, no build step, no external assets.
// - [data-action] buttons call the JSON API (data-method, data-url, data-body,
//   data-confirm) and reload, or go to data-then; with data-flash="key", the
//   answer's "key" is shown on the reloaded page;
// - form[data-api] sends its fields as JSON to data-url with data-method;
// - [data-chart="drift"] and [data-chart="bars"] draw inline SVG charts from the
//   JSON in a <script type="application/json"> named by data-source;
// - a .table-wrap whose table is wider than it (a phone) is marked data-overflow
//   and shows the cue line before it ("scroll sideways").
"use strict";

(() => {
  const SVG = "http://www.w3.org/2000/svg";

  function flash(text, kind = "error") {
    let box = document.getElementById("flash");
    if (!box) {
      box = document.createElement("p");
      box.id = "flash";
      document.querySelector(".panel-main").prepend(box);
    }
    box.className = `flash ${kind}`;
    box.setAttribute("role", kind === "error" ? "alert" : "status");
    box.textContent = text;
  }

  // Filter menus that apply as soon as they change (was an inline onchange, which
  // the Content-Security-Policy refuses).
  for (const select of document.querySelectorAll("select[data-submit-on-change]")) {
    select.addEventListener("change", () => select.form.submit());
  }

  async function call(method, url, body) {
    const response = await fetch(url, {
      method,
      headers: body === undefined ? {} : { "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
    });
    let data = null;
    try {
      data = await response.json();
    } catch {
      data = null;
    }
    if (!response.ok) {
      const message = data?.error?.message || `${response.status} ${response.statusText}`;
      throw new Error(message);
    }
    return data;
  }

  // A message that outlives the reload after an action (its result, say).
  const FLASH_KEY = "agentgw.panel.flash";

  function after(el, data) {
    const said = el.dataset.flash && data?.[el.dataset.flash];
    if (said) {
      try {
        window.sessionStorage.setItem(FLASH_KEY, String(said));
      } catch {
        // Storage off: the result is not carried over the reload.
      }
    }
    const then = el.dataset.then || data?.redirect;
    if (then) window.location.assign(then);
    else window.location.reload();
  }

  document.addEventListener("click", async (event) => {
    const el = event.target.closest("[data-action]");
    if (!el) return;
    event.preventDefault();
    if (el.dataset.confirm && !window.confirm(el.dataset.confirm)) return;
    el.disabled = true;
    try {
      const body = el.dataset.body ? JSON.parse(el.dataset.body) : undefined;
      after(el, await call(el.dataset.method || "POST", el.dataset.url, body));
    } catch (err) {
      flash(err.message);
      el.disabled = false;
    }
  });

  document.addEventListener("submit", async (event) => {
    const form = event.target.closest("form[data-api]");
    if (!form) return;
    event.preventDefault();
    if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return;
    const body = {};
    for (const field of form.elements) {
      if (!field.name || field.disabled) continue;
      if (field.type === "checkbox") body[field.name] = field.checked;
      else if (field.type === "number" || field.type === "range") {
        if (field.value !== "") body[field.name] = Number(field.value);
      } else body[field.name] = field.value;
    }
    try {
      after(form, await call(form.dataset.method || "POST", form.dataset.url, body));
    } catch (err) {
      flash(err.message);
    }
  });

  // ------------------------------------------------------------------ charts

  function node(tag, attrs, parent) {
    const el = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, String(value));
    if (parent) parent.appendChild(el);
    return el;
  }

  function source(el) {
    const script = document.getElementById(el.dataset.source);
    return script ? JSON.parse(script.textContent) : null;
  }

  function tipFor(container) {
    const tip = document.createElement("div");
    tip.className = "tip";
    tip.hidden = true;
    container.style.position = "relative";
    container.appendChild(tip);
    return tip;
  }

  function drawDrift(container) {
    const data = source(container);
    if (!data || !data.points.length) return;
    const W = 720;
    const H = 260;
    const pad = { l: 34, r: 12, t: 12, b: 24 };
    const n = data.points.length;
    const x = (i) => pad.l + (n === 1 ? 0.5 : i / (n - 1)) * (W - pad.l - pad.r);
    const y = (v) => pad.t + (1 - v) * (H - pad.t - pad.b);
    const svg = node("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img" });
    svg.setAttribute("aria-label", `SyncScore over ${n} judged turns`);
    node("line", { x1: pad.l, x2: W - pad.r, y1: y(0), y2: y(0), class: "axis" }, svg);
    node("line", { x1: pad.l, x2: pad.l, y1: y(0), y2: y(1), class: "axis" }, svg);
    for (const v of [0, 0.5, 1]) {
      const label = node("text", { x: 4, y: y(v) + 4, class: "label" }, svg);
      label.textContent = v.toFixed(1);
    }
    for (const [value, tier] of data.thresholds) {
      node("line", {
        x1: pad.l, x2: W - pad.r, y1: y(value), y2: y(value),
        class: `threshold t-${tier}`, "data-threshold": value,
      }, svg);
    }
    const index = new Map(data.points.map((p, i) => [p.turn_id, i]));
    for (const action of data.actions) {
      const i = index.get(action.turn_id);
      if (i === undefined) continue;
      const line = node("line", {
        x1: x(i), x2: x(i), y1: y(0), y2: y(1), class: "action",
        "data-kind": action.kind,
      }, svg);
      const title = node("title", {}, line);
      title.textContent = `${action.kind} (${action.tier}) at turn ${action.turn_id}`;
      const mark = node("text", { x: x(i) + 3, y: pad.t + 10, class: "label" }, svg);
      mark.textContent = { anchor: "A", reinforce: "+", rebase: "R" }[action.kind] || "?";
    }
    const path = (key) =>
      data.points
        .map((p, i) => (p[key] == null ? null : `${x(i).toFixed(1)},${y(p[key]).toFixed(1)}`))
        .filter(Boolean)
        .join(" ");
    const colours = ["#7b61ff", "#1f8a4c", "#d0661f", "#b88a00", "#b3261e"];
    data.dimensions.forEach((dim, k) => {
      node("polyline", {
        points: path(dim), class: `dim dim-${dim}`, stroke: colours[k % colours.length],
        visibility: "hidden",
      }, svg);
    });
    node("polyline", { points: path("ewma"), class: "ewma" }, svg);
    const tip = tipFor(container);
    data.points.forEach((p, i) => {
      if (p.composite == null) return;
      const dot = node("circle", {
        cx: x(i), cy: y(p.composite), r: 4, class: "point", tabindex: 0,
        "data-turn": p.turn_id,
      }, svg);
      const show = () => {
        const dims = data.dimensions
          .map((d) => `${d} ${p[d] == null ? "—" : p[d].toFixed(2)}`)
          .join(" · ");
        tip.replaceChildren();
        const head = document.createElement("strong");
        head.textContent = `Turn ${p.turn_id}: ${p.composite.toFixed(2)} (EWMA ${
          p.ewma == null ? "—" : p.ewma.toFixed(2)}, ${p.tier}, ${p.trend})`;
        const verdict = document.createElement("div");
        verdict.className = "muted";
        verdict.textContent = `${dims} — judge ${p.judge}`;
        const reply = document.createElement("p");
        reply.textContent = p.reply || "(reply not stored)";
        tip.append(head, verdict, reply);
        tip.hidden = false;
        const box = container.getBoundingClientRect();
        const at = dot.getBoundingClientRect();
        tip.style.left = `${Math.max(0, Math.min(at.left - box.left - 40, box.width - 260))}px`;
        tip.style.top = `${at.top - box.top + 14}px`;
      };
      dot.addEventListener("mouseenter", show);
      dot.addEventListener("focus", show);
      dot.addEventListener("click", show);
      dot.addEventListener("mouseleave", () => { tip.hidden = true; });
      dot.addEventListener("blur", () => { tip.hidden = true; });
    });
    container.prepend(svg);
    for (const box of document.querySelectorAll("input[data-dimension]")) {
      box.addEventListener("change", () => {
        const line = svg.querySelector(`.dim-${box.dataset.dimension}`);
        if (line) line.setAttribute("visibility", box.checked ? "visible" : "hidden");
      });
    }
  }

  function drawBars(container) {
    const data = source(container);
    if (!data) return;
    const rows = Object.entries(data);
    const W = 420;
    const row = 26;
    const svg = node("svg", {
      viewBox: `0 0 ${W} ${rows.length * row + 6}`, class: "chart", role: "img",
    });
    svg.setAttribute("aria-label", "Persona traits");
    rows.forEach(([name, value], i) => {
      const label = node("text", { x: 0, y: i * row + 17, class: "label" }, svg);
      label.textContent = name.replace(/_/g, " ");
      node("rect", { x: 120, y: i * row + 6, width: 260, height: 14, rx: 3, class: "axis",
        fill: "none" }, svg);
      node("rect", { x: 120, y: i * row + 6, width: 260 * value, height: 14, rx: 3,
        class: "bar", "data-trait": name }, svg);
      const num = node("text", { x: 386, y: i * row + 17, class: "label" }, svg);
      num.textContent = value.toFixed(2);
    });
    container.prepend(svg);
  }

  try {
    const carried = window.sessionStorage.getItem(FLASH_KEY);
    if (carried) {
      window.sessionStorage.removeItem(FLASH_KEY);
      flash(carried, "ok");
    }
  } catch {
    // Storage off: nothing was carried.
  }

  for (const el of document.querySelectorAll("[data-chart]")) {
    if (el.dataset.chart === "drift") drawDrift(el);
    else if (el.dataset.chart === "bars") drawBars(el);
  }

  // Wide tables scroll inside their frame, never the page: the frame says so with a
  // cue line and edge shadows while there is more to see.
  const frames = [...document.querySelectorAll("table")].map((table) => {
    let wrap = table.closest(".table-wrap");
    if (!wrap) {
      wrap = document.createElement("div");
      wrap.className = "table-wrap";
      table.replaceWith(wrap);
      wrap.append(table);
    }
    let cue = wrap.previousElementSibling;
    if (!cue || !cue.classList.contains("scroll-cue")) {
      cue = document.createElement("p");
      cue.className = "scroll-cue";
      cue.setAttribute("aria-hidden", "true");
      cue.textContent = "More columns: scroll the table sideways →";
      wrap.before(cue);
    }
    return { wrap, cue };
  });

  function markOverflow({ wrap, cue }) {
    const over = wrap.scrollWidth > wrap.clientWidth + 1;
    wrap.dataset.overflow = String(over);
    wrap.dataset.end = String(wrap.scrollLeft + wrap.clientWidth >= wrap.scrollWidth - 1);
    wrap.dataset.start = String(wrap.scrollLeft <= 0);
    cue.hidden = !over;
  }

  for (const frame of frames) {
    markOverflow(frame);
    frame.wrap.addEventListener("scroll", () => markOverflow(frame), { passive: true });
  }
  window.addEventListener("resize", () => frames.forEach(markOverflow));
})();
