// The offline explorer page's growth rule: a port of dynatree_core.policy.growth.grow_tree for the
// paper's rule (breadth by confidence, depth gate, tau pruning, the N_max budget), replaying a
// recorded iteration strictly as dynatree_core.policy.replay.replay_tree does: a node the recording
// never fed to the draft throws. Data-driven: the knob names come from the knob table's JSON.
"use strict";
var DynaTreeRule = (function () {
  // why a node is not expanded (GrowthRule.stop_reason), or null
  function stopReason(k, dMax, depth, p) {
    if (depth >= dMax) return "d_max";
    if (p < k.rho_stop) return "rho_stop";
    if (depth >= k.d0 && p < k.rho_deep) return "depth_gate";
    return null;
  }
  function branching(k, conf) {  // B(u) from c(u) (GrowthRule.branching)
    if (conf >= k.tau_h) return k.b_min;
    if (conf < k.tau_l) return k.b_max;
    return k.b_mid;
  }
  function byCum(a, b) {  // most probable first; ties: parent, then rank
    if (a.cum > b.cum) return -1;
    if (a.cum < b.cum) return 1;
    return a.i - b.i || a.rank - b.rank;
  }
  // it: {t, p, tk, tl, tg, cap} (the recorded envelope); k: {knob: value}
  function grow(it, k) {
    var dMax = Math.max(0, Math.min(k.d_max, it.cap));
    var logTau = k.tau > 0 ? Math.log(k.tau) : -Infinity;
    var T = {token: [it.t[0]], parent: [-1], depth: [0], logp: [0], cum: [0], stop: ["expanded"],
             env: [0], conf: [null], b: [0], pruned: []};
    var budget = k.n_max, frontier = [0];
    while (frontier.length) {
      var expand = [];
      frontier.forEach(function (i) {
        var r = stopReason(k, dMax, T.depth[i], Math.exp(T.cum[i]));
        if (r === null && budget <= 0) r = "n_max";
        if (r === null) expand.push(i); else T.stop[i] = r;
      });
      if (!expand.length) break;
      var cands = [];
      expand.forEach(function (i) {
        var e = T.env[i], toks = e >= 0 ? it.tk[e] : null, lps = e >= 0 ? it.tl[e] : null;
        if (!toks) throw new Error("replay needs the draft distribution after recorded node " + e +
                                   ", which the recorded iteration never computed");
        var conf = Math.exp(lps[0]), b = Math.min(branching(k, conf), toks.length);
        T.conf[i] = conf; T.b[i] = b;
        for (var r = 0; r < b; r++) {
          var cum = T.cum[i] + lps[r];
          var c = {cum: cum, i: i, rank: r, token: toks[r], lp: lps[r]};
          if (cum < logTau) { c.reason = "tau"; T.pruned.push(c); } else cands.push(c);
        }
      });
      cands.sort(byCum);
      cands.slice(Math.max(budget, 0)).forEach(function (c) { c.reason = "n_max"; T.pruned.push(c); });
      cands = cands.slice(0, Math.max(budget, 0));
      cands.sort(function (a, b) { return a.i - b.i || a.rank - b.rank; });
      var next = [], kept = {};
      cands.forEach(function (c) {
        // a child the recording never drafted is a leaf here (its target's token unknown: -1)
        var e = it.child[T.env[c.i]][c.token];
        if (e === undefined) e = -1;
        T.token.push(c.token); T.parent.push(c.i); T.depth.push(T.depth[c.i] + 1); T.logp.push(c.lp);
        T.cum.push(c.cum); T.stop.push("expanded"); T.env.push(e); T.conf.push(null); T.b.push(0);
        next.push(T.token.length - 1); kept[c.i] = true;
      });
      expand.forEach(function (i) {
        if (kept[i]) return;
        var reasons = T.pruned.filter(function (c) { return c.i === i; }).map(function (c) { return c.reason; });
        T.stop[i] = reasons.indexOf("n_max") >= 0 ? "n_max" : "tau";
      });
      budget -= cands.length;
      frontier = next;
    }
    return T;
  }
  // the accepted path (node ids, root excluded) and the bonus: the target's token after each node
  function accepted(it, T) {
    var kids = T.token.map(function () { return []; });
    for (var i = 1; i < T.token.length; i++) kids[T.parent[i]].push(i);
    var path = [], node = 0;
    for (;;) {
      if (T.env[node] < 0) throw new Error("the accepted path reaches a node the recording never verified");
      var want = it.tg[T.env[node]], nxt = kids[node].filter(function (c) { return T.token[c] === want; });
      if (!nxt.length) return {path: path, bonus: want};
      node = nxt[0]; path.push(node);
    }
  }
  return {grow: grow, accepted: accepted, stopReason: stopReason, branching: branching};
})();
