// memtape flame graph: click a frame to zoom in, "Reset zoom" to go back, type in the
// search box to highlight frames. Data comes from the JSON block of each .fg element;
// every name is set with textContent, never parsed as HTML.
(function () {
  "use strict";
  var ROW = 18;
  var UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

  // As the Rust reports write them (units.rs): "512 B", "1.5 KiB", "+8.1 MiB", "1,234".
  function humanSize(b) {
    if (b < 1024) return b + " B";
    var u = 0;
    while (b >= 1024 && u + 1 < UNITS.length) { b /= 1024; u += 1; }
    if (Math.round(b * 10) / 10 >= 1024 && u + 1 < UNITS.length) { b /= 1024; u += 1; }
    return b.toFixed(1) + " " + UNITS[u];
  }

  function grouped(n) {
    return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }

  // The file's last path component: labels stay short, the tooltip has the whole path.
  function baseName(file) {
    var i = Math.max(file.lastIndexOf("/"), file.lastIndexOf("\\"));
    return i >= 0 ? file.slice(i + 1) : file;
  }

  function pct(part, whole) {
    return whole > 0 ? (100 * part / whole).toFixed(1) + "%" : "0%";
  }

  function hash(s) {
    var h = 2166136261;
    for (var i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
    return h >>> 0;
  }

  // Nodes arrive in preorder as [frame, bytes, children]; frame -1 is the root.
  function buildTree(data) {
    var rows = data.nodes;
    var root = null;
    var open = [];
    for (var i = 0; i < rows.length; i++) {
      var r = rows[i];
      var parent = open.length ? open[open.length - 1] : null;
      var node = { frame: r[0], value: r[1], want: r[2], kids: [], parent: parent,
                   depth: parent ? parent.depth + 1 : 0 };
      if (parent) {
        parent.kids.push(node);
        if (parent.kids.length === parent.want) open.pop();
      } else {
        root = node;
      }
      if (node.want > 0) open.push(node);
    }
    return root;
  }

  function init(fg) {
    var dataEl = fg.querySelector("script.fg-data");
    var frames = fg.querySelector(".fg-frames");
    var search = fg.querySelector(".fg-search");
    var reset = fg.querySelector(".fg-reset");
    var matched = fg.querySelector(".fg-matched");
    var tip = document.getElementById("fg-tip");
    var data, strings, root, total, zoomed;
    var query = "";
    var shown = [];

    // Another view's data (same form as the JSON block) replaces the graph's.
    function load(d) {
      data = d;
      strings = d.strings;
      root = buildTree(d);
      total = root ? root.value : 0;
      zoomed = root;
    }

    function fn(node) {
      return node.frame < 0 ? "all" : strings[data.frames[node.frame][0]];
    }
    function where(node) {
      if (node.frame < 0) return "";
      var f = data.frames[node.frame];
      return strings[f[1]] ? strings[f[1]] + ":" + f[2] : "";
    }
    // "function  file.py:line": the function first, then the file without its directory.
    function label(node) {
      if (node.frame < 0) return fn(node);
      var f = data.frames[node.frame];
      var file = strings[f[1]];
      return file ? fn(node) + "  " + baseName(file) + ":" + f[2] : fn(node);
    }
    function color(node) {
      if (node.frame < 0) return "hsl(0, 0%, 80%)";
      var file = strings[data.frames[node.frame][1]];
      var h = hash(file);
      var l = 55 + (hash(fn(node)) % 20);
      return "hsl(" + (h % 55) + ", 80%, " + l + "%)";
    }
    function matches(node) {
      return query !== "" && node.frame >= 0 &&
        (fn(node) + " " + where(node)).toLowerCase().indexOf(query) !== -1;
    }

    function draw() {
      while (frames.firstChild) frames.removeChild(frames.firstChild);
      shown = [];
      if (!root || root.value === 0) {
        frames.style.height = "";
        frames.textContent = "Nothing was live here.";
        matched.textContent = "";
        return;
      }
      var width = frames.clientWidth || 1000;
      var minPx = 0.5;
      var maxDepth = 0;
      var path = [];
      for (var a = zoomed.parent; a; a = a.parent) path.unshift(a);
      function place(node, x, w, faded) {
        var el = document.createElement("div");
        el.className = "fg-frame" + (faded ? " fg-faded" : "") + (matches(node) ? " fg-match" : "");
        el.style.left = (100 * x) + "%";
        el.style.width = (100 * w) + "%";
        el.style.top = (node.depth * ROW) + "px";
        el.style.background = color(node);
        el.setAttribute("data-i", String(shown.length));
        el.setAttribute("data-bytes", String(node.value));
        el.textContent = label(node);
        shown.push(node);
        frames.appendChild(el);
        if (node.depth > maxDepth) maxDepth = node.depth;
      }
      for (var i = 0; i < path.length; i++) place(path[i], 0, 1, true);
      var stack = [[zoomed, 0, 1]];
      while (stack.length) {
        var item = stack.pop();
        var node = item[0], x = item[1], w = item[2];
        place(node, x, w, false);
        var cx = x;
        for (var k = 0; k < node.kids.length; k++) {
          var kid = node.kids[k];
          var kw = w * kid.value / node.value;
          if (kw * width >= minPx) stack.push([kid, cx, kw]);
          cx += kw;
        }
      }
      frames.style.height = ((maxDepth + 1) * ROW) + "px";
      showMatched();
    }

    function showMatched() {
      if (query === "" || !root) { matched.textContent = ""; return; }
      var sum = 0;
      var stack = [root];
      while (stack.length) {
        var n = stack.pop();
        if (matches(n)) { sum += n.value; continue; }
        for (var k = 0; k < n.kids.length; k++) stack.push(n.kids[k]);
      }
      matched.textContent = "Matched: " + humanSize(sum) + " (" + pct(sum, total) + ")";
    }

    function nodeOf(target) {
      var i = target && target.getAttribute ? target.getAttribute("data-i") : null;
      return i === null ? null : shown[Number(i)];
    }

    frames.addEventListener("click", function (e) {
      var n = nodeOf(e.target);
      if (n) { zoomed = n; draw(); }
    });
    frames.addEventListener("mousemove", function (e) {
      var n = nodeOf(e.target);
      if (!n || !tip) return;
      var lines = [fn(n)];
      if (where(n)) lines.push(where(n));
      lines.push(humanSize(n.value) + " (" + pct(n.value, total) + " of " + humanSize(total) + ")");
      tip.textContent = lines.join("\n");
      tip.style.display = "block";
      tip.style.left = Math.min(e.clientX + 12, window.innerWidth - 320) + "px";
      tip.style.top = (e.clientY + 14) + "px";
    });
    frames.addEventListener("mouseleave", function () { if (tip) tip.style.display = "none"; });
    reset.addEventListener("click", function () { zoomed = root; draw(); });
    search.addEventListener("input", function () {
      query = search.value.toLowerCase();
      draw();
    });
    window.addEventListener("resize", draw);
    fg.memtapeSetData = function (d) { load(d); draw(); };
    load(JSON.parse(dataEl.textContent));
    draw();
  }

  // For the page's other scripts.
  window.memtapeUnits = { humanSize: humanSize, pct: pct, grouped: grouped };

  var boxes = document.querySelectorAll(".fg");
  for (var i = 0; i < boxes.length; i++) init(boxes[i]);
})();
