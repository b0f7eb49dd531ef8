"""The report of a ``%%memtape`` cell as a notebook output.

The HTML is ``memtape report``'s own page (timeline, flame graph at the peak, top sites,
leaks), self-contained, inside an ``<iframe srcdoc=...>``:

- it travels inside the notebook file: nothing is written beside the notebook, nothing
  is fetched, and the output still shows after the notebook is moved, shared or opened
  in VS Code (a frame pointing at a file by path shows nothing there);
- ``sandbox="allow-scripts"`` runs the report's scripts in an opaque origin: its styles,
  ids and scripts cannot clash with the notebook's, and it cannot reach the notebook's
  page or cookies;
- the page tells its height to the output (``postMessage``) so the frame fits it, whole,
  however tall it is or grows; where the front end does not run the output's script (an
  untrusted notebook) the frame keeps its default height and scrolls.

A ``text/plain`` part (the summary and the top sites) goes with it, for terminals and
front ends that do not show HTML."""

from __future__ import annotations

import html
import uuid

DEFAULT_HEIGHT_PX = 640
MIN_HEIGHT_PX = 200

# Inside the report: in a notebook the memory comes first, the run's details last. The
# vertical scrollbar's room is kept whether or not it shows, so that fitting the frame
# to the page (and so dropping the scrollbar) does not change the page's width, and so
# its height, again.
_NOTEBOOK_STYLE = """<style>
html { scrollbar-gutter: stable; }
body { display: flex; flex-direction: column; }
#metadata { order: 1; }
</style>"""

# Inside the report: posts the page's whole height to the output around it when it
# loads, whenever it grows or shrinks (a details row opened, the window resized), and
# when the output asks (its script may run after the page loaded: front ends insert an
# output, then run its scripts). A horizontal scrollbar's height counts: it covers the
# page's last line otherwise.
_HEIGHT_POSTER = """<script>(function () {
  var key = %(key)s;
  function post() {
    var root = document.documentElement;
    var height = root.scrollHeight + Math.max(0, innerHeight - root.clientHeight);
    parent.postMessage({memtapeReport: key, height: height}, "*");
  }
  addEventListener("load", post);
  addEventListener("toggle", post, true);
  addEventListener("message", function (e) {
    if (e.source === parent && e.data && e.data.memtapeReportAsk === key) post();
  });
  if (window.ResizeObserver) {
    var watch = new ResizeObserver(post);
    watch.observe(document.documentElement);
    watch.observe(document.body);
  }
})();</script>"""

# In the notebook's output: fits the frame to the whole height its page posts (no upper
# bound: the output grows with the report), and asks for it once it runs.
_HEIGHT_SETTER = """<script>(function () {
  var key = %(key)s;
  var frame = document.getElementById(key);
  if (!frame) return;
  addEventListener("message", function (e) {
    if (e.source !== frame.contentWindow || !e.data || e.data.memtapeReport !== key) return;
    var h = Math.max(Math.ceil(Number(e.data.height) || 0), %(min)d);
    if (frame.clientHeight !== h) frame.style.height = h + "px";
  });
  function ask() {
    if (frame.contentWindow) frame.contentWindow.postMessage({memtapeReportAsk: key}, "*");
  }
  frame.addEventListener("load", ask);
  ask();
})();</script>"""


def frame_html(report: str, note: str | None) -> str:
    """The output's HTML: an optional note above the report's frame."""
    # Unique across kernels: outputs of earlier sessions stay on the page.
    key = f"memtape-report-{uuid.uuid4().hex}"
    quoted_key = f'"{key}"'
    poster = _HEIGHT_POSTER % {"key": quoted_key}
    page = _insert_before(report, "</head>", _NOTEBOOK_STYLE)
    page = _insert_before(page, "</body>", poster)
    parts = []
    if note is not None:
        parts.append(
            '<p class="memtape-note" style="font-family:sans-serif;margin:0 0 6px">'
            f"{html.escape(note)}</p>"
        )
    parts.append(
        f'<iframe id="{key}" class="memtape-report" sandbox="allow-scripts" '
        f'title="memtape report" srcdoc="{html.escape(page, quote=True)}" '
        f'style="width:100%;height:{DEFAULT_HEIGHT_PX}px;border:1px solid #ccc;'
        'resize:vertical"></iframe>'
    )
    parts.append(_HEIGHT_SETTER % {"key": quoted_key, "min": MIN_HEIGHT_PX})
    return "\n".join(parts)


def _insert_before(page: str, tag: str, text: str) -> str:
    """``text`` inserted before the last ``tag`` of ``page`` (at the end if none)."""
    cut = page.rfind(tag)
    return page[:cut] + text + page[cut:] if cut >= 0 else page + text
