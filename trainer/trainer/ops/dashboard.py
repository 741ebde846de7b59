"""``python -m trainer.ops.dashboard``: trackio's dashboard over the runs in ``TRACKIO_DIR``.

Listens on ``DASHBOARD_HOST:DASHBOARD_PORT`` (default 0.0.0.0:7860 inside the container; Compose
publishes it on 127.0.0.1 only). The first screen shows what a run is for:

- a table of each run's held-out accuracy before and after training, per sampling mode, read from
  trackio's store (``train/held_out_accuracy_<mode>``: the first and the last value logged) and
  refreshed every few seconds;
- then the plots, unsmoothed unless the URL asks otherwise (trackio smooths by default, which turns
  a two-point before/after series into one flat line at its mean): the training reward and the
  held-out accuracy first, the other training metrics next, TRL's profiling timers last
  (``TRACKIO_PLOT_ORDER`` overrides the order).

Both come from serving trackio's own frontend from a copy whose ``index.html`` carries the table
and a line that sets ``smoothing=0`` in the URL when it has none (trackio's ``frontend_dir``).
"""

import html
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# trackio's order of plots: patterns first to last; groups without a pattern (profiling/) follow.
# `reward`, `loss`: the CPU AsyncGRPO loop logs its step records without a prefix.
PLOT_ORDER = "train/reward,train/held_out_accuracy_*,reward"
HELD_OUT_PREFIX = "train/held_out_accuracy_"
REFRESH_S = 5.0
UNSMOOTHED_BY_DEFAULT = (
    "<script>(() => { const url = new URL(window.location.href); if (!url.searchParams.has('smoothing')) "
    "{ url.searchParams.set('smoothing', '0'); window.history.replaceState(window.history.state, '', url); } })();"
    "</script>"
)
STYLE = (
    "<style>#rlstack-held-out{font:13px/1.4 system-ui,sans-serif;padding:8px 16px;border-bottom:1px solid #ddd}"
    "#rlstack-held-out table{border-collapse:collapse}#rlstack-held-out td,#rlstack-held-out th"
    "{padding:2px 12px 2px 0;text-align:left}#rlstack-held-out .n{text-align:right}</style>"
)


@dataclass(frozen=True)
class HeldOut:
    """A run's held-out accuracy in one sampling mode: the first value logged and the last one."""

    run: str
    mode: str
    before: float
    after: float | None  # None until a second evaluation is logged
    before_step: int
    after_step: int | None


def held_out_of(run: str, logs: Iterable[Mapping[str, Any]]) -> list[HeldOut]:
    """The held-out accuracies among a run's logged metrics (trackio's ``get_logs`` rows)."""
    points: dict[str, list[tuple[int, float]]] = {}
    for row in logs:
        for key, value in row.items():
            if key.startswith(HELD_OUT_PREFIX) and isinstance(value, (int, float)):
                points.setdefault(key[len(HELD_OUT_PREFIX) :], []).append((int(row.get("step", 0)), float(value)))
    out = []
    for mode, series in points.items():
        series.sort()
        last = series[-1] if len(series) > 1 else None
        out.append(HeldOut(run, mode, series[0][1], last[1] if last else None, series[0][0], last[0] if last else None))
    return out


def summary_html(rows: list[HeldOut]) -> str:
    """The table shown above the plots."""
    if not rows:
        return '<section id="rlstack-held-out">held-out accuracy: no evaluation logged yet</section>'
    cells = []
    for r in rows:
        after = f"{100 * r.after:.1f}% (step {r.after_step})" if r.after is not None else "-"
        change = f"{100 * (r.after - r.before):+.1f} pts" if r.after is not None else ""
        cells.append(
            f"<tr><td>{html.escape(r.run)}</td><td>{html.escape(r.mode)}</td>"
            f'<td class="n">{100 * r.before:.1f}% (step {r.before_step})</td><td class="n">{after}</td>'
            f'<td class="n">{change}</td></tr>'
        )
    return (
        '<section id="rlstack-held-out"><b>Held-out accuracy</b>: first and last evaluation of each run'
        '<table><tr><th>run</th><th>mode</th><th class="n">before</th><th class="n">after</th>'
        '<th class="n">change</th></tr>' + "".join(cells) + "</table></section>"
    )


def render_index(template: str, rows: list[HeldOut]) -> str:
    """trackio's ``index.html`` with the table first in the body and plots unsmoothed by default."""
    page = template.replace("<head>", f"<head>\n    {UNSMOOTHED_BY_DEFAULT}\n    {STYLE}", 1)
    return page.replace("<body>", f"<body>\n    {summary_html(rows)}", 1)


def stored_held_out(project: str | None) -> list[HeldOut]:
    """Every run's held-out accuracies in trackio's store (one project, or all of them)."""
    from trackio.sqlite_storage import SQLiteStorage

    rows = []
    for name in [project] if project else SQLiteStorage.get_projects():
        for run in SQLiteStorage.get_runs(name):
            rows += held_out_of(run, SQLiteStorage.get_logs(name, run, scalar_only=True))
    return rows


class SummaryFrontend:
    """A copy of trackio's bundled frontend whose ``index.html`` is re-rendered when the table changes
    (trackio's page reloads itself when its files change)."""

    def __init__(self, folder: Path, project: str | None) -> None:
        from trackio.frontend_config import BUNDLED_FRONTEND_DIR

        self.folder = folder
        self.project = project
        shutil.copytree(BUNDLED_FRONTEND_DIR, folder, dirs_exist_ok=True)
        self.template = (BUNDLED_FRONTEND_DIR / "index.html").read_text()
        self.rendered: str | None = None
        self.refresh()

    def refresh(self) -> None:
        try:
            rows = stored_held_out(self.project)
        except Exception as exc:  # noqa: BLE001 - a store being written to: keep the last table
            print(f"dashboard: held-out table not refreshed: {exc}", flush=True)
            return
        page = render_index(self.template, rows)
        if page != self.rendered:
            (self.folder / "index.html").write_text(page)
            self.rendered = page

    def keep_fresh(self) -> None:
        """Refresh every ``REFRESH_S`` seconds, in a daemon thread."""

        def loop() -> None:
            while True:
                time.sleep(REFRESH_S)
                self.refresh()

        threading.Thread(target=loop, name="held-out-table", daemon=True).start()


def main() -> None:
    """Serve the dashboard until stopped."""
    os.environ.setdefault("TRACKIO_PLOT_ORDER", PLOT_ORDER)
    import trackio

    host = os.environ.get("DASHBOARD_HOST", "0.0.0.0")
    port = int(os.environ.get("DASHBOARD_PORT", "7860"))
    project = os.environ.get("TRACKIO_PROJECT") or None
    frontend = SummaryFrontend(Path(tempfile.mkdtemp(prefix="rlstack-dashboard-")), project)
    frontend.keep_fresh()
    print(
        f"trackio dashboard: http://{host}:{port}/ over "
        f"{os.environ.get('TRACKIO_DIR', '~/.cache/huggingface/trackio')}",
        flush=True,
    )
    trackio.show(
        project=project,
        host=host,
        server_port=port,
        open_browser=False,
        block_thread=True,
        frontend_dir=str(frontend.folder),
    )


if __name__ == "__main__":
    main()
