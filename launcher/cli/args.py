"""Command-line parsing: a subcommand, launcher flags, Hydra-style flags and overrides.

Hydra's override grammar is kept for everything that is not a flag, so
`python -m launcher plan recipe=dapo_async trainer.mesh.tp=4` reads as in any Hydra app.
"""
from dataclasses import dataclass, field

COMMANDS = ("run", "plan", "validate", "mesh", "export", "eval", "submit", "jobs", "sbatch", "rayjob")
FORMATS = ("text", "json")


class UsageError(Exception):
    """Bad command line (not bad config); exit code 2."""


@dataclass
class Args:
    command: str = "run"
    overrides: list[str] = field(default_factory=list)
    multirun: bool = False
    cfg: str | None = None
    help: str | None = None
    format: str = "text"
    all: bool = False
    keep: list[str] = field(default_factory=list)
    adapter: bool = False
    roots: list[str] = field(default_factory=list)
    """--root DIR: config roots added for this command (validate --all then checks only their recipes)."""
    version: bool = False
    dry_run: bool = False
    """--dry-run (sbatch, rayjob): print the script or manifest; write and submit nothing."""
    submit: bool = False
    """--submit (sbatch): also hand the written script to Slurm's `sbatch`."""


def _take_value(argv: list[str], i: int, flag: str) -> tuple[str, int]:
    token = argv[i]
    if "=" in token and token.startswith("--"):
        return token.split("=", 1)[1], i + 1
    if i + 1 >= len(argv):
        raise UsageError(f"{flag} needs a value")
    return argv[i + 1], i + 2


def parse_args(argv: list[str]) -> Args:
    args = Args()
    i, command_seen = 0, False
    while i < len(argv):
        token = argv[i]
        name = token.split("=", 1)[0]
        if name in ("-m", "--multirun"):
            args.multirun, i = True, i + 1
        elif name in ("-h", "--help"):
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            args.help, i = ("keys", i + 2) if nxt == "keys" else ("", i + 1)
        elif name in ("-c", "--cfg"):
            args.cfg, i = _take_value(argv, i, "--cfg")
            if args.cfg not in ("job", "all"):
                raise UsageError(f"--cfg takes `job` or `all`, got `{args.cfg}`")
        elif name == "--format":
            args.format, i = _take_value(argv, i, "--format")
            if args.format not in FORMATS:
                raise UsageError(f"--format takes one of {', '.join(FORMATS)}, got `{args.format}`")
        elif name == "--all":
            args.all, i = True, i + 1
        elif name == "--adapter":
            args.adapter, i = True, i + 1
        elif name == "--version":
            args.version, i = True, i + 1
        elif name == "--dry-run":
            args.dry_run, i = True, i + 1
        elif name == "--submit":
            args.submit, i = True, i + 1
        elif name == "--root":
            value, i = _take_value(argv, i, "--root")
            args.roots.append(value)
        elif name == "--keep":
            value, i = _take_value(argv, i, "--keep")
            args.keep.extend(v for v in value.split(",") if v)
        elif token.startswith("-"):
            raise UsageError(f"unknown flag `{token}`; see `python -m launcher --help`")
        elif token in COMMANDS and not command_seen and not args.overrides:
            args.command, command_seen, i = token, True, i + 1
        else:
            args.overrides.append(token)
            i += 1
    _check_job_flags(args)
    return args


def _check_job_flags(args: Args) -> None:
    """--dry-run and --submit name what happens to a written job file, so they need a command that
    writes one, and contradict each other."""
    if args.dry_run and args.command not in ("sbatch", "rayjob"):
        raise UsageError(f"--dry-run works with sbatch or rayjob, not `{args.command}`")
    if args.submit and args.command != "sbatch":
        raise UsageError(f"--submit works with sbatch, not `{args.command}` (a RayJob manifest is applied with "
                         "`kubectl apply -f`; Ray jobs are sent by the `submit` command)")
    if args.dry_run and args.submit:
        raise UsageError("--dry-run prints the script without submitting it; --submit submits it: pick one")
