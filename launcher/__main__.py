"""Entry point: `python -m launcher [run|plan|validate|mesh|export|eval|submit|jobs|sbatch|rayjob] [flags] [overrides]`.

Composition, validation and planning never import torch, ray, vllm or megatron, so
`plan`/`validate` answer in well under a second; only `run` loads the RL stack. Each command's
module is imported in its branch, so `validate` (pre-commit, launcher/cli/validate.py) loads
neither the run directory's code nor the help text.
"""
import sys

from launcher.cli.args import Args, UsageError, parse_args
from launcher.cli.validate import cmd_validate
from launcher.config.compose import compose
from launcher.errors import ConfigError
from launcher.exit_codes import ExitCode
from launcher.paths import add_root
from launcher.validate.report import findings_json, findings_text


def _dispatch(args: Args) -> int:
    if args.version or args.help is not None:
        from launcher.cli.help import help_text, version_text

        sys.stdout.write(version_text() if args.version else help_text(args.help))
        return ExitCode.OK
    for root in args.roots:
        add_root(root)
    if args.command == "submit":  # with or without -m: each point becomes a Ray job
        from launcher.cli.submit import cmd_submit

        return cmd_submit(args)
    if args.command == "jobs":
        from launcher.cli.jobs import cmd_jobs

        return cmd_jobs(args.overrides, args.format)
    if args.multirun:
        from launcher.cli.sweep import cmd_sweep

        return cmd_sweep(args)
    if args.command == "validate":
        return cmd_validate(args.overrides, args.format, args.all, args.roots)
    if args.command == "export":
        from launcher.cli.export import cmd_export

        return cmd_export(args.overrides, args.adapter)
    if args.command == "eval":
        from launcher.cli.eval import cmd_eval

        return cmd_eval(args.overrides, args.format)
    if args.command == "mesh":
        from launcher.cli.mesh import cmd_mesh

        return cmd_mesh(args.overrides, args.format)
    from launcher.cli.commands import cmd_plan, cmd_run
    from launcher.driver.records.rundir import resolved_yaml

    composed = compose(args.overrides)
    if args.cfg is not None:
        sys.stdout.write(resolved_yaml(composed))
        return ExitCode.OK
    if args.command == "plan":
        return cmd_plan(composed, args.format, args.keep)
    if args.command == "sbatch":
        from launcher.cli.sbatch import cmd_sbatch

        return cmd_sbatch(composed, args.dry_run, args.submit)
    if args.command == "rayjob":
        from launcher.cli.rayjob import cmd_rayjob

        return cmd_rayjob(composed, args.dry_run)
    return cmd_run(composed)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv)
    except UsageError as err:
        sys.stderr.write(f"usage error: {err}\n")
        return ExitCode.CONFIG
    try:
        return _dispatch(args)
    except UsageError as err:
        sys.stderr.write(f"usage error: {err}\n")
        return ExitCode.CONFIG
    except ConfigError as err:
        if args.format == "json":
            sys.stdout.write(findings_json(err.findings, None) + "\n")
        else:
            sys.stderr.write(findings_text(err.findings, "config error: "))
        return ExitCode.CONFIG
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return ExitCode.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
