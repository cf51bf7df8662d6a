// The offline explorer page's controls and views: sliders built from the knob table's JSON, the
// iteration stepper, reset and presets; the regrown tree (tidy layered layout, as
// dynatree_viz.core.layout), ℓ, the node count, the why panel and the tokens as text.
// Every recorded text is shown with textContent, or HTML-escaped in plot labels: it never runs.
"use strict";
(function () {
  var TABLE = JSON.parse(document.getElementById("dt-knobs").textContent);
  var DATA = JSON.parse(document.getElementById("dt-data").textContent);
  var KNOBS = TABLE.knobs.filter(function (k) { return k.slider; });
  var $ = function (id) { return document.getElementById(id); };
  DATA.iterations.forEach(function (it) {  // child of each recorded node by token
    it.child = it.t.map(function () { return {}; });
    for (var i = 1; i < it.t.length; i++) it.child[it.p[i]][it.t[i]] = i;
  });
  var state = {iter: 0, knobs: {}, selected: null, tree: null, error: null};
  var inputs = {};
  var WORDS = {expanded: "expanded: the draft ran here", d_max: "not expanded: depth reached D_max",
    rho_stop: "not expanded: p(u) < ρ_stop (early stop)", depth_gate: "not expanded: past D0 with p(u) < ρ_deep",
    n_max: "not expanded / children cut: the budget N_max was spent", tau: "every child's p fell below τ (pruned)"};

  function tok(id) { var s = DATA.vocab[String(id)]; return (s === undefined ? "⟨" + id + "⟩" : s).replace(/\n/g, "↵"); }
  function esc(s) { return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;"); }
  function el(tag, text, cls) { var e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; }
  function fmt(k, v) { return k.kind === "int" ? String(v) : Number(v).toFixed(k.step < 0.01 ? 3 : 2); }

  function buildSliders() {
    var box = $("dt-knobs-box");
    KNOBS.forEach(function (k) {
      var d = el("div", undefined, "dt-knob"), lab = el("label", k.symbol), inp = document.createElement("input"), out = el("output");
      lab.title = k.help; inp.type = "range"; inp.min = k.page[0]; inp.max = k.page[1]; inp.step = k.step;
      inp.id = "dt-knob-" + k.name; inp.title = k.title; lab.htmlFor = inp.id;
      inp.addEventListener("input", function () { state.knobs[k.name] = k.kind === "int" ? parseInt(inp.value, 10) : parseFloat(inp.value); changed(); });
      d.appendChild(lab); d.appendChild(inp); d.appendChild(out); box.appendChild(d);
      inputs[k.name] = {input: inp, out: out, knob: k};
    });
  }
  function syncSliders() {  // each slider shows its value and keeps the ordered pairs apart
    KNOBS.forEach(function (k) { var s = inputs[k.name]; s.input.min = k.page[0]; s.input.max = k.page[1]; });
    TABLE.ordered_pairs.forEach(function (pr) {
      var lo = inputs[pr[0]], hi = inputs[pr[1]]; if (!lo || !hi) return;
      var gap = pr[2] ? lo.knob.step : 0;
      lo.input.max = Math.round((state.knobs[pr[1]] - gap) * 1e9) / 1e9;
      hi.input.min = Math.round((state.knobs[pr[0]] + gap) * 1e9) / 1e9;
    });
    KNOBS.forEach(function (k) { var s = inputs[k.name]; s.input.value = state.knobs[k.name]; s.out.textContent = fmt(k, state.knobs[k.name]); });
  }
  function regrow(i, knobs) {
    var it = DATA.iterations[i], T = DynaTreeRule.grow(it, knobs), acc = DynaTreeRule.accepted(it, T);
    T.path = acc.path; T.bonus = acc.bonus; return T;
  }
  function compute() {
    try { state.tree = regrow(state.iter, state.knobs); state.error = null; }
    catch (e) { state.tree = null; state.error = e.message; }
  }
  var pending = false;
  function changed() { compute(); state.selected = null; if (!pending) { pending = true; requestAnimationFrame(function () { pending = false; render(); }); } }

  function layout(T) {  // leaves at consecutive x in depth-first order, inner nodes midway
    var n = T.token.length, kids = [], x = new Array(n), leaf = 0;
    for (var i = 0; i < n; i++) kids.push([]);
    for (i = 1; i < n; i++) kids[T.parent[i]].push(i);
    var stack = [[0, false]];
    while (stack.length) {
      var top = stack.pop(), v = top[0], ks = kids[v];
      if (!ks.length) x[v] = leaf++;
      else if (top[1]) x[v] = (x[ks[0]] + x[ks[ks.length - 1]]) / 2;
      else { stack.push([v, true]); for (var j = ks.length - 1; j >= 0; j--) stack.push([ks[j], false]); }
    }
    return x;
  }
  function render() {
    syncSliders();
    var it = DATA.iterations[state.iter];
    $("dt-iter").value = state.iter; $("dt-iter-out").textContent = state.iter + " / " + (DATA.iterations.length - 1) + " (recorded #" + it.index + ")";
    var stats = $("dt-stats"); stats.textContent = "";
    if (state.error) { stats.appendChild(el("span", "this setting needs data the recording lacks: " + state.error, "dt-error")); return; }
    var T = state.tree, onPath = {0: true};
    T.path.forEach(function (v) { onPath[v] = true; });
    stats.appendChild(el("b", "accepted ℓ = " + T.path.length));
    stats.appendChild(el("span", " · nodes verified " + (T.token.length - 1) + " · depth " + Math.max.apply(null, T.depth) +
      " · committed " + (T.path.length + 1) + " (ℓ + the target's bonus token) · recorded run: ℓ = " + it.recorded_ell));
    drawTree(it, T, onPath); drawText(it, T); drawWhy(it, T);
  }
  function drawTree(it, T, onPath) {
    var x = layout(T), n = T.token.length, ex = [], ey = [], ax = [], ay = [], colors = [], lines = [], hover = [];
    for (var i = 0; i < n; i++) {
      var p = T.parent[i];
      if (p >= 0) { var tx = onPath[i] ? ax : ex, ty = onPath[i] ? ay : ey; tx.push(x[p], x[i], null); ty.push(T.depth[p], T.depth[i], null); }
      var reached = p >= 0 && onPath[p], acc = onPath[i];
      colors.push(i === 0 ? "#444" : acc ? "#0072B2" : reached ? "#D55E00" : "#bbb");
      lines.push(i === state.selected ? 3 : 1);
      hover.push(esc("#" + i + " " + JSON.stringify(tok(T.token[i]))) + "<br>p(u) = " + Math.exp(T.cum[i]).toFixed(3) + "<br>" + esc(WORDS[T.stop[i]] || T.stop[i]));
    }
    var last = T.path.length ? T.path[T.path.length - 1] : 0;
    var data = [
      {type: "scatter", mode: "lines", x: ex, y: ey, line: {color: "#ccc", width: 1}, hoverinfo: "skip", name: "drafted edge"},
      {type: "scatter", mode: "lines", x: ax, y: ay, line: {color: "#0072B2", width: 4}, hoverinfo: "skip", name: "accepted path"},
      {type: "scatter", mode: "markers+text", x: x, y: T.depth, text: T.token.map(function (t) { return esc(tok(t)); }),
       textposition: "middle right", hovertext: hover, hoverinfo: "text", name: "nodes",
       marker: {size: 14, color: colors, line: {color: "#000", width: lines}}},
      {type: "scatter", mode: "markers+text", x: [x[last]], y: [T.depth[last] + 0.6], text: [esc("★ " + tok(T.bonus))],
       textposition: "middle right", marker: {symbol: "star", size: 16, color: "#E69F00"}, hoverinfo: "skip", name: "bonus"}];
    if (!window.Plotly) return drawSvg(x, T, colors, onPath, last);
    var lay = {margin: {l: 30, r: 120, t: 10, b: 30}, showlegend: false, height: 460,
      xaxis: {visible: false}, yaxis: {autorange: "reversed", title: {text: "depth"}, dtick: 1, zeroline: false}};
    Plotly.react("dt-tree", data, lay, {displayModeBar: false, responsive: true});
    var div = $("dt-tree");
    if (!div._dtClick) { div._dtClick = true; div.on("plotly_click", function (ev) { var pt = ev.points[0]; if (pt.curveNumber === 2) { state.selected = pt.pointIndex; render(); } }); }
  }
  // without plotly.js (a page embedded in a notebook's static HTML): the same picture as plain SVG
  function drawSvg(x, T, colors, onPath, last) {
    var NS = "http://www.w3.org/2000/svg", div = $("dt-tree"), W = Math.max(1, Math.max.apply(null, x) + 1);
    var depth = Math.max.apply(null, T.depth) + 1.6, w = div.clientWidth || 900, h = 440;
    var sx = function (v) { return 30 + (w - 160) * (W > 1 ? v / (W - 1) : 0.5); };
    var sy = function (d) { return 20 + (h - 40) * d / depth; };
    var svg = document.createElementNS(NS, "svg");
    svg.setAttribute("width", w); svg.setAttribute("height", h);
    function add(tag, attrs, text) {
      var e = document.createElementNS(NS, tag);
      Object.keys(attrs).forEach(function (a) { e.setAttribute(a, attrs[a]); });
      if (text !== undefined) e.textContent = text;
      svg.appendChild(e); return e;
    }
    for (var i = 1; i < T.token.length; i++) {
      var p = T.parent[i];
      add("line", {x1: sx(x[p]), y1: sy(T.depth[p]), x2: sx(x[i]), y2: sy(T.depth[i]),
                   stroke: onPath[i] ? "#0072B2" : "#ccc", "stroke-width": onPath[i] ? 4 : 1});
    }
    T.token.forEach(function (t, j) {
      var c = add("circle", {cx: sx(x[j]), cy: sy(T.depth[j]), r: 7, fill: colors[j], stroke: "#000",
                             "stroke-width": j === state.selected ? 3 : 1, style: "cursor:pointer"});
      c.addEventListener("click", function () { state.selected = j; render(); });
      add("text", {x: sx(x[j]) + 10, y: sy(T.depth[j]) + 4, "font-size": 12}, tok(t));
    });
    add("text", {x: sx(x[last]) + 10, y: sy(T.depth[last] + 0.6) + 4, "font-size": 12, fill: "#b36b00"}, "★ " + tok(T.bonus));
    div.textContent = ""; div.appendChild(svg);
  }
  function drawText(it, T) {
    var box = $("dt-text"); box.textContent = "";
    box.appendChild(el("span", DATA.prompt, "dt-muted"));
    box.appendChild(el("span", DATA.tokens.slice(0, it.before).map(tok).join("")));
    T.path.forEach(function (v) { box.appendChild(el("span", tok(T.token[v]), "dt-acc")); });
    box.appendChild(el("span", tok(T.bonus), "dt-bonus"));
  }
  function drawWhy(it, T) {
    var box = $("dt-why"), u = state.selected; box.textContent = "";
    if (u === null || u >= T.token.length) { box.textContent = "Click a node of the tree."; return; }
    var k = state.knobs, p = Math.exp(T.cum[u]), want = T.env[u] >= 0 ? it.tg[T.env[u]] : null;
    box.appendChild(el("div", "node #" + u + " " + JSON.stringify(tok(T.token[u])) + " at depth " + T.depth[u] + ", p(u) = " + p.toFixed(4)));
    box.appendChild(el("div", WORDS[T.stop[u]] || T.stop[u]));
    if (T.conf[u] !== null) {
      var c = T.conf[u], rule = c >= k.tau_h ? "c(u) ≥ τ_h → B_min" : c < k.tau_l ? "c(u) < τ_ℓ → B_max" : "τ_ℓ ≤ c(u) < τ_h → B_mid";
      box.appendChild(el("div", "draft confidence c(u) = " + c.toFixed(3) + ": " + rule + " = " + T.b[u] + " children"));
      var tab = el("table"), head = el("tr"); ["rank", "token", "q", "p(child)", "fate"].forEach(function (h) { head.appendChild(el("th", h)); });
      tab.appendChild(head);
      var toks = it.tk[T.env[u]], lps = it.tl[T.env[u]];
      toks.forEach(function (t, r) {
        var fate = r >= T.b[u] ? "beyond B(u): not drafted" : "kept";
        T.pruned.forEach(function (pc) { if (pc.i === u && pc.rank === r) fate = pc.reason === "tau" ? "pruned: p < τ" : "cut: N_max spent"; });
        if (t === want && fate === "kept") fate += ", the target's token: accepted if u is";
        var row = el("tr"); [String(r), JSON.stringify(tok(t)), Math.exp(lps[r]).toFixed(3), Math.exp(T.cum[u] + lps[r]).toFixed(4), fate].forEach(function (s) { row.appendChild(el("td", s)); });
        tab.appendChild(row);
      });
      box.appendChild(tab);
    }
    box.appendChild(el("div", want === null ? "the recording never verified this node" : "the target's token after it: " + JSON.stringify(tok(want))));
  }
  function setKnobs(values) { KNOBS.forEach(function (kn) { if (values[kn.name] !== undefined) state.knobs[kn.name] = values[kn.name]; }); changed(); }
  function showIter(i) { state.iter = Math.max(0, Math.min(DATA.iterations.length - 1, i)); changed(); }
  function reset() { setKnobs(DATA.iterations[state.iter].start); }

  buildSliders();
  var iter = $("dt-iter"); iter.max = DATA.iterations.length - 1;
  iter.addEventListener("input", function () { showIter(parseInt(iter.value, 10)); });
  $("dt-prev").addEventListener("click", function () { showIter(state.iter - 1); });
  $("dt-next").addEventListener("click", function () { showIter(state.iter + 1); });
  $("dt-reset").addEventListener("click", reset);
  Object.keys(DATA.presets).forEach(function (name) {
    var b = el("button", name); b.id = "dt-preset-" + name; b.addEventListener("click", function () { setKnobs(DATA.presets[name]); });
    $("dt-presets").appendChild(b);
  });
  $("dt-about").textContent = "target " + DATA.target + ", draft " + DATA.draft + (DATA.sampling ? " · sampled (the recorded draws)" : " · greedy") +
    (DATA.replay ? " · recorded for replay: every setting inside the sliders' ranges regrows from the recording" :
     " · an ordinary trace: settings wider than the recorded one may lack data");
  $("dt-legend").textContent = "Legend: blue node and thick blue edge: accepted by the target (the accepted path, length ℓ); " +
    "vermillion node: the target chose another token after its parent (rejected); grey: never reached by the accepted path; " +
    "orange ★: the target's bonus token after the last accepted node. Depth grows downward; click a node for why it grew or stopped.";
  state.knobs = Object.assign({}, DATA.iterations[0].start);
  compute(); render();

  window.dynatreeExplorer = {
    knobs: KNOBS.map(function (k) { return k.name; }),
    set: function (values) { setKnobs(values); return Object.assign({}, state.knobs); },
    tree: function (i) {  // the regrown node list of iteration i under the current knobs
      var T = regrow(i === undefined ? state.iter : i, state.knobs);
      return {nodes: T.token.map(function (t, j) { return {token: t, parent: T.parent[j], stop: T.stop[j], depth: T.depth[j]}; }),
              ell: T.path.length, bonus: T.bonus};
    },
    show: showIter, reset: reset, render: function () { compute(); render(); },
    error: function () { return state.error; }
  };
})();
