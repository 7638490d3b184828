"use strict";
// Sorting and filtering for the prompt table of report.html. The page is
// complete without it: every prompt is in the table, in suite order. The
// script reads only the DOM (attributes and text written escaped by the
// page), builds its controls with createElement and textContent, and
// never parses HTML or evaluates code. The page's Content-Security-Policy
// allows this script by its sha256 and nothing else.
(function () {
  var table = document.getElementById("prompt-table");
  if (!table || !table.tHead) return;
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  var metrics = [];
  heads.forEach(function (th) {
    if (th.hasAttribute("data-metric")) metrics.push(th.getAttribute("data-metric"));
  });
  var num = function (s) { return s === null || s === "" ? NaN : Number(s); };
  var rows = Array.prototype.slice.call(table.tBodies).map(function (body, order) {
    var cells = body.querySelectorAll("td[data-b]");
    return {
      body: body,
      order: order,
      id: body.getAttribute("data-id") || "",
      category: body.hasAttribute("data-category") ? body.getAttribute("data-category") : null,
      differ: body.hasAttribute("data-differ"),
      text: body.textContent.toLowerCase(),
      values: Array.prototype.map.call(cells, function (td) {
        return [num(td.getAttribute("data-b")), num(td.getAttribute("data-c"))];
      })
    };
  });
  var categories = [];
  rows.forEach(function (r) {
    if (r.category !== null && categories.indexOf(r.category) < 0) categories.push(r.category);
  });
  categories.sort();

  function make(tag, props, children) {
    var e = document.createElement(tag);
    Object.keys(props || {}).forEach(function (k) {
      if (k === "text") e.textContent = props[k]; else e.setAttribute(k, props[k]);
    });
    (children || []).forEach(function (c) { e.appendChild(c); });
    return e;
  }
  function select(label, first, names, extra) {
    var s = make("select", { "aria-label": label });
    s.appendChild(make("option", { value: "", text: first }));
    names.forEach(function (n, i) { s.appendChild(make("option", { value: String(i), text: n })); });
    (extra || []).forEach(function (o) { s.appendChild(make("option", { value: o[0], text: o[1] })); });
    return s;
  }
  var query = make("input", { type: "search", placeholder: "id, prompt or output text", "aria-label": "Filter prompts by text" });
  var category = select("Category", "every category", categories);
  var metric = select("Metric", "any metric", metrics);
  var change = select("Change", "all prompts", [], [
    ["changed", "metric changed"],
    ["flipped", "flipped (0 ↔ 1)"],
    ["increased", "increased"],
    ["decreased", "decreased"],
    ["differ", "outputs differ"]
  ]);
  var reset = make("button", { type: "button", text: "Show all" });
  var count = make("output", { "aria-live": "polite" });
  var bar = make("div", { "class": "filters", role: "search" }, [
    make("label", {}, [document.createTextNode("Filter "), query]),
    make("label", {}, [document.createTextNode("Category "), category]),
    make("label", {}, [document.createTextNode("Metric "), metric]),
    make("label", {}, [document.createTextNode("Show "), change]),
    reset,
    count
  ]);
  table.parentNode.insertBefore(bar, table);

  function moved(v, how) {
    var b = v[0], c = v[1];
    if (isNaN(b) || isNaN(c)) return false;
    if (how === "changed") return b !== c;
    if (how === "flipped") return b !== c && (b === 0 || b === 1) && (c === 0 || c === 1);
    if (how === "increased") return c > b;
    if (how === "decreased") return c < b;
    return true;
  }
  function apply() {
    var needle = query.value.trim().toLowerCase();
    var cat = category.value === "" ? undefined : categories[Number(category.value)];
    var m = metric.value === "" ? -1 : Number(metric.value);
    var how = change.value;
    var shown = 0;
    rows.forEach(function (r) {
      var ok = (needle === "" || r.text.indexOf(needle) >= 0) &&
        (cat === undefined || r.category === cat) &&
        (how === "" ? true : how === "differ" ? r.differ :
          m < 0 ? r.values.some(function (v) { return moved(v, how); }) : moved(r.values[m] || [NaN, NaN], how));
      r.body.hidden = !ok;
      if (ok) shown += 1;
    });
    count.textContent = shown + " of " + rows.length + " prompts shown";
  }
  // Shows the prompts of `metricName` in `categoryName` (every category
  // when null) that moved as `how` says.
  function show(metricName, categoryName, how) {
    var i = metrics.indexOf(metricName);
    metric.value = i < 0 ? "" : String(i);
    var j = categoryName === null ? -1 : categories.indexOf(categoryName);
    category.value = j < 0 ? "" : String(j);
    change.value = how;
    query.value = "";
    apply();
  }
  [query, category, metric, change].forEach(function (c) {
    c.addEventListener(c === query ? "input" : "change", apply);
  });
  reset.addEventListener("click", function () { show(null, null, ""); });

  // Sorting: a button in each sortable header; a second click reverses.
  // Metrics sort by their change (candidate − baseline), prompts without
  // a value on both sides last.
  function key(r, col) {
    if (col === "id") return r.id;
    if (col === "category") return r.category === null ? "" : r.category;
    var v = r.values[Number(col)] || [NaN, NaN];
    return v[1] - v[0];
  }
  function sortBy(th) {
    var col = th.getAttribute("data-sort");
    var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
    rows.slice().sort(function (a, b) {
      var x = key(a, col), y = key(b, col);
      if (typeof x === "number") {
        if (isNaN(x) || isNaN(y)) return isNaN(x) - isNaN(y) || a.order - b.order;
        return (x - y) * dir || a.order - b.order;
      }
      return x.localeCompare(y, undefined, { numeric: true }) * dir || a.order - b.order;
    }).forEach(function (r) { table.appendChild(r.body); });
  }
  heads.forEach(function (th) {
    if (!th.hasAttribute("data-sort")) return;
    var button = make("button", { type: "button", "class": "sort", title: "Sort by this column" });
    while (th.firstChild) button.appendChild(th.firstChild);
    th.appendChild(button);
    button.addEventListener("click", function () { sortBy(th); });
  });

  // A delta's link to its prompts: filter to them (the link's own target,
  // #prompts, scrolls to the table, with or without this script).
  document.addEventListener("click", function (e) {
    var a = e.target && e.target.closest ? e.target.closest("a[data-metric]") : null;
    if (!a) return;
    show(a.getAttribute("data-metric"),
      a.hasAttribute("data-category") ? a.getAttribute("data-category") : null, "changed");
  });
  // A hand-written link: #prompts?metric=M&category=C&show=flipped&q=text
  var hash = window.location.hash;
  if (hash.indexOf("#prompts?") === 0 && typeof URLSearchParams === "function") {
    var p = new URLSearchParams(hash.slice("#prompts?".length));
    show(p.get("metric"), p.get("category"), p.get("show") || (p.get("metric") ? "changed" : ""));
    if (p.get("q")) { query.value = p.get("q"); apply(); }
    var section = document.getElementById("prompts");
    if (section) section.scrollIntoView();
  } else {
    apply();
  }
})();
