"""The `hetplan` command: one typer app; each command lives in its own module.

User mistakes (HetplanError) become one `error:` line and exit code 2, no traceback; a
request that cannot fit the cluster (InfeasibleError) exits 3, as `estimate` and `simulate`
do for an infeasible plan (README: exit status). `--version` prints the version;
`--install-completion` / `--show-completion` are typer's shell completion (bash, zsh, fish,
PowerShell) for the program name `hetplan`.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from typer._click import exceptions as click

from planner import __version__
from planner.errors import HetplanError, InfeasibleError
from planner.input_files import clip

EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3

app = typer.Typer(
    name="hetplan",
    help="Plan and run LLM training on GPU clusters that mix GPU types.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)

PROG_NAME = "hetplan"
"""The name completion scripts and usage lines use, also under `python -m planner.cli.main`."""


def _print_version(value: bool) -> None:
    if value:
        print(f"hetplan {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print hetplan's version and exit.")] = False) -> None:
    """Plan and run LLM training on GPU clusters that mix GPU types."""


def _register() -> None:
    # Each module adds its command(s) to `app` on import.
    from planner.cli import (  # noqa: F401
        cmd_calibrate,
        cmd_compare,
        cmd_demo,
        cmd_dryrun,
        cmd_estimate,
        cmd_export,
        cmd_frameworks,
        cmd_gpus,
        cmd_inspect,
        cmd_launch,
        cmd_models,
        cmd_plan,
        cmd_profile,
        cmd_replan,
        cmd_simulate,
        cmd_validate,
        cmd_whatif,
    )


def _usage_line(exc: click.UsageError) -> str:
    """click's usage error (unknown option, bad value, missing argument) as one line; click
    and typer would print a usage block and a framed box."""
    where = exc.ctx.command_path if exc.ctx is not None else "hetplan"
    return f"error: {clip(exc.format_message(), 300)} (see `{where} --help`)"


def main() -> None:
    _register()
    try:
        # standalone_mode=False: click raises its usage errors to us instead of printing them;
        # it then returns the exit code of `typer.Exit`/`--help` instead of exiting.
        code = app(prog_name=PROG_NAME, standalone_mode=False)
    except HetplanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_INFEASIBLE if isinstance(exc, InfeasibleError) else EXIT_BAD_INPUT)
    except click.NoArgsIsHelpError as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        print(_usage_line(exc), file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except click.ClickException as exc:  # e.g. a file option click could not open
        print(f"error: {clip(exc.format_message(), 300)}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except typer.Abort:  # Ctrl-C at a prompt, or end of input
        print("error: aborted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) and not isinstance(code, bool) else 0)


if __name__ == "__main__":
    # Under `python -m planner.cli.main` this file is `__main__`, a second copy of the module;
    # the command modules register on `planner.cli.main.app`, so run that copy's main().
    from planner.cli.main import main as _registered_main

    _registered_main()
