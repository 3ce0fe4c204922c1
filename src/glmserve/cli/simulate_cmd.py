"""``glmserve simulate``: run the SGLang stand-in in the foreground (all args pass through)."""

from __future__ import annotations

import typer

from glmserve.cli._app import app

_SHORT = (
    "Run the SGLang 0.5.9 simulator: same argv, logs, HTTP/SSE and faults as "
    "sglang.launch_server, timed by a documented cost model. `glmserve simulate --help` "
    "prints its options and cost model.\n\n"
    "Example:\n"
    "  glmserve simulate --model-path glm-5 --tp-size 8 \\\n"
    "    --attention-backend flashinfer --port 30000 --sim-speed 10"
)


@app.command(
    "simulate",
    help=_SHORT,
    add_help_option=False,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def simulate(ctx: typer.Context) -> None:
    """Pass every argument to the simulator; its exit status becomes ours."""
    from glmserve.simulator import main, sim_help

    args = list(ctx.args)
    if not args or any(a in ("--help", "-h", "--sim-help") for a in args):
        typer.echo(sim_help(), nl=False)
        raise typer.Exit(0)
    # SystemExit, not typer.Exit: with standalone_mode=False click would swallow the latter's
    # code, and the simulator's status (2 usage, 1 port in use) is the contract.
    raise SystemExit(main(args))
