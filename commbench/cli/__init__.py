"""The `commbench` command group. It only wires commands; each lives in its own module."""

from __future__ import annotations

import sys
import traceback
from typing import Any

import click

from commbench import __version__
from commbench.cli.compare import compare
from commbench.cli.env import env
from commbench.cli.export import export
from commbench.cli.history import history
from commbench.cli.isolate import isolate
from commbench.cli.list import list_
from commbench.cli.model import model
from commbench.cli.plot import plot
from commbench.cli.replay import replay
from commbench.cli.report import report
from commbench.cli.sweep import sweep
from commbench.cli.syncbn import syncbn
from commbench.console.lines import show_user_error, show_warning
from commbench.errors import ExitCode, UserError, interrupted_code, tell_launcher, warnings_shown_by

_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class CommbenchGroup(click.Group):
    """Usage mistakes (an unknown option, a bad choice) end in one line, like every other user error;
    every layer's warnings are shown here, one line each on stderr."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            with warnings_shown_by(show_warning):
                return super().main(*args, **kwargs)
        except _NO_ARGS_IS_HELP as exc:  # bare `commbench`: show the help, not an error line
            click.echo(exc.format_message())
            sys.exit(ExitCode.OK)
        except click.UsageError as exc:
            command = exc.ctx.command_path if exc.ctx else "commbench"
            line = f"commbench: error: {exc.format_message()} (see `{command} --help`)"
            click.echo(line, err=True)
            tell_launcher(line)
            sys.exit(exc.exit_code)
        except UserError as exc:
            show_user_error(exc)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort as exc:
            click.echo("commbench: aborted", err=True)
            stop = exc.__cause__ or exc.__context__
            sys.exit(interrupted_code(stop) if isinstance(stop, KeyboardInterrupt) else ExitCode.INTERRUPTED)
        except Exception as exc:  # a bug: keep its traceback, but never exit 1, which means wrong results
            traceback.print_exc()
            tell_launcher(f"commbench: internal error: {type(exc).__name__}: {exc}", traceback.format_exc())
            sys.exit(ExitCode.INTERNAL)


@click.group(cls=CommbenchGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="commbench")
def main() -> None:
    """Collective-communication benchmarks for PyTorch (NCCL, Gloo) and Horovod.

    Measures collective operations (all_gather, reduce_scatter_base, all_reduce, all_to_all,
    broadcast, barrier, ...), the grouped and bucketed forms training frameworks issue, and
    SyncBatchNorm layers, with nccl-tests' definitions of algbw and busbw; checks every result,
    and writes tidy CSV rows as it goes. Run `commbench list` for every op and what S means for it; docs/ in the repository
    explains the method, the ops, the CSV columns and the failure modes.
    """


main.add_command(sweep)
main.add_command(list_)
main.add_command(env)
main.add_command(plot)
main.add_command(report)
main.add_command(export)
main.add_command(compare)
main.add_command(syncbn)
main.add_command(model)
main.add_command(history)
main.add_command(isolate)
main.add_command(replay)
