// memtape time-window view: click the chart for the memory live at that moment, drag
// across it for what that stretch of time allocated and had not freed by its end; the
// flame graph and the top sites follow. "Back to the peak" returns to the default view.
// Import machinery is shown as the page was made (`--imports`): the data carries the
// stacks that way already. Data: #window-data (see time_window_html.rs); names set with
// textContent only.
(function () {
  "use strict";
  var dataEl = document.getElementById("window-data");
  var chart = document.getElementById("memory-chart");
  var fg = document.getElementById("flamegraph");
  if (!dataEl || !chart || !fg || !fg.memtapeSetData) return;
  var W = JSON.parse(dataEl.textContent);
  var peakFlame = JSON.parse(fg.querySelector("script.fg-data").textContent);
  var statusEl = document.getElementById("window-status");
  var resetBtn = document.getElementById("window-reset");
  var flameSection = document.getElementById("peak-flamegraph");
  var flameTitle = flameSection.querySelector("h2");
  var flameNote = flameSection.querySelector("p.note");
  var sitesSection = document.getElementById("top-sites-section");
  var sitesTitle = sitesSection.querySelector("h2");
  var serverSites = [];
  for (var c = sitesTitle.nextElementSibling; c; c = c.nextElementSibling) serverSites.push(c);
  var initial = { flame: flameTitle.textContent, note: flameNote.textContent,
                  sites: sitesTitle.textContent, status: statusEl.textContent };
  var TOP = 50;
  var humanSize = window.memtapeUnits.humanSize;
  var pct = window.memtapeUnits.pct;
  var grouped = window.memtapeUnits.grouped;
  var view = { kind: "peak" };

  function humanTime(ns) {
    if (ns < 1e6) return (ns / 1e3).toFixed(1) + " µs";
    if (ns < 1e9) return (ns / 1e6).toFixed(1) + " ms";
    return (ns / 1e9).toFixed(3) + " s";
  }
  function bucketStart(t) { return Math.min(t * W.bucket_ns, W.duration_ns); }
  function bucketEnd(t) { return Math.min((t + 1) * W.bucket_ns, W.duration_ns); }

  // --- flame graph data from paths -------------------------------------------------------
  function flameData(d, paths) {
    var root = { frame: -1, value: 0, kids: {}, list: [] };
    for (var i = 0; i < paths.length; i++) {
      var p = paths[i], node = root;
      if (p.bytes <= 0) continue;
      root.value += p.bytes;
      for (var k = 0; k < p.frames.length; k++) {
        var f = p.frames[k];
        var kid = node.kids[f];
        if (!kid) {
          kid = node.kids[f] = { frame: f, value: 0, kids: {}, list: [] };
          node.list.push(kid);
        }
        kid.value += p.bytes;
        node = kid;
      }
    }
    var nodes = [];
    var stack = [root];
    while (stack.length) {
      var n = stack.pop();
      n.list.sort(function (a, b) { return b.value - a.value || a.frame - b.frame; });
      nodes.push([n.frame, n.value, n.list.length]);
      for (var j = n.list.length - 1; j >= 0; j--) stack.push(n.list[j]);
    }
    return { strings: d.strings, frames: d.frames, nodes: nodes };
  }

  // --- the histogram ---------------------------------------------------------------------
  var pathCache = {};
  function stackPath(node) {
    if (node < 0) return [W.other_frame];
    if (pathCache[node]) return pathCache[node];
    var path = [];
    for (var n = node; n >= 0; n = W.nodes[n][0]) path.push(W.nodes[n][1]);
    path.reverse();
    pathCache[node] = path;
    return path;
  }

  // Per stack of the data, bytes and blocks in the view: [{node, bytes, count}].
  function select(v) {
    var out = [];
    for (var i = 0; i < W.stacks.length; i++) {
      var s = W.stacks[i], bytes = 0, count = 0;
      if (v.kind === "peak") {
        bytes = s[1]; count = s[2];
      } else {
        for (var k = 3; k + 3 < s.length; k += 4) {
          var a = s[k], f = s[k + 1];
          var hit = v.kind === "moment" ? a <= v.t && v.t < f : v.a <= a && a <= v.b && v.b < f;
          if (hit) { bytes += s[k + 2]; count += s[k + 3]; }
        }
      }
      if (bytes > 0) out.push({ node: s[0], bytes: bytes, count: count });
    }
    return out;
  }

  function location(f) {
    var fr = W.frames[f];
    var fn = W.strings[fr[0]], file = W.strings[fr[1]];
    if (!file) return fn;
    return fn ? file + ":" + fr[2] + " in " + fn : file + ":" + fr[2];
  }

  function renderSites(rows) {
    var sites = {}, list = [], total = 0;
    for (var i = 0; i < rows.length; i++) {
      var r = rows[i];
      var path = stackPath(r.node);
      var key = path[path.length - 1];
      var site = sites[key];
      if (!site) {
        site = sites[key] = { frame: key, bytes: 0, count: 0, best: null };
        list.push(site);
      }
      site.bytes += r.bytes;
      site.count += r.count;
      total += r.bytes;
      if (!site.best || r.bytes > site.best.bytes) site.best = { bytes: r.bytes, path: path };
    }
    list.sort(function (a, b) { return b.bytes - a.bytes || b.count - a.count; });
    var table = document.getElementById("window-sites");
    if (!table) {
      table = document.createElement("table");
      table.id = "window-sites";
      var head = table.createTHead().insertRow();
      ["#", "Size", "Share", "Count", "Location"].forEach(function (h, j) {
        var th = document.createElement("th");
        th.textContent = h;
        if (j < 4) th.className = "num";
        head.appendChild(th);
      });
      table.appendChild(document.createElement("tbody"));
      sitesSection.appendChild(table);
    }
    var body = table.tBodies[0];
    while (body.firstChild) body.removeChild(body.firstChild);
    for (var n = 0; n < list.length && n < TOP; n++) {
      var s = list[n], tr = body.insertRow();
      tr.className = "site";
      tr.setAttribute("data-rank", String(n + 1));
      tr.setAttribute("data-bytes", String(s.bytes));
      tr.setAttribute("data-count", String(s.count));
      [String(n + 1), humanSize(s.bytes), pct(s.bytes, total), grouped(s.count)].forEach(function (t) {
        var td = tr.insertCell();
        td.className = "num";
        td.textContent = t;
      });
      var cell = tr.insertCell(), details = document.createElement("details");
      var summary = document.createElement("summary");
      summary.className = "loc";
      summary.textContent = location(s.frame);
      details.appendChild(summary);
      var ol = document.createElement("ol");
      ol.className = "traceback";
      for (var k = s.best.path.length - 1; k >= 0; k--) {
        var li = document.createElement("li");
        li.textContent = location(s.best.path[k]);
        ol.appendChild(li);
      }
      details.appendChild(ol);
      cell.appendChild(details);
    }
    table.setAttribute("data-rows", String(Math.min(list.length, TOP)));
    table.setAttribute("data-sites", String(list.length));
    table.hidden = false;
    return total;
  }

  function showServerSites(show) {
    for (var i = 0; i < serverSites.length; i++) serverSites[i].hidden = !show;
    var table = document.getElementById("window-sites");
    if (table) table.hidden = show;
  }

  // --- the chart -------------------------------------------------------------------------
  var x0 = Number(chart.getAttribute("data-plot-x0"));
  var x1 = Number(chart.getAttribute("data-plot-x1"));
  var xMax = Number(chart.getAttribute("data-x-max")) || 1;
  var byTime = chart.getAttribute("data-x-axis") === "time" && W.buckets > 1;
  var overlay = document.createElementNS(chart.namespaceURI, "rect");
  overlay.setAttribute("id", "window-range");
  overlay.setAttribute("y", "20");
  overlay.setAttribute("height", "210");
  overlay.setAttribute("display", "none");
  chart.insertBefore(overlay, chart.firstChild);

  function svgX(e) {
    var m = chart.getScreenCTM();
    if (!m) return x0;
    var p = chart.createSVGPoint();
    p.x = e.clientX;
    p.y = e.clientY;
    return p.matrixTransform(m.inverse()).x;
  }
  function bucketAt(x) {
    var frac = Math.max(0, Math.min(1, (x - x0) / (x1 - x0)));
    return Math.max(0, Math.min(W.buckets - 1, Math.floor(frac * xMax / W.bucket_ns)));
  }
  function xOfNs(ns) { return x0 + (x1 - x0) * Math.min(1, ns / xMax); }
  function showRange(fromNs, toNs) {
    var a = xOfNs(fromNs), b = xOfNs(toNs);
    overlay.setAttribute("x", String(Math.min(a, b)));
    overlay.setAttribute("width", String(Math.max(1.5, Math.abs(b - a))));
    overlay.setAttribute("display", "inline");
  }

  // --- views -----------------------------------------------------------------------------
  function render() {
    statusEl.setAttribute("data-view", view.kind);
    resetBtn.hidden = view.kind === "peak";
    if (view.kind === "peak") {
      overlay.setAttribute("display", "none");
      fg.memtapeSetData(peakFlame);
      showServerSites(true);
      flameTitle.textContent = initial.flame;
      flameNote.textContent = initial.note;
      sitesTitle.textContent = initial.sites;
      statusEl.textContent = initial.status;
      statusEl.removeAttribute("data-bytes");
      return;
    }
    var rows = select(view);
    fg.memtapeSetData(flameData(W, rows.map(function (r) {
      return { frames: stackPath(r.node), bytes: r.bytes };
    })));
    var total = renderSites(rows);
    showServerSites(false);
    var what;
    if (view.kind === "moment") {
      showRange(bucketStart(view.t), bucketEnd(view.t));
      what = "live at " + humanTime(bucketEnd(view.t)) + " (the end of the slice " +
        humanTime(bucketStart(view.t)) + " to " + humanTime(bucketEnd(view.t)) + ")";
      flameTitle.textContent = "Live memory at " + humanTime(bucketEnd(view.t));
      sitesTitle.textContent = "Top allocation sites at " + humanTime(bucketEnd(view.t));
      statusEl.setAttribute("data-from-ns", String(bucketStart(view.t)));
    } else {
      showRange(bucketStart(view.a), bucketEnd(view.b));
      what = "allocated from " + humanTime(bucketStart(view.a)) + " to " +
        humanTime(bucketEnd(view.b)) + " and still live at its end";
      flameTitle.textContent = "Memory allocated from " + humanTime(bucketStart(view.a)) +
        " to " + humanTime(bucketEnd(view.b)) + " and not freed by then";
      sitesTitle.textContent = "Top allocation sites of that window";
      statusEl.setAttribute("data-from-ns", String(bucketStart(view.a)));
    }
    statusEl.setAttribute("data-to-ns", String(bucketEnd(view.kind === "moment" ? view.t : view.b)));
    statusEl.setAttribute("data-bytes", String(total));
    statusEl.textContent = "Showing memory " + what + ": " + humanSize(total) + ".";
    flameNote.textContent = humanSize(total) + " " + what +
      ", by call stack (outermost at the top), exact to the slice of " +
      humanTime(W.bucket_ns) + "; stacks beyond the page's budget are summed as " +
      "[other stacks]. Click a frame to zoom in.";
  }

  if (byTime) {
    var dragFrom = null;
    chart.style.cursor = "crosshair";
    chart.addEventListener("mousedown", function (e) {
      dragFrom = svgX(e);
      e.preventDefault();
    });
    chart.addEventListener("mousemove", function (e) {
      if (dragFrom === null) return;
      var a = bucketAt(Math.min(dragFrom, svgX(e))), b = bucketAt(Math.max(dragFrom, svgX(e)));
      showRange(bucketStart(a), bucketEnd(b));
    });
    window.addEventListener("mouseup", function (e) {
      if (dragFrom === null) return;
      var to = svgX(e), from = dragFrom;
      dragFrom = null;
      if (Math.abs(to - from) < 3) view = { kind: "moment", t: bucketAt(to) };
      else view = { kind: "window", a: bucketAt(Math.min(from, to)), b: bucketAt(Math.max(from, to)) };
      render();
    });
  } else {
    statusEl.textContent = "This recording has too few time stamps to pick moments; " +
      "showing memory live at the peak.";
    initial.status = statusEl.textContent;
  }
  resetBtn.addEventListener("click", function () { view = { kind: "peak" }; render(); });

  document.getElementById("timeline-csv").addEventListener("click", function () {
    var text = JSON.parse(document.getElementById("timeline-csv-data").textContent);
    var url = URL.createObjectURL(new Blob([text], { type: "text/csv" }));
    var a = document.createElement("a");
    a.href = url;
    a.download = "memtape-timeline.csv";
    document.body.appendChild(a);
    a.click();
    document.body.removeChild(a);
    setTimeout(function () { URL.revokeObjectURL(url); }, 1000);
  });
})();
