"""The dashboard's held-out table: read from trackio's logged rows, rendered above trackio's plots."""

from trainer.ops.dashboard import HeldOut, held_out_of, render_index, summary_html

TEMPLATE = (
    '<html>\n  <head>\n    <title>Trackio</title>\n  </head>\n  <body>\n    <div id="app"></div>\n  </body>\n</html>'
)


def test_the_first_and_last_held_out_evaluation_of_a_run_per_mode() -> None:
    logs = [
        {"step": 0, "train/held_out_accuracy_T=1.0": 0.435, "train/held_out_accuracy_greedy": 0.79},
        *({"step": s, "train/reward": 0.1 * s} for s in range(1, 80)),
        {"step": 80, "train/held_out_accuracy_T=1.0": 0.87, "train/held_out_accuracy_greedy": 0.94},
    ]
    rows = held_out_of("grpo-cpu", reversed(logs))  # the store's order does not matter
    assert rows == [
        HeldOut("grpo-cpu", "T=1.0", 0.435, 0.87, 0, 80),
        HeldOut("grpo-cpu", "greedy", 0.79, 0.94, 0, 80),
    ]
    assert held_out_of("eval-final", [{"step": 0, "train/held_out_accuracy_greedy": 0.9}]) == [
        HeldOut("eval-final", "greedy", 0.9, None, 0, None)
    ]
    assert held_out_of("async", [{"step": 1, "reward": 0.5}]) == []


def test_the_table_shows_before_after_and_change_and_comes_first() -> None:
    rows = [HeldOut("grpo-cpu", "T=1.0", 0.435, 0.87, 0, 80), HeldOut("<b>x</b>", "greedy", 0.9, None, 0, None)]
    page = render_index(TEMPLATE, rows)
    assert (
        '<td>grpo-cpu</td><td>T=1.0</td><td class="n">43.5% (step 0)</td><td class="n">87.0% (step 80)</td>'
        '<td class="n">+43.5 pts</td>' in page
    )
    assert "<td>&lt;b&gt;x&lt;/b&gt;</td>" in page  # a run name is text, not markup
    assert page.index("rlstack-held-out") < page.index('<div id="app">')
    # Plots unsmoothed unless the URL says otherwise: set before trackio's app script reads the URL.
    assert page.index("searchParams.set('smoothing', '0')") < page.index("<title>")
    assert "no evaluation logged yet" in summary_html([])
