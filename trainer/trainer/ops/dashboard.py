"""``python -m trainer.dashboard``: trackio's dashboard over the runs in ``TRACKIO_DIR``.

Listens on ``DASHBOARD_HOST:DASHBOARD_PORT`` (default 0.0.0.0:7860 inside the container; Compose
publishes it on 127.0.0.1 only). The first screen shows what a run is for: the training reward and
the held-out accuracy, then the other training metrics; TRL's profiling timers come last
(``TRACKIO_PLOT_ORDER`` overrides the order).
"""

import os

# trackio's order of plots: patterns first to last; groups without a pattern (profiling/) follow.
# `reward`, `loss`: the CPU AsyncGRPO loop logs its step records without a prefix.
PLOT_ORDER = "train/reward,train/held_out_accuracy_*,reward"


def main() -> None:
    """Serve the dashboard until stopped."""
    os.environ.setdefault("TRACKIO_PLOT_ORDER", PLOT_ORDER)
    import trackio

    host = os.environ.get("DASHBOARD_HOST", "0.0.0.0")
    port = int(os.environ.get("DASHBOARD_PORT", "7860"))
    print(
        f"trackio dashboard: http://{host}:{port}/ over "
        f"{os.environ.get('TRACKIO_DIR', '~/.cache/huggingface/trackio')}",
        flush=True,
    )
    trackio.show(
        project=os.environ.get("TRACKIO_PROJECT") or None,
        host=host,
        server_port=port,
        open_browser=False,
        block_thread=True,
    )


if __name__ == "__main__":
    main()
