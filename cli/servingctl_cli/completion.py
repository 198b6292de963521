"""`servingctl completion bash|zsh|fish`: a shell completion script generated from the argparse
parser itself (commands, subcommands, flags, their choices), so it never lags behind the commands;
profile names come from `servingctl completion --profiles`, which reads a cache the profile list
(`servingctl status`) refreshes, or the API when the cache is older than PROFILES_FRESH_S.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from servingctl_cli.client import state_dir

SHELLS = ("bash", "zsh", "fish")
PROFILES_FRESH_S = 600  # a profile list this old is asked again (profiles change with a deploy, rarely)
# Arguments that take a profile name: the positional NAME, and --profile.
PROFILE_DESTS = {"name", "profile"}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `servingctl completion`."""
    from servingctl_cli.main import summary

    parser = subparsers.add_parser(
        "completion",
        help=summary("completion"),
        description='Print a completion script. bash: add `eval "$(servingctl completion bash)"` to ~/.bashrc; '
        "zsh: the same with zsh in ~/.zshrc; fish: `servingctl completion fish > ~/.config/fish/completions/servingctl.fish`.",
    )
    parser.add_argument("shell", nargs="?", choices=SHELLS, help="the shell to complete in")
    parser.add_argument("--profiles", action="store_true", help="print the profile names to complete (the scripts call this)")
    parser.set_defaults(func=_completion)


def _completion(args: argparse.Namespace) -> int:
    if args.profiles:
        print("\n".join(profile_names()))
        return 0
    if args.shell is None:
        print("servingctl completion: error: name a shell: bash, zsh or fish", file=sys.stderr)
        return 2
    from servingctl_cli.main import build_parser

    tree = _tree(build_parser())
    print({"bash": bash, "zsh": zsh, "fish": fish}[args.shell](tree))
    return 0


def cache_path() -> Path:
    """Where the last profile list's names are kept for completion."""
    return state_dir() / "profiles.json"


def remember_profiles(names: list[str]) -> None:
    """Keep the profile names a listing just returned (completion reads them without a request)."""
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(names))
    except OSError:  # completion is a convenience: a read-only cache never fails a command
        pass


def profile_names() -> list[str]:
    """The profile names: the cache when fresh, else the API (refreshing the cache), else the old
    cache, else none. Never an error: a shell completing a word prints nothing then."""
    path = cache_path()
    try:
        cached = json.loads(path.read_text())
        fresh = time.time() - path.stat().st_mtime < PROFILES_FRESH_S
    except (OSError, ValueError):
        cached, fresh = [], False
    if fresh:
        return [str(name) for name in cached]
    try:
        from servingctl_cli.client import connect

        api = connect(argparse.Namespace(api_url=None, local=False, aws_profile=None, region=None))
        try:
            names = [p["name"] for p in api.get("/profiles")]
        finally:
            api.close()
    except Exception:
        return [str(name) for name in cached]
    remember_profiles(names)
    return names


@dataclass
class Node:
    """One command level: its subcommands, its flags (with their choices), and whether its
    positional or which flags take a profile name."""

    subcommands: dict[str, tuple[str, Node]] = field(default_factory=dict)
    flags: dict[str, tuple[str, list[str] | None, bool]] = field(default_factory=dict)  # flag -> (help, choices, takes value)
    profile_flags: list[str] = field(default_factory=list)
    profile_positional: bool = False
    positional_choices: list[str] = field(default_factory=list)  # e.g. completion's bash, zsh, fish


def _tree(parser: argparse.ArgumentParser) -> Node:
    """The parser as a tree of Nodes (every command's flags loaded: main.build_parser(None))."""
    node = Node()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                node.subcommands[name] = (helps.get(name, ""), _tree(sub))
        elif action.option_strings:
            takes = action.nargs != 0
            choices = [str(c) for c in action.choices] if action.choices else None
            for flag in action.option_strings:
                if flag.startswith("--") or flag in ("-h", "-o"):
                    node.flags[flag] = ((action.help or "").replace("%%", "%"), choices, takes)
            if action.dest in PROFILE_DESTS and takes:
                node.profile_flags += [f for f in action.option_strings if f.startswith("--")]
        elif action.dest in PROFILE_DESTS:
            node.profile_positional = True
        elif action.choices and not node.positional_choices:
            node.positional_choices = [str(c) for c in action.choices]
    return node


def _walk(node: Node, path: str = "") -> list[tuple[str, Node]]:
    """Every (command path, node): '' for the top, 'costs', 'costs prices', ..."""
    found = [(path, node)]
    for name, (_, sub) in node.subcommands.items():
        found += _walk(sub, f"{path} {name}".strip())
    return found


def bash(tree: Node) -> str:
    """The bash script (zsh runs it through bashcompinit). Levels are keyed by their command path,
    '_' for the top (bash refuses an empty key)."""
    subs, flags, valued, choices, profiles = [], [], [], [], []
    for path, node in _walk(tree):
        key = shlex.quote(path or "_")
        subs.append(f"[{key}]={shlex.quote(' '.join(node.subcommands or node.positional_choices))}")
        flags.append(f"[{key}]={shlex.quote(' '.join(node.flags))}")
        valued.append(f"[{key}]={shlex.quote(' '.join(f for f, (_, _, takes) in node.flags.items() if takes))}")
        for flag, (_, options, _) in node.flags.items():
            if options:
                where = f"{path or '_'} {flag}"
                choices.append(f"[{shlex.quote(where)}]={shlex.quote(' '.join(options))}")
        profiles.append(f"[{key}]={shlex.quote(' '.join([*node.profile_flags, *(['NAME'] if node.profile_positional else [])]))}")
    return f"""# servingctl completion for bash (generated by `servingctl completion bash`)
declare -gA _servingctl_subs=({" ".join(subs)})
declare -gA _servingctl_flags=({" ".join(flags)})
declare -gA _servingctl_valued=({" ".join(valued)})
declare -gA _servingctl_choices=({" ".join(choices)})
declare -gA _servingctl_profiles=({" ".join(profiles)})

_servingctl() {{
    # zsh (bashcompinit) indexes COMP_WORDS from 1 unless ksh_arrays is set; `level`, not `path`,
    # which zsh ties to PATH (a local path would hide the servingctl the profile names come from).
    [[ -n ${{ZSH_VERSION-}} ]] && setopt local_options ksh_arrays
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="" level="_" word i skip=0 positionals=0
    COMPREPLY=()
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        if ((skip)); then skip=0; continue; fi
        if [[ $word == -* ]]; then
            # a flag of this level or of the top (--output FORMAT) whose value is the next word
            [[ " ${{_servingctl_valued[$level]}} ${{_servingctl_valued[_]}} " == *" $word "* ]] && skip=1
            continue
        fi
        local next="$level $word"
        [[ $level == _ ]] && next="$word"
        if [[ " ${{_servingctl_subs[$level]}} " == *" $word "* && -n ${{_servingctl_flags[$next]+set}} ]]; then
            level="$next"
            positionals=0
        else
            positionals=$((positionals + 1))
        fi
    done
    ((COMP_CWORD > 1)) && prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    if [[ -n $prev && " ${{_servingctl_valued[$level]}} ${{_servingctl_valued[_]}} " == *" $prev "* ]]; then
        local key="$level $prev"
        [[ -z ${{_servingctl_choices[$key]+set}} ]] && key="_ $prev"
        if [[ -n ${{_servingctl_choices[$key]+set}} ]]; then
            COMPREPLY=($(compgen -W "${{_servingctl_choices[$key]}}" -- "$cur"))
        elif [[ " ${{_servingctl_profiles[$level]}} " == *" $prev "* ]]; then
            COMPREPLY=($(compgen -W "$(servingctl completion --profiles 2>/dev/null)" -- "$cur"))
        else
            COMPREPLY=($(compgen -f -- "$cur"))
        fi
        return 0
    fi
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "${{_servingctl_flags[$level]}}" -- "$cur"))
    elif [[ -n ${{_servingctl_subs[$level]}} ]]; then
        COMPREPLY=($(compgen -W "${{_servingctl_subs[$level]}}" -- "$cur"))
    elif ((positionals == 0)) && [[ " ${{_servingctl_profiles[$level]}} " == *" NAME "* ]]; then
        COMPREPLY=($(compgen -W "$(servingctl completion --profiles 2>/dev/null)" -- "$cur"))
    fi
    return 0
}}
complete -o default -F _servingctl servingctl"""


def zsh(tree: Node) -> str:
    """The zsh script: the bash one through zsh's bashcompinit (the same completions)."""
    return (
        "# servingctl completion for zsh (generated by `servingctl completion zsh`)\n"
        "autoload -U +X compinit && compinit\nautoload -U +X bashcompinit && bashcompinit\n" + bash(tree)
    )


def fish(tree: Node) -> str:
    """The fish script: one `complete` line per command, flag and choice."""
    lines = ["# servingctl completion for fish (generated by `servingctl completion fish`)", "complete -c servingctl -f"]
    for path, node in _walk(tree):
        words = path.split()
        if words:
            seen = [f"__fish_seen_subcommand_from {w}" for w in words]
            if node.subcommands:
                seen.append(f"not __fish_seen_subcommand_from {' '.join(node.subcommands)}")
            condition = "; and ".join(seen)
        else:
            condition = "__fish_use_subcommand"
        for name, (text, _) in node.subcommands.items():
            lines.append(f"complete -c servingctl -n {shlex.quote(condition)} -a {shlex.quote(name)} -d {shlex.quote(text[:60])}")
        for flag, (text, options, takes) in node.flags.items():
            if not flag.startswith("--"):
                continue
            spec = f"-l {flag[2:]}" + (" -r" if takes else "")
            if options:
                spec += f" -a {shlex.quote(' '.join(options))}"
            elif flag in node.profile_flags:
                spec += " -a '(servingctl completion --profiles 2>/dev/null)'"
            lines.append(f"complete -c servingctl -n {shlex.quote(condition)} {spec} -d {shlex.quote(text[:60])}")
        if node.profile_positional:
            lines.append(
                f"complete -c servingctl -n {shlex.quote(condition)} -a '(servingctl completion --profiles 2>/dev/null)'"
            )
    return "\n".join(lines)
